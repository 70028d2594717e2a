#include "diloco_core/contribution.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "diloco_core/digest.h"

namespace headroom::diloco {
namespace {

constexpr char kFrameMagic[4] = {'H', 'R', 'D', 'C'};
constexpr std::uint8_t kVersion = 1;

void PutLe(std::uint8_t* p, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}

std::uint64_t GetLe(const std::uint8_t* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return v;
}

double Norm(const std::vector<float>& v) {
  double s = 0.0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s);
}

// Median of a small sorted-in-place vector (mean of the middle two for an even count).
// In place: sorts `v` (a round has a handful of members: no allocation per coordinate).
double MedianInPlace(std::vector<double>& v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double Median(std::vector<double> v) { return MedianInPlace(v); }

}  // namespace

std::size_t FrameBytes(Codec codec, std::size_t count, std::uint32_t block) {
  return kFrameHeaderBytes + EncodedBytes(codec, count, block) + kFrameMacBytes;
}

std::vector<std::uint8_t> SealFrame(const FrameId& id, Codec codec,
                                    std::span<const std::uint8_t> payload,
                                    std::span<const std::uint8_t> key) {
  std::vector<std::uint8_t> out(kFrameHeaderBytes + payload.size() + kFrameMacBytes);
  std::memcpy(out.data(), kFrameMagic, 4);
  out[4] = kVersion;
  out[5] = codec == Codec::kInt8 ? 1 : 0;
  PutLe(out.data() + 6, id.part, 2);
  PutLe(out.data() + 8, id.rank, 4);
  PutLe(out.data() + 12, id.round, 8);
  PutLe(out.data() + 20, id.member, 8);
  if (!payload.empty()) std::memcpy(out.data() + kFrameHeaderBytes, payload.data(), payload.size());
  const std::size_t signed_bytes = kFrameHeaderBytes + payload.size();
  const Digest mac = HmacSha256(key, {out.data(), signed_bytes});
  std::memcpy(out.data() + signed_bytes, mac.data(), mac.size());
  return out;
}

Result<std::span<const std::uint8_t>> OpenFrame(std::span<const std::uint8_t> frame,
                                                const FrameId& expected, Codec codec,
                                                std::span<const std::uint8_t> key) {
  if (frame.size() < kFrameHeaderBytes + kFrameMacBytes) {
    return Error::Input("malformed: " + std::to_string(frame.size()) + " bytes");
  }
  const std::size_t signed_bytes = frame.size() - kFrameMacBytes;
  Digest mac;
  std::memcpy(mac.data(), frame.data() + signed_bytes, mac.size());
  // The MAC first: nothing of an unauthenticated frame is believed.
  if (!DigestEqual(mac, HmacSha256(key, frame.first(signed_bytes)))) {
    return Error::Input("hmac: the frame does not authenticate under the run's key");
  }
  if (std::memcmp(frame.data(), kFrameMagic, 4) != 0 || frame[4] != kVersion) {
    return Error::Input("malformed: not a contribution frame");
  }
  if (frame[5] != (codec == Codec::kInt8 ? 1 : 0)) {
    return Error::Input("malformed: codec differs from the run's");
  }
  const auto rank = static_cast<std::uint32_t>(GetLe(frame.data() + 8, 4));
  const std::uint64_t round = GetLe(frame.data() + 12, 8);
  const std::uint64_t member = GetLe(frame.data() + 20, 8);
  const auto part = static_cast<std::uint16_t>(GetLe(frame.data() + 6, 2));
  if (rank != expected.rank || round != expected.round || member != expected.member ||
      part != expected.part) {
    return Error::Input("malformed: frame of rank " + std::to_string(rank) + ", round " +
                        std::to_string(round) + ", member " + std::to_string(member) + ", part " +
                        std::to_string(part) + "; expected rank " + std::to_string(expected.rank) +
                        ", round " + std::to_string(expected.round) + ", member " +
                        std::to_string(expected.member) + ", part " +
                        std::to_string(expected.part));
  }
  return frame.subspan(kFrameHeaderBytes, signed_bytes - kFrameHeaderBytes);
}

namespace {

// The screen (docs/DILOCO.md): with at least options.min_for_screen contributions, each whose
// norm is off the round's median by more than norm_factor, then each whose cosine with the
// coordinate-wise median of those left is below min_cosine, is rejected. Which to keep.
std::vector<bool> Screen(const std::vector<std::vector<float>>& values,
                         const std::vector<std::uint32_t>& ranks, std::size_t count,
                         const ScreenOptions& options, std::vector<Rejection>* rejected) {
  std::vector<bool> keep(values.size(), true);
  if (static_cast<int>(values.size()) >= options.min_for_screen) {
    std::vector<double> norms;
    for (const auto& v : values) norms.push_back(Norm(v));
    const double median_norm = Median(norms);
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (norms[i] > options.norm_factor * median_norm ||
          norms[i] * options.norm_factor < median_norm) {
        keep[i] = false;
        rejected->push_back({ranks[i], "norm",
                             "norm " + std::to_string(norms[i]) + " against the round's median " +
                                 std::to_string(median_norm)});
      }
    }
    // The coordinate-wise median of those left, and each one's cosine with it.
    std::vector<std::size_t> left;
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (keep[i]) left.push_back(i);
    }
    if (static_cast<int>(left.size()) >= options.min_for_screen) {
      std::vector<float> median(count);
      std::vector<double> column(left.size());
      for (std::size_t j = 0; j < count; ++j) {
        for (std::size_t k = 0; k < left.size(); ++k) column[k] = values[left[k]][j];
        median[j] = static_cast<float>(MedianInPlace(column));
      }
      const double median_norm2 = Norm(median);
      for (std::size_t i : left) {
        double dot = 0.0;
        for (std::size_t j = 0; j < count; ++j)
          dot += static_cast<double>(values[i][j]) * median[j];
        const double denom = Norm(values[i]) * median_norm2;
        const double cosine = denom > 0.0 ? dot / denom : 1.0;
        if (cosine < options.min_cosine) {
          keep[i] = false;
          rejected->push_back(
              {ranks[i], "direction",
               "cosine " + std::to_string(cosine) + " with the round's coordinate-wise median"});
        }
      }
    }
  }
  return keep;
}

}  // namespace

