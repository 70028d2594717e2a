#pragma once
// The collectives DiLoCo and its data-parallel baseline need, behind one interface
// (docs/DILOCO.md, "Communication"). gloo_communicator.cc is the one file that talks to Gloo
// (TCP, rendezvous in the run's store); local_communicator.cc is a thread-based implementation
// with the same semantics for unit tests. A group is fixed for its life: one outer round's
// members, in rank order. Every call is collective: each member calls it in the same order with
// buffers of the same size. A member that dies or stalls makes the others' call fail with an
// error naming the peer (or the timeout), never hang past the group's timeout.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"

namespace headroom::diloco {

// Bytes this member put on the wire and took off it, as the algorithms move them (Gloo's ring
// collectives: an all-gather of n bytes over k members sends and receives (k - 1) n; an
// all-reduce of n bytes sends and receives 2 (k - 1) n / k, rounded up per chunk).
struct TrafficCounters {
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Every member's `mine` (all of the same length), in rank order (out[rank()] == mine).
  virtual Result<std::vector<std::vector<std::uint8_t>>> AllGather(
      std::span<const std::uint8_t> mine) = 0;
  // `mine` is size() chunks of chunk_bytes each; returns size() chunks, out[i] = member i's
  // chunk number rank() (out[rank()] is my own). Every member passes the same chunk_bytes.
  virtual Result<std::vector<std::vector<std::uint8_t>>> AllToAll(
      std::span<const std::uint8_t> mine, std::size_t chunk_bytes) = 0;
  // values <- the element-wise sum over the members, the same bits on every member.
  virtual Status AllReduceSum(std::span<float> values) = 0;
  // bytes <- root's bytes (every member passes a buffer of the root's length).
  virtual Status Broadcast(std::span<std::uint8_t> bytes, int root) = 0;

  virtual TrafficCounters traffic() const = 0;
};

// Connects member `rank` of a group of `size` whose rendezvous is under `prefix` in the run's
// store (Gloo), or in a test's registry (LocalGroup); the group's calls fail after timeout_s.
using CommFactory = std::function<Result<std::unique_ptr<Communicator>>(
    const std::string& prefix, int rank, int size, double timeout_s)>;

}  // namespace headroom::diloco
