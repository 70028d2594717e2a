#pragma once
// The Communicator (communicator.h) on Gloo over TCP; gloo_communicator.cc is the one file that
// includes Gloo (Debian's libgloo-dev). Members find each other through the run's store
// (coord::Store: etcd, or the in-memory one in tests): each member writes its listening
// addresses under `prefix` and reads the others', then every pair of members connects (a full
// mesh). The store is used only while connecting.
//
// Collectives: AllGather is Gloo's ring all-gather; AllToAll Gloo's all-to-all (each chunk
// straight to its member, every pair at once); AllReduceSum Gloo's ring all-reduce (each
// chunk is summed once, along the ring, then copied to every member: the same bits on every
// member; the order of the terms is the ring's, not rank order, so the bits may differ in the
// last place from the local implementation's rank-order sum); Broadcast Gloo's binomial tree.
//
// Traffic: Gloo exposes no counters. traffic() adds up, for each collective that succeeded, the
// bytes its algorithm moves (AllGatherTraffic, AllToAllTraffic, AllReduceTraffic, BroadcastTraffic
// in local_communicator.h).
//
// Failures: every Gloo exception is caught and returned as an Error::Io naming the operation and
// Gloo's message. A member that never joins makes ConnectGloo fail after `timeout_s`. A member
// that dies closes its connections: the others' next or pending call fails at once ("Connection
// closed by peer [address]:port" -- Gloo names the peer's address, not its rank). One that stalls
// makes their call fail after `timeout_s` ("Timed out waiting ... ms for recv operation"), and a
// member that times out closes its connections, so the rest fail at once too. After a failed call
// the group is broken (Gloo closes its connections): every later call fails; connect a new group
// under a new prefix.
//
// SIGPIPE: Gloo writes to its sockets without MSG_NOSIGNAL, so a write to a peer that died would
// end the process. ConnectGloo and every collective block SIGPIPE in the calling thread while
// they run (and discard one raised meanwhile); Gloo's own I/O thread is started with SIGPIPE
// blocked. The process's disposition of SIGPIPE is left alone.
//
// Not thread-safe: one thread uses a communicator at a time.
#include <memory>
#include <string>

#include "common/error.h"
#include "coord/store.h"
#include "diloco_comm/communicator.h"

namespace headroom::diloco {

struct GlooOptions {
  // Where the members' addresses go: "/headroom-diloco/<run>/gloo/<round>/". The keys are
  // prefix + Gloo's names ("rank_0", "0", ...). A group needs a prefix no earlier group used
  // (stale addresses would be read); the caller deletes the keys when the group is done.
  std::string prefix;
  int rank = 0;
  int size = 1;
  // Bounds connecting (the whole rendezvous and each connection) and each collective.
  double timeout_s = 30.0;
  // The address this member listens on and the others connect to: a hostname or an IP address.
  std::string host = "127.0.0.1";
  // A network interface ("eth0") to listen on instead of `host`, when not empty.
  std::string iface;
};

// Joins the group: writes this member's addresses to `store`, waits for every other member's,
// and connects to each. Error::Usage for bad options (empty prefix, size < 1, rank outside
// [0, size), timeout_s not positive, a host that does not resolve); Error::Io when a member does
// not join within timeout_s, the store fails meanwhile, or a connection fails.
// Thread-safe as far as `store` is (members of one process may connect from their own threads).
Result<std::unique_ptr<Communicator>> ConnectGloo(coord::Store& store, const GlooOptions& options);

}  // namespace headroom::diloco