Result<Aggregate> AggregateRound(const std::vector<std::vector<std::uint8_t>>& frames,
                                 std::uint64_t round, const std::vector<std::uint64_t>& members,
                                 Codec codec, std::size_t count, std::span<const std::uint8_t> key,
                                 const ScreenOptions& options) {
  if (frames.size() != members.size()) {
    return Error::Input("aggregate: " + std::to_string(frames.size()) + " frames for " +
                        std::to_string(members.size()) + " members");
  }
  Aggregate out;
  std::vector<std::uint32_t> ranks;
  std::vector<std::vector<float>> values;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    const auto rank = static_cast<std::uint32_t>(i);
    auto payload = OpenFrame(frames[i], {rank, round, members[i]}, codec, key);
    if (!payload) {
      const std::string& m = payload.error().message();
      out.rejected.push_back({rank, m.substr(0, m.find(':')), m});
      continue;
    }
    std::vector<float> v;
    if (auto st = Decode(codec, *payload, count, v); !st) {
      const std::string& m = st.error().message();
      out.rejected.push_back({rank, m.starts_with("non-finite") ? "non-finite" : "malformed", m});
      continue;
    }
    if (!std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); })) {
      out.rejected.push_back({rank, "non-finite", "a value is NaN or infinite"});
      continue;
    }
    ranks.push_back(rank);
    values.push_back(std::move(v));
  }

  const std::vector<bool> keep = Screen(values, ranks, count, options, &out.rejected);
  std::sort(out.rejected.begin(), out.rejected.end(),
            [](const Rejection& a, const Rejection& b) { return a.rank < b.rank; });

  std::vector<const std::vector<float>*> accepted;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (keep[i]) {
      out.accepted.push_back(ranks[i]);
      accepted.push_back(&values[i]);
    }
  }
  if (accepted.empty()) return Error::Input("aggregate: no contribution accepted this round");
  out.mean.assign(count, 0.0f);
  const std::size_t k = accepted.size();
  const bool trim = options.trimmed_mean && k >= 3;
  for (std::size_t j = 0; j < count; ++j) {
    double sum = 0.0;
    double lo = (*accepted[0])[j];
    double hi = lo;
    for (std::size_t a = 0; a < k; ++a) {
      const double x = (*accepted[a])[j];
      sum += x;
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
    out.mean[j] = trim ? static_cast<float>((sum - lo - hi) / static_cast<double>(k - 2))
                       : static_cast<float>(sum / static_cast<double>(k));
  }
  return out;
}

}  // namespace headroom::diloco
