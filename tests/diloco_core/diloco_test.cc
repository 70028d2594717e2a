// The pure parts of DiLoCo against values computed by hand: int8 with error feedback, frames
// and their HMAC, the screen and the trimmed mean, the outer Nesterov step, checkpoints, and
// SHA-256 / HMAC-SHA256 against their published test vectors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "diloco_core/checkpoint.h"
#include "diloco_core/compress.h"
#include "diloco_core/contribution.h"
#include "diloco_core/digest.h"
#include "diloco_core/outer.h"

namespace headroom::diloco {
namespace {

std::vector<std::uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

TEST(Digest, PublishedVectors) {
  // FIPS 180-2, "abc".
  EXPECT_EQ(Hex(Sha256(Bytes("abc"))),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // RFC 4231, test case 2.
  EXPECT_EQ(Hex(HmacSha256(Bytes("Jefe"), Bytes("what do ya want for nothing?"))),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(Compress, Int8ByHand) {
  // One block of 4: max |v| = 2.54, scale 0.02; 1.0 -> 50, -2.54 -> -127, 0.011 -> 1 (0.55
  // rounds to 1), 0.009 -> 0 (0.45 rounds to 0).
  std::vector<float> v = {1.0f, -2.54f, 0.011f, 0.009f};
  std::vector<float> error;
  auto bytes = Encode(Codec::kInt8, v, error, 4);
  ASSERT_EQ(bytes.size(), EncodedBytes(Codec::kInt8, 4, 4));
  ASSERT_EQ(bytes.size(), 8u + 4u + 4u);
  EXPECT_EQ(static_cast<std::int8_t>(bytes[12]), 50);
  EXPECT_EQ(static_cast<std::int8_t>(bytes[13]), -127);
  EXPECT_EQ(static_cast<std::int8_t>(bytes[14]), 1);
  EXPECT_EQ(static_cast<std::int8_t>(bytes[15]), 0);
  std::vector<float> out;
  ASSERT_TRUE(Decode(Codec::kInt8, bytes, 4, out));
  const float scale = 2.54f / 127.0f;
  EXPECT_FLOAT_EQ(out[0], 50 * scale);
  EXPECT_FLOAT_EQ(out[1], -127 * scale);
  // Error feedback keeps exactly what was not sent.
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(error[i], v[i] - out[i]) << i;
}

TEST(Compress, ErrorFeedbackLosesNothingOverRounds) {
  // The same small value every round: sent as 0 while it accumulates, then as a whole level.
  // After n rounds the sum of what was decoded differs from the sum sent by at most one level.
  std::vector<float> v = {1.0f, 0.003f};  // block of 2: scale 1/127 ~ 0.00787
  std::vector<float> error;
  double sent = 0.0;
  std::vector<float> out;
  for (int round = 0; round < 100; ++round) {
    auto bytes = Encode(Codec::kInt8, v, error, 2);
    ASSERT_TRUE(Decode(Codec::kInt8, bytes, 2, out));
    sent += out[1];
  }
  EXPECT_NEAR(sent, 100 * 0.003, 1.0 / 127.0);
  EXPECT_GT(sent, 0.25);  // without error feedback it would be 0 (0.003 < half a level)
}

TEST(Compress, ANanIsSentAsANanNotAsALevel) {
  std::vector<float> v = {1.0f, std::nanf(""), 2.0f, 3.0f, 4.0f}, error, out;
  auto bytes = Encode(Codec::kInt8, v, error, 2);  // blocks {1, NaN}, {2, 3}, {4}
  auto st = Decode(Codec::kInt8, bytes, 5, out);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().message().substr(0, 11), "non-finite:");
  EXPECT_EQ(error[0], 0.0f);  // the bad block keeps no error to feed back
  EXPECT_EQ(error[1], 0.0f);
  // The finite blocks are quantised as usual: 2 with scale 3/127 is 85 levels.
  EXPECT_FLOAT_EQ(error[2], 2.0f - 85.0f * (3.0f / 127.0f));
}

TEST(Compress, DecodeRejectsWhatIsNotAnEncoding) {
  std::vector<float> v(10, 1.0f), error, out;
  auto bytes = Encode(Codec::kInt8, v, error, 4);
  EXPECT_FALSE(Decode(Codec::kInt8, bytes, 11, out));  // count differs
  auto shorter = bytes;
  shorter.pop_back();
  EXPECT_FALSE(Decode(Codec::kInt8, shorter, 10, out));
  auto nan_scale = bytes;
  const float nan = std::nanf("");
  std::memcpy(nan_scale.data() + 8, &nan, 4);
  EXPECT_FALSE(Decode(Codec::kInt8, nan_scale, 10, out));
  EXPECT_FALSE(Decode(Codec::kNone, bytes, 10, out));  // an int8 encoding read as float32
  auto f32 = Encode(Codec::kNone, v, error);
  ASSERT_TRUE(Decode(Codec::kNone, f32, 10, out));
  EXPECT_EQ(out, v);
  EXPECT_EQ(f32.size(), 8u + 40u);
}

std::vector<std::vector<std::uint8_t>> Frames(const std::vector<std::vector<float>>& deltas,
                                              std::uint64_t round,
                                              const std::vector<std::uint64_t>& members,
                                              const std::vector<std::uint8_t>& key) {
  std::vector<std::vector<std::uint8_t>> frames;
  for (std::size_t i = 0; i < deltas.size(); ++i) {
    std::vector<float> error;
    auto payload = Encode(Codec::kNone, deltas[i], error);
    frames.push_back(
        SealFrame({static_cast<std::uint32_t>(i), round, members[i]}, Codec::kNone, payload, key));
  }
  return frames;
}

TEST(Contribution, FramesAuthenticateAndCarryTheirRound) {
  const auto key = Bytes("a key of the run, long enough");
  std::vector<float> d = {1, 2, 3};
  std::vector<float> error;
  auto payload = Encode(Codec::kNone, d, error);
  auto frame = SealFrame({2, 7, 99}, Codec::kNone, payload, key);
  EXPECT_EQ(frame.size(), FrameBytes(Codec::kNone, 3));
  auto open = OpenFrame(frame, {2, 7, 99}, Codec::kNone, key);
  ASSERT_TRUE(open);
  EXPECT_EQ(std::vector<std::uint8_t>(open->begin(), open->end()), payload);
  auto forged = OpenFrame(frame, {2, 7, 99}, Codec::kNone, Bytes("another key"));
  ASSERT_FALSE(forged);
  EXPECT_EQ(forged.error().message().substr(0, 5), "hmac:");
  EXPECT_FALSE(OpenFrame(frame, {2, 8, 99}, Codec::kNone, key));  // a replay of round 7
  EXPECT_FALSE(OpenFrame(frame, {1, 7, 99}, Codec::kNone, key));  // another rank's slot
  auto flipped = frame;
  flipped[kFrameHeaderBytes + 9] ^= 1;  // one bit of the payload
  EXPECT_FALSE(OpenFrame(flipped, {2, 7, 99}, Codec::kNone, key));
}

TEST(Contribution, HonestRoundIsTheTrimmedMean) {
  // Four contributions; per coordinate drop the lowest and highest, average the other two.
  const auto key = Bytes("k");
  std::vector<std::vector<float>> d = {{1, 4}, {2, 3}, {3, 2}, {4, 1}};
  auto agg = AggregateRound(Frames(d, 3, {10, 11, 12, 13}, key), 3, {10, 11, 12, 13}, Codec::kNone,
                            2, key, {});
  ASSERT_TRUE(agg);
  EXPECT_TRUE(agg->rejected.empty());
  EXPECT_EQ(agg->accepted, (std::vector<std::uint32_t>{0, 1, 2, 3}));
  EXPECT_FLOAT_EQ(agg->mean[0], 2.5f);  // (2 + 3) / 2
  EXPECT_FLOAT_EQ(agg->mean[1], 2.5f);
  ScreenOptions plain;
  plain.trimmed_mean = false;
  std::vector<std::vector<float>> e = {{1, 0}, {2, 0}, {6, 0}};
  auto mean =
      AggregateRound(Frames(e, 0, {1, 2, 3}, key), 0, {1, 2, 3}, Codec::kNone, 2, key, plain);
  ASSERT_TRUE(mean);
  EXPECT_FLOAT_EQ(mean->mean[0], 3.0f);
}

TEST(Contribution, TheScreenCatchesEachHostileKind) {
  const auto key = Bytes("k");
  const std::vector<std::uint64_t> members = {1, 2, 3, 4};
  const std::vector<float> honest = {1.0f, 1.0f, 1.0f, 1.0f};
  // Scaled 10x: norm 20 against a median of 2.15 (norms 2, 2.29, 20, 2): beyond 3x, out.
  {
    std::vector<std::vector<float>> d = {
        {1, 1, 1, 1}, {1, 1, 1, 1.5}, {10, 10, 10, 10}, {1, 1, 1, 1}};
    auto agg = AggregateRound(Frames(d, 0, members, key), 0, members, Codec::kNone, 4, key, {});
    ASSERT_TRUE(agg);
    ASSERT_EQ(agg->rejected.size(), 1u);
    EXPECT_EQ(agg->rejected[0].rank, 2u);
    EXPECT_EQ(agg->rejected[0].reason, "norm");
    // The three left, trimmed: per coordinate the middle one (1, 1, 1, 1).
    EXPECT_EQ(agg->mean, honest);
  }
  // Sign-flipped: the same norm, cosine -1 with the coordinate-wise median (1, 1, 1, 1).
  {
    std::vector<std::vector<float>> d = {
        {1, 1, 1, 1}, {-1, -1, -1, -1}, {1, 1, 1, 1}, {1, 1, 1, 1}};
    auto agg = AggregateRound(Frames(d, 0, members, key), 0, members, Codec::kNone, 4, key, {});
    ASSERT_TRUE(agg);
    ASSERT_EQ(agg->rejected.size(), 1u);
    EXPECT_EQ(agg->rejected[0].rank, 1u);
    EXPECT_EQ(agg->rejected[0].reason, "direction");
    EXPECT_EQ(agg->mean, honest);
  }
  // NaN: out before anything else is computed.
  {
    std::vector<std::vector<float>> d = {
        {1, 1, 1, 1}, {1, 1, 1, 1}, {1, std::nanf(""), 1, 1}, {1, 1, 1, 1}};
    auto agg = AggregateRound(Frames(d, 0, members, key), 0, members, Codec::kNone, 4, key, {});
    ASSERT_TRUE(agg);
    ASSERT_EQ(agg->rejected.size(), 1u);
    EXPECT_EQ(agg->rejected[0].reason, "non-finite");
    EXPECT_EQ(agg->mean, honest);
  }
  // Forged: signed with another key.
  {
    std::vector<std::vector<float>> d(4, honest);
    auto frames = Frames(d, 0, members, key);
    frames[3] = Frames(d, 0, members, Bytes("not the key"))[3];
    auto agg = AggregateRound(frames, 0, members, Codec::kNone, 4, key, {});
    ASSERT_TRUE(agg);
    ASSERT_EQ(agg->rejected.size(), 1u);
    EXPECT_EQ(agg->rejected[0].rank, 3u);
    EXPECT_EQ(agg->rejected[0].reason, "hmac");
  }
  // Two members: nothing to compare against; both accepted, the plain mean.
  {
    std::vector<std::vector<float>> d = {{1, 1, 1, 1}, {-1, -1, -1, -1}};
    auto agg = AggregateRound(Frames(d, 0, {1, 2}, key), 0, {1, 2}, Codec::kNone, 4, key, {});
    ASSERT_TRUE(agg);
    EXPECT_TRUE(agg->rejected.empty());
    EXPECT_EQ(agg->mean, std::vector<float>(4, 0.0f));
  }
  // Every contribution bad: an error, not an empty step.
  {
    std::vector<std::vector<float>> d(3, honest);
    auto frames = Frames(d, 0, {1, 2, 3}, Bytes("wrong"));
    EXPECT_FALSE(AggregateRound(frames, 0, {1, 2, 3}, Codec::kNone, 4, key, {}));
  }
}

TEST(Outer, NesterovByHand) {
  // lr 0.5, mu 0.9. Step 1: b = g = 1; x -= 0.5 (1 + 0.9) = 0.95 -> 10 - 0.95 = 9.05.
  // Step 2 (g = 2): b = 0.9 + 2 = 2.9; x -= 0.5 (2 + 2.61) = 2.305 -> 6.745.
  OuterSgd sgd({0.5, 0.9});
  std::vector<float> x = {10.0f};
  std::vector<float> g1 = {1.0f}, g2 = {2.0f};
  sgd.Step(x, g1);
  EXPECT_FLOAT_EQ(x[0], 9.05f);
  sgd.Step(x, g2);
  EXPECT_FLOAT_EQ(sgd.momentum()[0], 2.9f);
  EXPECT_NEAR(x[0], 6.745f, 1e-5);
}

TEST(Checkpoint, RoundTripAndEveryKindOfDamage) {
  const auto dir = std::filesystem::temp_directory_path() / "headroom-ckpt-test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "m.ckpt").string();
  Checkpoint c{"tiny", 4, 1234, {1.5f, -2.0f, 3.25f}};
  ASSERT_TRUE(WriteCheckpoint(path, c));
  auto back = ReadCheckpoint(path);
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(back->parameters, c.parameters);
  EXPECT_EQ(back->model, "tiny");
  EXPECT_EQ(back->round, 4);
  EXPECT_EQ(back->tokens, 1234u);
  std::string bytes;
  {
    std::ifstream f(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  const auto write = [&](const std::string& b) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << b;
  };
  auto damaged = bytes;
  damaged.back() ^= 1;
  write(damaged);
  auto r = ReadCheckpoint(path);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("sha256"), std::string::npos) << r.error().message();
  write(bytes.substr(0, bytes.size() - 4));
  EXPECT_FALSE(ReadCheckpoint(path));
  write("not a checkpoint\n");
  r = ReadCheckpoint(path);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find(":1:"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(Checkpoint, HostileHeadersAndFilesAreOneLineErrorsNotLibraryErrorsOrHugeReads) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("headroom_ckpt_hostile_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "m.ckpt").string();
  const auto write = [&](const std::string& b) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << b;
  };
  const auto error_of = [&](const std::string& header) {
    write("headroom-diloco-checkpoint 1\n" + header + "\n");
    auto r = ReadCheckpoint(path);
    return r ? std::string("(read)") : r.error().message();
  };
  const std::string sha0 = Hex(Sha256Floats({}));
  const auto header = [&](const std::string& round, const std::string& parameters,
                          const std::string& tokens) {
    return R"({"model":"tiny","parameters":)" + parameters + R"(,"sha256":")" + sha0 +
           R"(","round":)" + round + R"(,"tokens":)" + tokens + "}";
  };
  EXPECT_EQ(error_of(header("0", "0", "0")), "(read)");
  // Before: nlohmann's type_error for "x", a wrapped size check for 2^62 + 1, -1 taken as 2^64-1.
  EXPECT_EQ(error_of(header("\"x\"", "0", "0")),
            path + ":2: field 'round': expected a whole number from 0 to 2147483647");
  EXPECT_EQ(error_of(header("-1", "0", "0")),
            path + ":2: field 'round': expected a whole number from 0 to 2147483647");
  EXPECT_EQ(error_of(header("0", "4611686018427387905", "0")),
            path + ":2: field 'parameters': expected a count from 0 to 1073741824");
  EXPECT_EQ(error_of(header("0", "0", "-1")),
            path + ":2: field 'tokens': expected a whole number, 0 or more");
  EXPECT_EQ(error_of(header("0", "1", "0")), path + ": 0 bytes of parameters, expected 4");
  // A directory and a device: refused before any read (before: /dev/zero read until memory ran
  // out, a directory gave a raw library error).
  for (const std::string& other : {dir.string(), std::string("/dev/zero")}) {
    auto r = ReadCheckpoint(other);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().message(),
              other + ": not a regular file (a checkpoint is one, written by `headroom diloco`)");
  }
  // A model of NaN or Inf is no model (before: `diloco eval` printed val_loss null, exit 0).
  for (const float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
    ASSERT_TRUE(WriteCheckpoint(path, Checkpoint{"tiny", 1, 10, {0.5f, bad}}));
    auto r = ReadCheckpoint(path);
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message().find(path + ": parameter 1 is "), std::string::npos)
        << r.error().message();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace headroom::diloco
