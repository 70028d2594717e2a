// For libraries that write to sockets without MSG_NOSIGNAL (Debian's cpp-httplib 0.11, Gloo): a
// write to a peer that went away would raise SIGPIPE and end the process. ScopedSigpipeBlock
// blocks SIGPIPE in this thread for its lifetime and discards one raised meanwhile (threads
// started meanwhile inherit the block). The process's disposition of SIGPIPE is left alone.
#pragma once

#include <pthread.h>
#include <signal.h>
#include <time.h>

namespace headroom {

class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~ScopedSigpipeBlock() {
    sigset_t pending;
    sigpending(&pending);
    if (!was_pending_ && sigismember(&pending, SIGPIPE) == 1) {
      const timespec zero{};
      sigtimedwait(&pipe_, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  sigset_t pipe_;
  sigset_t old_;
  bool was_pending_ = false;
};

}  // namespace headroom
