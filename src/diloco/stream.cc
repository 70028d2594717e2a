#include "diloco/stream.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <utility>

namespace headroom::diloco {

std::vector<Fragment> Fragments(std::size_t count, int n, std::uint32_t block) {
  assert(n >= 1);
  const std::size_t blocks = (count + block - 1) / block;
  const auto nn = static_cast<std::size_t>(n);
  std::vector<Fragment> out;
  for (std::size_t f = 0; f < nn; ++f) {
    const std::size_t from = std::min(count, blocks * f / nn * block);
    const std::size_t to = std::min(count, blocks * (f + 1) / nn * block);
    out.push_back({from, f + 1 == nn ? count : to});
  }
  return out;
}

int FragmentStep(int f, int n, int h) {
  return static_cast<int>(std::lround(static_cast<double>(f + 1) * h / n));
}

std::uint64_t FragmentRound(int round, int f, int n) {
  const auto r = static_cast<std::uint64_t>(round);
  return f + 1 < n ? r + (static_cast<std::uint64_t>(f + 1) << 48) : r;
}

BackgroundExchange::~BackgroundExchange() {
  if (thread_.joinable()) thread_.join();
}

void BackgroundExchange::Start(int fragment, std::function<Result_()> exchange, bool background) {
  assert(!pending());
  fragment_ = fragment;
  if (!background) {
    result_.emplace(exchange());
    return;
  }
  thread_ = std::thread([this, exchange = std::move(exchange)] { result_.emplace(exchange()); });
}

BackgroundExchange::Result_ BackgroundExchange::Wait() {
  assert(pending());
  if (thread_.joinable()) thread_.join();
  Result_ r = std::move(*result_);
  result_.reset();
  return r;
}

}  // namespace headroom::diloco
