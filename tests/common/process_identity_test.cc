#include "common/process_identity.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>

namespace headroom {
namespace {

// The value of `key` in an identity ("k=v k=v ...") replaced.
std::string Replace(std::string s, const std::string& key, const std::string& value) {
  const size_t at = (" " + s).find(" " + key + "=");
  if (at == std::string::npos) return s;
  const size_t from = at + key.size() + 1;
  const size_t to = std::min(s.find(' ', from), s.size());
  return s.replace(from, to - from, value);
}

TEST(ProcessIdentity, NamesThisProcessAndItIsNotGone) {
  const std::string me = ThisProcessIdentity();
  ASSERT_FALSE(me.empty());
  EXPECT_NE(me.find("pid=" + std::to_string(getpid()) + " "), std::string::npos) << me;
  EXPECT_FALSE(IdentityGoneHere(me));
}

TEST(ProcessIdentity, AProcessThatExitedIsGoneHere) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();  // until killed
    _exit(0);
  }
  const std::string id = ProcessIdentity(child);
  ASSERT_FALSE(id.empty());
  EXPECT_FALSE(IdentityGoneHere(id));
  kill(child, SIGKILL);
  // Dead and not yet reaped (a zombie) is gone already; reaped, too.
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT), 0);
  EXPECT_TRUE(IdentityGoneHere(id));
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(IdentityGoneHere(id));
}

TEST(ProcessIdentity, ARunningPidWithAnotherStartTimeIsGone) {
  // The pid reused by another process: this one's start time differs from the recorded one.
  EXPECT_TRUE(IdentityGoneHere(Replace(ThisProcessIdentity(), "start", "1")));
}

TEST(ProcessIdentity, ElsewhereNothingCanBeToldSoNeverGone) {
  const std::string me = ThisProcessIdentity();
  // Another machine, boot or pid namespace (a container): never gone, whatever the pid.
  EXPECT_FALSE(IdentityGoneHere(Replace(Replace(me, "host", "elsewhere"), "start", "1")));
  EXPECT_FALSE(IdentityGoneHere(Replace(Replace(me, "boot", "x"), "start", "1")));
  EXPECT_FALSE(IdentityGoneHere(Replace(Replace(me, "pidns", "1"), "start", "1")));
  // Malformed: never gone.
  for (const std::string& bad :
       {std::string(), std::string("pid=1"), Replace(me, "pid", "x"), Replace(me, "pid", "-1"),
        me + " start=2", std::string("host= boot=1 pidns=1 pid=1 start=1"), std::string("=")}) {
    EXPECT_FALSE(IdentityGoneHere(bad)) << bad;
  }
}

}  // namespace
}  // namespace headroom
