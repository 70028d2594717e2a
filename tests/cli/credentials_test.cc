// Secrets from systemd credentials (cli/credentials.h; docs/INSTALL.md, "Secrets"): a secret
// named nowhere is taken from $CREDENTIALS_DIRECTORY/<id>; what is named explicitly wins; the
// etcd password only with a user, the etcd key only with a certificate. Issue 53, item 4.
#include "cli/credentials.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace headroom::cli {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;

class Credentials : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("headroom_credentials_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ::setenv("CREDENTIALS_DIRECTORY", dir_.c_str(), 1);
    ::unsetenv("HEADROOM_TOKEN");
  }
  void TearDown() override {
    ::unsetenv("CREDENTIALS_DIRECTORY");
    fs::remove_all(dir_);
  }
  std::string Put(const std::string& id) {
    const fs::path p = dir_ / id;
    std::ofstream(p) << "secret\n";
    return p.string();
  }
  fs::path dir_;
};

TEST_F(Credentials, ASecretNamedNowhereIsTakenFromItsCredential) {
  const std::string token = Put("token"), password = Put("etcd-password"), key = Put("etcd-key");
  TokenArgs t;
  EtcdOptions e;
  e.user = "agent-j";
  e.cert = "/etc/headroom/client.pem";
  const auto lines = TakeCredentials(&t, &e);
  EXPECT_EQ(t.token_file, token);
  EXPECT_EQ(e.password_file, password);
  EXPECT_EQ(e.key, key);
  EXPECT_THAT(lines,
              ElementsAre("--token-file from the systemd credential 'token' (" + token + ")",
                          "--etcd-password-file from the systemd credential 'etcd-password' (" +
                              password + ")",
                          "--etcd-key from the systemd credential 'etcd-key' (" + key + ")"));
}

TEST_F(Credentials, WhatIsNamedWinsAndAPasswordNeedsAUserAndAKeyACertificate) {
  Put("token");
  Put("etcd-password");
  Put("etcd-key");
  TokenArgs named_file{"", "/etc/headroom/token"};
  TokenArgs inline_token{"s3cr3t", ""};
  EtcdOptions e;  // no user, no certificate
  EXPECT_TRUE(TakeCredentials(&named_file, &e).empty());
  EXPECT_EQ(named_file.token_file, "/etc/headroom/token");
  EXPECT_TRUE(TakeCredentials(&inline_token, &e).empty());
  EXPECT_EQ(inline_token.token_file, "");
  EXPECT_EQ(e.password_file, "");
  EXPECT_EQ(e.key, "");
  ::setenv("HEADROOM_TOKEN", "from-the-environment", 1);
  TokenArgs none;
  EXPECT_TRUE(TakeCredentials(&none, &e).empty());
  EXPECT_EQ(none.token_file, "");
  ::unsetenv("HEADROOM_TOKEN");
}

TEST_F(Credentials, NoDirectoryNoCredentialOrNotARegularFileIsNone) {
  EXPECT_EQ(CredentialFile("token"), "");  // none passed
  fs::create_directories(dir_ / "token");
  EXPECT_EQ(CredentialFile("token"), "");  // a directory
  Put("etcd-key");
  EXPECT_EQ(CredentialFile("../" + dir_.filename().string() + "/etcd-key"), "");  // not a name
  EXPECT_EQ(CredentialFile("etcd-key"), (dir_ / "etcd-key").string());
  ::unsetenv("CREDENTIALS_DIRECTORY");
  EXPECT_EQ(CredentialFile("etcd-key"), "");
}

}  // namespace
}  // namespace headroom::cli
