// The coordinator's probe of its prefix at start (cli/etcd_options.h): the one line says what
// happened by the error's kind -- etcd refusing (credentials, permissions) or not answering (no
// quorum) -- and names --etcd-user only where credentials can be the cause.
#include "cli_main/etcd_options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace headroom::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kPrefix = "/headroom/s/";

TEST(EtcdProbeError, NoAnswerNamesTheWaitAndQuorumNotCredentials) {
  // What EtcdStore says when every member timed out (etcd without quorum answers a
  // linearizable read with "request timed out", or not at all).
  for (const Error& e :
       {Error::Unavailable("etcd at http://127.0.0.1:2379: /v3/kv/range: http://127.0.0.1:2379: "
                           "etcdserver: request timed out (code 14)"),
        Error::OutcomeUnknown("etcd at http://127.0.0.1:2379: /v3/kv/range: no whole answer "
                              "within 4 s")}) {
    const Error out = EtcdProbeError(kPrefix, e, 8.04, /*has_user=*/false);
    EXPECT_EQ(out.kind(), ErrorKind::kIo);
    EXPECT_THAT(out.message(),
                HasSubstr("etcd did not answer a read of /headroom/s/ within 8.0 s (no quorum?"));
    EXPECT_THAT(out.message(), HasSubstr(e.message()));
    EXPECT_THAT(out.message(), Not(HasSubstr("refuses")));
    EXPECT_THAT(out.message(), Not(HasSubstr("--etcd-user")));
    EXPECT_EQ(out.message().find('\n'), std::string::npos);
  }
}

TEST(EtcdProbeError, ARefusalNamesTheCredentialFlagsWhenNoUserIsGiven) {
  // etcd's PERMISSION_DENIED (code 7) reaches callers as an I/O error; UNAUTHENTICATED as its own.
  const Error denied = Error::Io(
      "etcd at http://127.0.0.1:2379: /v3/kv/range: etcdserver: permission denied (code 7)");
  Error out = EtcdProbeError(kPrefix, denied, 0.01, /*has_user=*/false);
  EXPECT_EQ(out.kind(), ErrorKind::kIo);
  EXPECT_EQ(out.message(), "etcd refuses to read /headroom/s/: " + denied.message() +
                               " (--etcd-user and --etcd-password-file)");
  // With a user: the user lacks the permission; the flags are given already.
  out = EtcdProbeError(kPrefix, denied, 0.01, /*has_user=*/true);
  EXPECT_EQ(out.message(), "etcd refuses to read /headroom/s/: " + denied.message());
  const Error token = Error::Unauthenticated("etcd: invalid auth token (code 16)");
  out = EtcdProbeError(kPrefix, token, 0.01, /*has_user=*/true);
  EXPECT_THAT(out.message(), HasSubstr("etcd refuses to read /headroom/s/: "));
  EXPECT_THAT(out.message(), Not(HasSubstr("quorum")));
}

}  // namespace
}  // namespace headroom::cli
