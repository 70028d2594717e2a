// The one file that talks to Gloo (gloo_communicator.h).
#include "diloco_gloo/gloo_communicator.h"

#include <fmt/format.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/attr.h>
#include <gloo/transport/tcp/device.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/sigpipe.h"
#include "diloco_comm/local_communicator.h"

namespace headroom::diloco {
namespace {

using Clock = std::chrono::steady_clock;

// How often a member waiting for the others' addresses reads the store.
constexpr auto kStorePollInterval = std::chrono::milliseconds(5);

// Gloo writes to its sockets without MSG_NOSIGNAL: a write to a peer that died would raise
// SIGPIPE and end the process. Blocks SIGPIPE in this thread while a Gloo call runs and discards
// one raised meanwhile (threads started meanwhile -- Gloo's I/O thread -- keep it blocked).
// (common/sigpipe.h: ScopedSigpipeBlock.)

std::chrono::milliseconds ToMillis(double s) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(s * 1000.0)));
}

// Gloo's rendezvous store on the run's store: keys under `prefix`, values the bytes as they
// are. Gloo reads a key with get() without waiting for it first, so get() waits for it too.
// Every wait ends at `deadline` at the latest (the whole rendezvous is bounded by the group's
// timeout), with gloo::IoException, as Gloo's own stores throw.
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  StoreAdapter(coord::Store& store, std::string prefix, Clock::time_point deadline,
               double timeout_s)
      : store_(store), prefix_(std::move(prefix)), deadline_(deadline), timeout_s_(timeout_s) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    const std::string full = prefix_ + key;
    const std::string value(data.begin(), data.end());
    // A put that failed (or whose outcome is unknown) is sent again: putting the same value
    // twice is harmless.
    while (true) {
      Result<std::int64_t> put = store_.Put(full, value);
      if (put.ok()) return;
      if (Clock::now() >= deadline_) {
        throw gloo::IoException(
            fmt::format("cannot put {} in {}: {}", full, store_.Describe(), put.error().message()));
      }
      std::this_thread::sleep_for(kStorePollInterval);
    }
  }

  std::vector<char> get(const std::string& key) override {
    std::vector<std::string> values = WaitFor({key}, deadline_);
    return std::vector<char>(values[0].begin(), values[0].end());
  }

  void wait(const std::vector<std::string>& keys) override { WaitFor(keys, deadline_); }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    Clock::time_point deadline = deadline_;
    if (timeout != gloo::kNoTimeout) deadline = std::min(deadline, Clock::now() + timeout);
    WaitFor(keys, deadline);
  }

 private:
  // The values of `keys` (under the prefix), once all exist; polls the store until then.
  std::vector<std::string> WaitFor(const std::vector<std::string>& keys,
                                   Clock::time_point deadline) {
    std::vector<std::optional<std::string>> found(keys.size());
    std::string last_error;
    while (true) {
      std::string missing;
      for (size_t i = 0; i < keys.size(); ++i) {
        if (found[i]) continue;
        const std::string full = prefix_ + keys[i];
        Result<coord::RangeResult> got = store_.Get(full);
        if (!got.ok()) {
          last_error = got.error().message();
        } else if (!got->kvs.empty()) {
          found[i] = got->kvs[0].value;
          continue;
        }
        if (!missing.empty()) missing += ", ";
        missing += full;
      }
      if (missing.empty()) break;
      if (Clock::now() >= deadline) {
        throw gloo::IoException(
            fmt::format("timed out after {} s waiting for {} in {} (a member that never joined){}",
                        timeout_s_, missing, store_.Describe(),
                        last_error.empty() ? "" : "; the store's last error: " + last_error));
      }
      std::this_thread::sleep_for(kStorePollInterval);
    }
    std::vector<std::string> values;
    values.reserve(keys.size());
    for (std::optional<std::string>& v : found) values.push_back(std::move(*v));
    return values;
  }

  coord::Store& store_;
  const std::string prefix_;
  const Clock::time_point deadline_;
  const double timeout_s_;
};

