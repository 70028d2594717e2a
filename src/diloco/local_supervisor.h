// `headroom diloco local`'s supervisor: N worker processes of one run on one machine, followed
// through the run's agreed rounds on etcd, with churn injected (a worker SIGKILLed during one
// round, a fresh one joining during another). What the workers train and report is theirs; this
// starts, watches and reaps them, and says when each round was first seen agreed.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/error.h"
#include "coord/store.h"

namespace headroom::diloco {

// --churn kill-at-round:R[,join-at-round:R2] (-1: none).
struct Churn {
  int kill_at_round = -1;
  int join_at_round = -1;
};
// "" is no churn. R >= 1, and a join after the kill.
Result<Churn> ParseChurn(const std::string& text);

// The last round of `run` with an agreed model on `store`; -1 before the first.
int LastAgreedRound(coord::Store& store, const std::string& run);

struct LocalChild {
  std::string name;
  pid_t pid = -1;
  bool killed = false;  // on purpose (the churn)
  bool done = false;
  int status = 0;  // waitpid's
};

struct LocalRunPlan {
  coord::Store* store = nullptr;  // the run's etcd
  std::string run;
  int rounds = 1;       // the run's, for progress lines
  int workers = 1;      // at the start
  std::string out_dir;  // each worker's NAME.log (stderr) and NAME.stdout
  Churn churn;
  uint64_t seed = 1;           // where in a round the kill falls, and whom it hits
  double stall_limit_s = 600;  // no round agreed for this long: every worker killed, an error
  // The command line of worker `name` (argv[0] a path), in a run that starts with `workers`;
  // `first`: worker 0 of the start.
  std::function<std::vector<std::string>(const std::string& name, int workers, bool first)> argv_of;
};

struct LocalRunResult {
  std::vector<LocalChild> children;
  std::map<int, double> agreed_at_s;  // round -> when first seen agreed (since the start)
  double wall_s = 0.0;
  double killed_at_s = -1.0;
  int killed_round = -1;
  int joined_round = -1;
  std::string killed_name;
};

// Starts the workers and supervises them until every one has ended. An error (every worker
// SIGKILLed first) when one cannot start, no round is agreed for stall_limit_s, or a worker not
// killed on purpose ends badly (its log's last line in the message). `progress` gets one line
// per agreed round, kill and join.
Result<LocalRunResult> SuperviseLocal(const LocalRunPlan& plan,
                                      const std::function<void(const std::string&)>& progress);

}  // namespace headroom::diloco
