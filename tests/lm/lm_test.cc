// The byte model and its corpus: initialisation is a function of the seed, parameters travel
// flat and whole, the gradient path (the DDP baseline's) takes the same step as TrainStep, a few
// steps on the real corpus lower the loss, batches are a function of seed and stream.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "lm/corpus.h"
#include "lm/lm.h"

namespace headroom::lm {
namespace {

std::string Text() {
  std::string t;
  for (int i = 0; i < 200; ++i) t += "the quick brown fox jumps over the lazy dog. ";
  return t;
}

TEST(ByteLm, TheSeedDecidesTheBits) {
  const auto c = ModelByName("tiny").value();
  ByteLm a(c, {}, 7, 1), b(c, {}, 7, 1), other(c, {}, 8, 1);
  std::vector<float> pa, pb, po;
  a.GetParameters(pa);
  b.GetParameters(pb);
  other.GetParameters(po);
  EXPECT_EQ(pa, pb);
  EXPECT_NE(pa, po);
  EXPECT_EQ(pa.size(), a.parameter_count());
  // 2 blocks of 12 d^2 + 13 d (d = 128), embeddings 256 d + 256 d, final norm 2 d, head d 256 +
  // 256.
  const std::size_t d = 128;
  EXPECT_EQ(a.parameter_count(), 2 * (12 * d * d + 13 * d) + 512 * d + 2 * d + 256 * d + 256);
  const auto huge = ModelByName("huge");
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.error().kind(), ErrorKind::kUsage);
  EXPECT_EQ(huge.error().message(), "'huge' is not a model (tiny, small)");
}

TEST(ByteLm, ParametersRoundTripAndTheGradientPathMatchesTrainStep) {
  const auto c = ModelByName("tiny").value();
  const std::string text = Text();
  BatchSampler s1(text, 4, 32, 1, 0), s2(text, 4, 32, 1, 0);
  ByteLm a(c, {}, 3, 1), b(c, {}, 3, 1);
  for (int i = 0; i < 3; ++i) {
    a.TrainStep(s1.Next());
    std::vector<float> g;
    b.Gradient(s2.Next(), g);
    b.ApplyGradient(g);
  }
  std::vector<float> pa, pb;
  a.GetParameters(pa);
  b.GetParameters(pb);
  ASSERT_EQ(pa.size(), pb.size());
  double worst = 0;
  for (std::size_t i = 0; i < pa.size(); ++i)
    worst = std::max(worst, std::fabs(double(pa[i]) - pb[i]));
  EXPECT_LT(worst, 1e-6);
  // Set what a holds into a fresh model: the same loss on the same batch.
  ByteLm fresh(c, {}, 99, 1);
  fresh.SetParameters(pa);
  BatchSampler s3(text, 4, 32, 5, 0);
  const Batch batch = s3.Next();
  EXPECT_DOUBLE_EQ(fresh.Loss(batch), a.Loss(batch));
  EXPECT_THROW(fresh.SetParameters(std::vector<float>(3)), std::invalid_argument);
}

TEST(ByteLm, AModelAndItsOptimizerStateCarryOverWhole) {
  // A donor's parameters and AdamW state, set into a fresh model: the next step is the same.
  const auto c = ModelByName("tiny").value();
  const std::string text = Text();
  BatchSampler s(text, 4, 32, 2, 0);
  ByteLm donor(c, {}, 4, 1), joiner(c, {}, 5, 1);
  for (int i = 0; i < 4; ++i) donor.TrainStep(s.Next());
  std::vector<float> p;
  donor.GetParameters(p);
  joiner.SetParameters(p);
  const OptimizerState state = donor.GetOptimizerState();
  EXPECT_EQ(state.adam_step, 4);
  EXPECT_EQ(state.schedule_step, 4);
  joiner.SetOptimizerState(state);
  const Batch b = s.Next();
  donor.TrainStep(b);
  joiner.TrainStep(b);
  std::vector<float> pd, pj;
  donor.GetParameters(pd);
  joiner.GetParameters(pj);
  EXPECT_EQ(pd, pj);
  OptimizerState wrong = state;
  wrong.exp_avg.pop_back();
  EXPECT_THROW(joiner.SetOptimizerState(wrong), std::invalid_argument);
}

TEST(ByteLm, LearnsRepeatedText) {
  const std::string text = Text();
  ByteLm m(ModelByName("tiny").value(), {}, 1, 1);
  BatchSampler s(text, 8, 32, 1, 0);
  const auto val = ValidationBatches(text, 16, 8, 32);
  const double before = ValidationLoss(m, val);
  EXPECT_NEAR(before, std::log(256.0), 0.3);  // an untrained model is close to uniform
  for (int i = 0; i < 60; ++i) m.TrainStep(s.Next());
  EXPECT_LT(ValidationLoss(m, val), 0.6 * before);
}

TEST(Corpus, BatchesAreAFunctionOfSeedAndStream) {
  const std::string text = Text();
  BatchSampler a(text, 3, 16, 1, 5), b(text, 3, 16, 1, 5), c(text, 3, 16, 1, 6);
  const Batch x = a.Next(), y = b.Next(), z = c.Next();
  EXPECT_EQ(x.bytes, y.bytes);
  EXPECT_NE(x.bytes, z.bytes);
  ASSERT_EQ(x.bytes.size(), 3u * 17u);
  // Each row is a window of the text.
  for (int r = 0; r < 3; ++r) {
    const std::string row(x.bytes.begin() + r * 17, x.bytes.begin() + (r + 1) * 17);
    EXPECT_NE(text.find(row), std::string::npos);
  }
  // Validation: the first windows of the text, non-overlapping, in order.
  const auto v = ValidationBatches(text, 5, 2, 16);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[2].batch, 1);
  EXPECT_EQ(std::string(v[0].bytes.begin(), v[0].bytes.begin() + 17), text.substr(0, 17));
  EXPECT_EQ(std::string(v[1].bytes.begin(), v[1].bytes.begin() + 17), text.substr(34, 17));
}

TEST(Corpus, MissingOrShortFilesAreNamed) {
  const auto dir = std::filesystem::temp_directory_path() / "headroom-corpus-test";
  std::filesystem::create_directories(dir);
  auto r = LoadCorpus(dir.string(), 10);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("train.txt"), std::string::npos);
  std::ofstream(dir / "train.txt") << "0123456789abcdef";
  std::ofstream(dir / "val.txt") << "short";
  r = LoadCorpus(dir.string(), 10);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("val.txt"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace headroom::lm
