#pragma once
// The Communicator (communicator.h) between threads of one process, for unit tests: a LocalGroup
// of `size` members, each member's Communicator used from its own thread. Same semantics as the
// Gloo one (gloo_communicator.h): AllGather in rank order, AllReduceSum the same bits on every
// member, AllToAll member i's chunk for me at out[i], Broadcast root's bytes, and an error instead
// of a hang when a member is gone or stalls. Also the traffic formulas both implementations report
// (neither measures bytes: the local one moves none, Gloo exposes no counters).
#include <cstddef>
#include <memory>

#include "common/waiter.h"
#include "diloco_comm/communicator.h"

namespace headroom::diloco {

// Bytes one member sends and receives in each collective, as Gloo's algorithms move them
// (k = size; n = bytes per member; a group of 1 moves nothing):
// - all-gather (ring): sent = received = (k - 1) n;
// - all-reduce of `floats` floats (ring: a reduce-scatter, then an all-gather of the reduced
//   chunks; k chunks of c = ceil(floats / k) floats): sent = received = 2 (k - 1) c * 4 bytes.
//   Gloo cuts the buffer into segments (at least 2k, at most 1 MiB each) and pads the last
//   ones, so the members whose segments hold the end of the buffer move less than this, by up
//   to the padding (under 5 bytes a segment: negligible for large buffers, up to a chunk for a
//   few floats); the group as a whole moves 2 (k - 1) n, n = 4 floats bytes;
// - all-to-all of k chunks of c bytes (each member sends chunk i straight to member i): sent =
//   received = (k - 1) c;
// - broadcast (Gloo's binomial tree on the ranks relative to the root, v = (rank - root) mod k):
//   every member but the root receives n once; member v sends n to each v + 2^i < k with
//   2^i > v, so the root sends ceil(log2 k) n (k = 3: 2 n; k = 4: 2 n, and v = 1 sends n), and
//   the group as a whole sends and receives (k - 1) n.
// REQUIRES: size >= 1; for BroadcastTraffic 0 <= rank, root < size.
TrafficCounters AllGatherTraffic(std::size_t bytes, int size);
TrafficCounters AllReduceTraffic(std::size_t floats, int size);
TrafficCounters AllToAllTraffic(std::size_t chunk_bytes, int size);
TrafficCounters BroadcastTraffic(std::size_t bytes, int size, int rank, int root);

// A group of threads that rendezvous for each collective through one mutex and condition
// variable: a member's n-th call joins the group's n-th round, the last to arrive computes the
// result (the all-reduce sums rank 0 + rank 1 + ... in that order, once, so every member gets
// the same bits), and each member waits for it until the group's timeout.
//
// Failures, as with Gloo (where a member that fails closes its connections):
// - Kill(r) marks member r gone ("rank r is gone (killed)");
// - a call that waits longer than the timeout (on the group's Waiter: the steady clock, or a
//   test's simulated time) fails ("timed out after T s waiting for rank(s)
//   ...") and its member is gone from then on ("rank r is gone (timed out)");
// - once a member is gone, every round not complete by then fails, pending calls at once and
//   later ones when they are made (the gone member's own included): the group is broken;
// - members that call different collectives, or with different lengths or roots, in one round
//   all fail ("mismatched calls", Error::Usage; the others are Error::Io).
// A call that fails counts no traffic.
//
// Thread-safe: Member and Kill from any thread. Each Communicator is used from one thread at a
// time (its traffic() too); it may outlive the group.
class LocalGroup {
 public:
  // REQUIRES: size >= 1, timeout_s > 0; `waiter` outlives the group and its members.
  LocalGroup(int size, double timeout_s, Waiter& waiter = SteadyWaiter());
  ~LocalGroup();
  LocalGroup(const LocalGroup&) = delete;
  LocalGroup& operator=(const LocalGroup&) = delete;

  int size() const;
  double timeout_s() const;

  // Member `rank`'s end of the group. REQUIRES: 0 <= rank < size(); each rank taken once.
  std::unique_ptr<Communicator> Member(int rank);
  // Marks `rank` gone (idempotent). REQUIRES: 0 <= rank < size().
  void Kill(int rank);

 private:
  friend class LocalCommunicator;
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace headroom::diloco