using ReduceFunction = void (*)(void*, const void*, const void*, size_t);

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::transport::Device> device,
                   std::shared_ptr<gloo::Context> context, std::chrono::milliseconds timeout)
      : device_(std::move(device)), context_(std::move(context)), timeout_(timeout) {}

  ~GlooCommunicator() override {
    ScopedSigpipeBlock block;  // closing the connections
    context_.reset();
    device_.reset();
  }
  GlooCommunicator(const GlooCommunicator&) = delete;
  GlooCommunicator& operator=(const GlooCommunicator&) = delete;

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }

  Result<std::vector<std::vector<std::uint8_t>>> AllGather(
      std::span<const std::uint8_t> mine) override {
    const size_t n = mine.size();
    const size_t k = static_cast<size_t>(size());
    std::vector<std::uint8_t> all(n * k);
    Status s = Run("allgather", [&](std::uint32_t tag) {
      if (n == 0) return;
      gloo::AllgatherOptions o(context_);
      // Gloo only reads the input.
      o.setInput(const_cast<std::uint8_t*>(mine.data()), n);
      o.setOutput(all.data(), n * k);
      o.setTag(tag);
      o.setTimeout(timeout_);
      gloo::allgather(o);
    });
    if (!s.ok()) return std::move(s).error();
    Add(AllGatherTraffic(n, size()));
    return Split(all, k, n);
  }

  Result<std::vector<std::vector<std::uint8_t>>> AllToAll(std::span<const std::uint8_t> mine,
                                                          std::size_t chunk_bytes) override {
    const size_t k = static_cast<size_t>(size());
    if (mine.size() != k * chunk_bytes) {
      return Error::Usage(
          fmt::format("gloo alltoall (rank {} of {}): {} bytes are not {} chunks of {}", rank(),
                      size(), mine.size(), k, chunk_bytes));
    }
    std::vector<std::uint8_t> all(mine.size());
    Status s = Run("alltoall", [&](std::uint32_t tag) {
      if (all.empty()) return;
      gloo::AlltoallOptions o(context_);
      // Gloo only reads the input.
      o.setInput(const_cast<std::uint8_t*>(mine.data()), mine.size());
      o.setOutput(all.data(), all.size());
      o.setTag(tag);
      o.setTimeout(timeout_);
      gloo::alltoall(o);
    });
    if (!s.ok()) return std::move(s).error();
    Add(AllToAllTraffic(chunk_bytes, size()));
    return Split(all, k, chunk_bytes);
  }

  Status AllReduceSum(std::span<float> values) override {
    Status s = Run("allreduce", [&](std::uint32_t tag) {
      if (values.empty()) return;
      gloo::AllreduceOptions o(context_);
      o.setOutput(values.data(), values.size());
      o.setReduceFunction(static_cast<ReduceFunction>(&gloo::sum<float>));
      o.setTag(tag);
      o.setTimeout(timeout_);
      gloo::allreduce(o);
    });
    if (!s.ok()) return s;
    Add(AllReduceTraffic(values.size(), size()));
    return OkStatus();
  }

  Status Broadcast(std::span<std::uint8_t> bytes, int root) override {
    if (root < 0 || root >= size()) {
      return Error::Usage(fmt::format("gloo broadcast (rank {} of {}): root {} out of range",
                                      rank(), size(), root));
    }
    Status s = Run("broadcast", [&](std::uint32_t tag) {
      if (bytes.empty()) return;
      gloo::BroadcastOptions o(context_);
      o.setOutput(bytes.data(), bytes.size());
      o.setRoot(root);
      o.setTag(tag);
      o.setTimeout(timeout_);
      gloo::broadcast(o);
    });
    if (!s.ok()) return s;
    Add(BroadcastTraffic(bytes.size(), size(), rank(), root));
    return OkStatus();
  }

  TrafficCounters traffic() const override { return traffic_; }

 private:
  // k pieces of n bytes each, in order.
  static std::vector<std::vector<std::uint8_t>> Split(const std::vector<std::uint8_t>& all,
                                                      size_t k, size_t n) {
    std::vector<std::vector<std::uint8_t>> out(k);
    for (size_t r = 0; r < k; ++r) {
      out[r].assign(all.begin() + static_cast<std::ptrdiff_t>(r * n),
                    all.begin() + static_cast<std::ptrdiff_t>((r + 1) * n));
    }
    return out;
  }

  // Runs one collective with a fresh tag (every member numbers its calls alike), SIGPIPE
  // blocked; any exception is the call's error and breaks the group.
  template <class F>
  Status Run(const char* op, F&& f) {
    const std::string where = fmt::format("gloo {} (rank {} of {})", op, rank(), size());
    if (broken_) {
      return Error::Io(fmt::format("{}: the group failed earlier: {}", where, *broken_));
    }
    std::string what;
    {
      ScopedSigpipeBlock block;
      try {
        f(next_tag_++);
        return OkStatus();
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
        what = "unknown exception";
      }
    }
    broken_ = what;
    return Error::Io(fmt::format("{}: {}", where, what));
  }

  void Add(const TrafficCounters& t) {
    traffic_.bytes_sent += t.bytes_sent;
    traffic_.bytes_received += t.bytes_received;
  }

  // Constant after construction (reset only by the destructor; context_ first).
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  const std::chrono::milliseconds timeout_;

  std::uint32_t next_tag_ = 0;
  std::optional<std::string> broken_;  // the first failure's message
  TrafficCounters traffic_;
};

}  // namespace

