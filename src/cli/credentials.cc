#include "cli/credentials.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cstdlib>

namespace headroom::cli {

std::string CredentialFile(std::string_view id) {
  const char* dir = std::getenv("CREDENTIALS_DIRECTORY");
  if (dir == nullptr || *dir == '\0' || id.empty() || id.find('/') != std::string_view::npos ||
      id == "." || id == "..") {
    return "";
  }
  std::string path = fmt::format("{}/{}", dir, id);
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return "";
  return path;
}

namespace {

// `file` from the credential `id` where no file is named; the line saying so into `taken`.
void Take(std::vector<std::string>& taken, std::string* file, const char* id, const char* flag) {
  if (!file->empty()) return;
  std::string path = CredentialFile(id);
  if (path.empty()) return;
  taken.push_back(fmt::format("{} from the systemd credential '{}' ({})", flag, id, path));
  *file = std::move(path);
}

}  // namespace

std::vector<std::string> TakeParentCredentials(EtcdOptions* parent) {
  std::vector<std::string> taken;
  if (!parent->user.empty()) {
    Take(taken, &parent->password_file, "parent-etcd-password", "--parent-etcd-password-file");
  }
  if (!parent->cert.empty()) Take(taken, &parent->key, "parent-etcd-key", "--parent-etcd-key");
  return taken;
}

std::vector<std::string> TakeCredentials(TokenArgs* token, EtcdOptions* etcd) {
  std::vector<std::string> taken;
  const auto take = [&taken](std::string* file, const char* id, const char* flag) {
    Take(taken, file, id, flag);
  };
  // A token given inline (--token, HEADROOM_TOKEN) is named too: the credential does not add one.
  const char* env = std::getenv("HEADROOM_TOKEN");
  if (token->token.empty() && (env == nullptr || *env == '\0')) {
    take(&token->token_file, "token", "--token-file");
  }
  if (!etcd->user.empty()) take(&etcd->password_file, "etcd-password", "--etcd-password-file");
  if (!etcd->cert.empty()) take(&etcd->key, "etcd-key", "--etcd-key");
  return taken;
}

}  // namespace headroom::cli
