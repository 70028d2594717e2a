#pragma once
// Streaming DiLoCo (`--stream-fragments N`; Douillard et al., "Streaming DiLoCo with
// overlapping communication", arXiv 2501.18512; docs/DILOCO.md, "Streaming"). The parameters
// are cut into N contiguous fragments on codec block boundaries. In a round of H inner steps,
// fragment f < N - 1 is sent after step FragmentStep(f) on the previous round's group, on a
// thread of its own while the inner steps go on, and applied when the next fragment is due:
// the outer step on its slice of the global model, and the local fragment = the new global one
// plus the inner steps taken since it was sent (DiLoCo's own update, delayed by the overlap; the
// paper's half-and-half merge, alpha = 0.5, trained 2x slower on the in-process test's model).
// The last fragment is the round's exchange at its end, as without streaming, and the hash
// check after it covers the whole model. Round 0 streams nothing (there is no group yet).
#include <cstddef>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "common/error.h"
#include "diloco_core/contribution.h"

namespace headroom::diloco {

inline constexpr int kMaxFragments = 64;

struct Fragment {
  std::size_t begin = 0;
  std::size_t end = 0;  // one past
  std::size_t size() const { return end - begin; }
};

// N fragments of `count` values: whole blocks of `block`, as even as they go (the last ones may
// be empty when there are fewer blocks than fragments). REQUIRES: 1 <= n.
std::vector<Fragment> Fragments(std::size_t count, int n, std::uint32_t block);
// The inner step of a round of h after which fragment f of n is sent: round((f + 1) h / n).
int FragmentStep(int f, int n, int h);
// The round a fragment's frames carry: round + (f + 1) << 48 for a fragment sent during the round
// (f < n - 1), the round itself for the round's own exchange: no frame of one fragment opens as
// another's.
std::uint64_t FragmentRound(int round, int f, int n);

// One exchange on a thread of its own. Start it, go on computing, Wait for its result.
class BackgroundExchange {
 public:
  using Result_ = Result<std::optional<Aggregate>>;
  BackgroundExchange() = default;
  ~BackgroundExchange();
  BackgroundExchange(const BackgroundExchange&) = delete;
  BackgroundExchange& operator=(const BackgroundExchange&) = delete;

  // REQUIRES: !pending(). background false: runs it here, now (a test on a simulated clock).
  void Start(int fragment, std::function<Result_()> exchange, bool background = true);
  bool pending() const { return thread_.joinable() || result_.has_value(); }
  int fragment() const { return fragment_; }
  // Joins the thread; its result. REQUIRES: pending().
  Result_ Wait();

 private:
  std::thread thread_;
  int fragment_ = -1;
  std::optional<Result_> result_;
};

}  // namespace headroom::diloco