Result<std::unique_ptr<Communicator>> ConnectGloo(coord::Store& store, const GlooOptions& options) {
  const GlooOptions& o = options;
  const std::string where = fmt::format("gloo connect (rank {} of {})", o.rank, o.size);
  if (o.prefix.empty()) return Error::Usage(where + ": empty key prefix");
  if (o.size < 1) return Error::Usage(fmt::format("{}: size must be at least 1", where));
  if (o.rank < 0 || o.rank >= o.size) {
    return Error::Usage(fmt::format("{}: rank must be in [0, {})", where, o.size));
  }
  if (!(o.timeout_s > 0.0) || !std::isfinite(o.timeout_s)) {
    return Error::Usage(fmt::format("{}: timeout_s must be positive, not {}", where, o.timeout_s));
  }
  if (o.iface.empty()) {
    // Gloo reads getaddrinfo's result without checking that it succeeded.
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int rv = getaddrinfo(o.host.c_str(), nullptr, &hints, &found);
    if (rv != 0) {
      return Error::Usage(
          fmt::format("{}: cannot resolve host '{}': {}", where, o.host, gai_strerror(rv)));
    }
    freeaddrinfo(found);
  }
  const std::chrono::milliseconds timeout = ToMillis(o.timeout_s);

  // The device starts Gloo's I/O thread, which inherits this thread's blocked SIGPIPE.
  ScopedSigpipeBlock block;
  try {
    gloo::transport::tcp::attr attr;
    if (o.iface.empty()) {
      attr.hostname = o.host;
    } else {
      attr.iface = o.iface;
    }
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(o.rank, o.size);
    context->setTimeout(timeout);
    StoreAdapter rendezvous(store, o.prefix, Clock::now() + timeout, o.timeout_s);
    context->connectFullMesh(rendezvous, device);
    return std::unique_ptr<Communicator>(
        std::make_unique<GlooCommunicator>(std::move(device), std::move(context), timeout));
  } catch (const std::exception& e) {
    return Error::Io(fmt::format("{}: {}", where, e.what()));
  } catch (...) {
    return Error::Io(where + ": unknown exception");
  }
}

}  // namespace headroom::diloco
