// The `mean` aggregate by reduce-scatter (diloco_core/scatter.h): the all-to-all and the
// all-gather done by hand between the members' frames, the mean against one computed by hand in
// double, and each failure (a forged chunk, a non-finite one, a forged owner) by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "diloco_core/compress.h"
#include "diloco_core/contribution.h"
#include "diloco_core/scatter.h"

namespace headroom::diloco {
namespace {

using Buf = std::vector<std::uint8_t>;

Buf KeyOf(const std::string& s) { return {s.begin(), s.end()}; }

std::vector<float> DeltaOf(int rank, std::size_t n) {
  std::mt19937 rng(static_cast<unsigned>(7 + rank));
  std::normal_distribution<float> d(0.0f, 1e-3f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

struct HandRound {
  std::vector<Buf> means;  // each owner's mean frame, by rank (what the all-gather brings)
  std::size_t chunk_frame = 0;
};

// k members' exchange by hand: member i seals its chunks with keys[i]; owner j gets chunk j of
// every member (the all-to-all) and seals its mean with owner_keys[j].
HandRound ExchangeByHand(const std::vector<std::vector<float>>& deltas, Codec codec,
                         const std::vector<Buf>& keys, const std::vector<Buf>& owner_keys,
                         const Buf& run_key, std::uint64_t round,
                         const std::vector<std::uint64_t>& ids) {
  const int k = static_cast<int>(deltas.size());
  const std::size_t count = deltas[0].size();
  HandRound out;
  out.chunk_frame = ChunkFrameBytes(codec, count, k);
  std::vector<Buf> sealed;
  for (int i = 0; i < k; ++i) {
    std::vector<float> error;
    sealed.push_back(SealChunks({static_cast<std::uint32_t>(i), round, ids[i]}, codec, deltas[i],
                                error, keys[i], k));
    EXPECT_EQ(sealed.back().size(), out.chunk_frame * k);
  }
  for (int j = 0; j < k; ++j) {
    std::vector<Buf> mine;
    for (int i = 0; i < k; ++i) {
      const auto from = sealed[i].begin() + static_cast<std::ptrdiff_t>(j * out.chunk_frame);
      mine.emplace_back(from, from + static_cast<std::ptrdiff_t>(out.chunk_frame));
    }
    out.means.push_back(ReduceChunk(mine, round, ids, codec, count, run_key, owner_keys[j], j));
    EXPECT_EQ(out.means.back().size(), MeanFrameBytes(codec, count, k));
  }
  return out;
}

TEST(Scatter, ChunksAreWholeBlocksAndTheBytesHalfTheAllGathersAtFour) {
  EXPECT_EQ(ChunkValues(1000, 4), 256u);  // 4 blocks of 256 over 4 members
  EXPECT_EQ(ChunkValues(1000, 3), 512u);  // ceil(4 / 3) = 2 blocks each
  EXPECT_EQ(ChunkValues(10, 4), 256u);    // one block at least
  EXPECT_EQ(ChunkValues(1024, 1), 1024u);
  // A million values at k = 4: (k - 1) chunk frames + (k - 1) mean frames against (k - 1)
  // whole frames: half, plus the headers, MACs and reason bytes.
  const std::size_t n = 1'000'000;
  const double scatter =
      3.0 * (ChunkFrameBytes(Codec::kInt8, n, 4) + MeanFrameBytes(Codec::kInt8, n, 4));
  const double gather = 3.0 * FrameBytes(Codec::kInt8, n);
  EXPECT_NEAR(scatter / gather, 0.5, 0.001);
}

TEST(Scatter, TheMeanIsTheMembersMeanAndEveryMemberAssemblesTheSameBits) {
  const std::size_t n = 1000;  // not a multiple of the chunk: the last chunk is padded
  const std::vector<std::uint64_t> ids = {11, 12, 13, 14};
  const Buf key = KeyOf("the run's key, long enough");
  std::vector<std::vector<float>> deltas;
  for (int i = 0; i < 4; ++i) deltas.push_back(DeltaOf(i, n));
  const std::vector<Buf> keys(4, key);
  // fp32 on the wire: the mean exactly as float(sum in double, rank order / 4).
  const HandRound r = ExchangeByHand(deltas, Codec::kNone, keys, keys, key, 5, ids);
  auto agg = GatherMeans(r.means, 5, ids, Codec::kNone, n, key);
  ASSERT_TRUE(agg) << agg.error().message();
  EXPECT_EQ(agg->accepted, (std::vector<std::uint32_t>{0, 1, 2, 3}));
  EXPECT_TRUE(agg->rejected.empty());
  ASSERT_EQ(agg->mean.size(), n);
  for (std::size_t j = 0; j < n; ++j) {
    double sum = 0.0;
    for (int i = 0; i < 4; ++i) sum += deltas[i][j];
    ASSERT_EQ(agg->mean[j], static_cast<float>(sum / 4)) << j;
  }
  // int8: each value within one level of the mean's block and of each sender's; the bits are
  // the same from every member's view (they all decode the same all-gathered frames).
  const HandRound q = ExchangeByHand(deltas, Codec::kInt8, keys, keys, key, 5, ids);
  auto a = GatherMeans(q.means, 5, ids, Codec::kInt8, n, key);
  auto b = GatherMeans(q.means, 5, ids, Codec::kInt8, n, key);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->mean, b->mean);
  float largest = 0.0f;
  for (const auto& d : deltas)
    for (float x : d) largest = std::max(largest, std::fabs(x));
  for (std::size_t j = 0; j < n; ++j) {
    double sum = 0.0;
    for (int i = 0; i < 4; ++i) sum += deltas[i][j];
    EXPECT_NEAR(a->mean[j], sum / 4, 2.0 * largest / 127.0) << j;
  }
}

TEST(Scatter, ErrorFeedbackKeepsWhatEachChunksRoundingLeftOut) {
  const std::size_t n = 700;
  std::vector<float> delta = DeltaOf(3, n);
  std::vector<float> error;
  const auto frames = SealChunks({0, 1, 9}, Codec::kInt8, delta, error, KeyOf("k"), 3);
  ASSERT_EQ(error.size(), n);
  const std::size_t per = ChunkValues(n, 3);
  const std::size_t frame = ChunkFrameBytes(Codec::kInt8, n, 3);
  for (int j = 0; j < 3; ++j) {
    std::span<const std::uint8_t> f(frames.data() + j * frame, frame);
    auto payload = OpenFrame(f, {0, 1, 9, static_cast<std::uint16_t>(j)}, Codec::kInt8, KeyOf("k"));
    ASSERT_TRUE(payload) << payload.error().message();
    std::vector<float> decoded;
    ASSERT_TRUE(Decode(Codec::kInt8, *payload, per, decoded));
    for (std::size_t i = 0; i < per && j * per + i < n; ++i) {
      // decoded + error = the value sent (the error buffer started at zero).
      EXPECT_NEAR(decoded[i] + error[j * per + i], delta[j * per + i], 1e-9) << j * per + i;
    }
  }
}

TEST(Scatter, AForgedOrNonFiniteChunkIsLeftOutAndAForgedOwnerGivesItsChunkNoUpdate) {
  const std::size_t n = 600;  // 3 blocks: at k = 4 one block a chunk, chunk 3 all padding
  const std::vector<std::uint64_t> ids = {1, 2, 3, 4};
  const Buf key = KeyOf("the run's key");
  std::vector<std::vector<float>> deltas;
  for (int i = 0; i < 4; ++i) deltas.push_back(DeltaOf(i, n));
  std::vector<Buf> keys(4, key);
  keys[2] = KeyOf("not the run's key");                    // member 2 forges its chunks
  deltas[1][5] = std::numeric_limits<float>::quiet_NaN();  // member 1's chunk 0 is not finite
  std::vector<Buf> owner_keys(4, key);
  owner_keys[3] = KeyOf("not the run's key either");  // owner 3 forges its mean
  const HandRound r = ExchangeByHand(deltas, Codec::kNone, keys, owner_keys, key, 2, ids);
  auto agg = GatherMeans(r.means, 2, ids, Codec::kNone, n, key);
  ASSERT_TRUE(agg) << agg.error().message();
  EXPECT_EQ(agg->accepted, (std::vector<std::uint32_t>{0}));
  ASSERT_EQ(agg->rejected.size(), 3u);
  EXPECT_EQ(agg->rejected[0].rank, 1u);
  EXPECT_EQ(agg->rejected[0].reason, "non-finite");
  EXPECT_EQ(agg->rejected[1].rank, 2u);
  EXPECT_EQ(agg->rejected[1].reason, "hmac");
  EXPECT_EQ(agg->rejected[2].rank, 3u);
  EXPECT_EQ(agg->rejected[2].reason, "hmac");
  const std::size_t per = ChunkValues(n, 4);  // 256: chunks 0, 1, 2 hold values; chunk 3 none
  for (std::size_t j = 0; j < n; ++j) {
    // Chunk 0: members 0 and 3 (1 is not finite there, 2 forged); the others: 0, 1 and 3.
    const bool first = j < per;
    double sum = deltas[0][j];  // in rank order, as the owner sums
    if (!first) sum += deltas[1][j];
    sum += deltas[3][j];
    ASSERT_EQ(agg->mean[j], static_cast<float>(sum / (first ? 2 : 3))) << j;
  }
  // Owner 3's chunk (values 768...) is past n = 600 here; with n = 1000 it would stay zero.
  const std::size_t m = 1000;
  std::vector<std::vector<float>> big;
  for (int i = 0; i < 4; ++i) big.push_back(DeltaOf(i, m));
  const std::vector<Buf> honest(4, key);
  const HandRound s = ExchangeByHand(big, Codec::kNone, honest, owner_keys, key, 2, ids);
  auto b = GatherMeans(s.means, 2, ids, Codec::kNone, m, key);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->accepted, (std::vector<std::uint32_t>{0, 1, 2}));
  for (std::size_t j = 3 * per; j < m; ++j) EXPECT_EQ(b->mean[j], 0.0f) << j;
  EXPECT_NE(b->mean[0], 0.0f);
  // An owner that signs a mean that is not finite (fp32 on the wire): its chunk takes no update
  // and it is left out, as a forged one.
  auto nan_means = s.means;
  {
    std::vector<float> bad(ChunkValues(m, 4), 1.0f);
    bad[3] = std::numeric_limits<float>::infinity();
    std::vector<float> discard;
    Buf payload(4, 0);  // every sender accepted
    const Buf encoded = Encode(Codec::kNone, bad, discard);
    payload.insert(payload.end(), encoded.begin(), encoded.end());
    nan_means[1] = SealFrame({1, 2, ids[1], static_cast<std::uint16_t>(kMeanPart | 1)},
                             Codec::kNone, payload, key);
  }
  auto c = GatherMeans(nan_means, 2, ids, Codec::kNone, m, key);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->accepted, (std::vector<std::uint32_t>{0, 2}));
  ASSERT_EQ(c->rejected.size(), 2u);
  EXPECT_EQ(c->rejected[0].reason, "non-finite");
  for (std::size_t j = per; j < 2 * per; ++j) EXPECT_EQ(c->mean[j], 0.0f) << j;
  // Nobody accepted: an error, not a zero update passed off as a round.
  const std::vector<Buf> forged(4, KeyOf("wrong"));
  const HandRound t = ExchangeByHand(big, Codec::kNone, forged, forged, key, 2, ids);
  EXPECT_FALSE(GatherMeans(t.means, 2, ids, Codec::kNone, m, key));
}

}  // namespace
}  // namespace headroom::diloco
