#pragma once
// A round's group and its verdict, on the run's store (docs/DILOCO.md, "A round, and the
// invariant"; the keys are in diloco/worker.h): who is a member, who arrived at a round, the one
// group each attempt closes (create-if-absent, whoever wins), and the hashes after it, judged by
// majority. The waits poll the store through the caller's `pause` (one poll period, the lease
// renewed), so they run on whatever clock the caller has.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/error.h"
#include "coord/store.h"

namespace headroom::diloco {

std::string RunPrefix(const std::string& run);
// "00000012": rounds zero-padded so that keys sort by round.
std::string RoundKey(int round);

// One member of a run, as its record in the store says.
struct Member {
  std::string id;         // its lease, hex
  int joined_round = -1;  // the first round whose starting model it holds; -1 while it syncs
};

// Me in the run: the store, my member id and lease, and how I wait.
struct RunMember {
  coord::Store* store = nullptr;
  std::string prefix;  // RunPrefix(run)
  std::string id;      // my lease, hex
  coord::LeaseId lease = 0;
  std::function<double()> now_s;
  std::function<Status()> pause;  // one poll period; fails when my lease is gone
};

// members/<id> records that parse (a record that does not is ignored, never trusted in part).
Result<std::vector<Member>> LiveMembers(coord::Store& store, const std::string& prefix);
Status PublishMember(const RunMember& me, const std::string& name, int pid, int joined_round);

// The run's settings: written by the first worker (create-if-absent), else they must equal
// `config_json` (a usage error naming both otherwise).
Status CheckConfig(coord::Store& store, const std::string& prefix, const std::string& run,
                   const std::string& config_json);
// Whether a round has been agreed (a newcomer then joins through a donor).
Result<bool> RunStarted(coord::Store& store, const std::string& prefix);

// Arrives at (round, attempt) and returns its group, the ids in rank order: every member that
// arrived before the group closed. Closes it when every candidate still alive has arrived, or
// when deadline_s has passed since I arrived.
Result<std::vector<std::string>> CloseGroup(const RunMember& me, int round, int attempt,
                                            const std::vector<std::string>& candidates,
                                            double deadline_s);

// The verdict on a round's hashes. The majority hash (a tie: the lowest rank's) is the round's
// model; a member whose hash differs is evicted; the lowest rank holding the majority is the
// donor.
struct HashVerdict {
  std::string majority;
  bool agreed = true;    // every hash read was the majority
  int disagreeing = 0;   // members whose hash differs
  bool evicted = false;  // mine differs
  bool donor = false;    // I am the donor
};
// The judgement alone: `hashes` by member id (members of `group` that published none are left
// out), `mine` my own hash, my_rank my index in group.
HashVerdict JudgeHashes(const std::vector<std::string>& group,
                        const std::map<std::string, std::string>& hashes, const std::string& mine,
                        int my_rank);
// Publishes my hash after `round`, reads the group's until all are in or timeout_s has passed,
// and judges them.
Result<HashVerdict> ExchangeHashes(const RunMember& me, int round,
                                   const std::vector<std::string>& group, int my_rank,
                                   const std::string& mine, double timeout_s);

}  // namespace headroom::diloco
