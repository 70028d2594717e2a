#include "analysis/spectrum.h"

#include <fftw3.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <numbers>

#include "analysis/kernels.h"
#include "common/stats.h"

namespace headroom::analysis {
namespace {

constexpr size_t kMinSegmentSamples = 4;
constexpr size_t kBins = kSegmentSamples / 2 + 1;

// Periodic Hann window of length n (scipy.signal.get_window("hann", n)).
double Hann(size_t i, size_t n) {
  return 0.5 -
         0.5 * std::cos(2.0 * std::numbers::pi * static_cast<double>(i) / static_cast<double>(n));
}

// The sum of one half segment, eight partial sums wide.
double SumOfHalf(const double* x) {
  static_assert(kHalfSegment % 8 == 0);
  double partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (size_t i = 0; i < kHalfSegment; i += 8) {
    for (size_t k = 0; k < 8; ++k) partial[k] += x[i + k];
  }
  return ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
         ((partial[4] + partial[5]) + (partial[6] + partial[7]));
}

}  // namespace

struct SpectrumPool::Fft {
  double* in = nullptr;
  fftw_complex* out = nullptr;
  fftw_plan plan = nullptr;
  std::vector<double> window;  // Hann of kSegmentSamples
  double window_power = 0.0;   // sum of w^2

  Fft() {
    in = fftw_alloc_real(kSegmentSamples);
    out = fftw_alloc_complex(kBins);
    // FFTW_ESTIMATE: deterministic, no timing-based planning.
    plan = fftw_plan_dft_r2c_1d(static_cast<int>(kSegmentSamples), in, out, FFTW_ESTIMATE);
    window.resize(kSegmentSamples);
    for (size_t i = 0; i < kSegmentSamples; ++i) {
      window[i] = Hann(i, kSegmentSamples);
      window_power += window[i] * window[i];
    }
  }
  ~Fft() {
    fftw_destroy_plan(plan);
    fftw_free(out);
    fftw_free(in);
  }
  Fft(const Fft&) = delete;
  Fft& operator=(const Fft&) = delete;
};

SpectrumPool::SpectrumPool() : fft_(std::make_unique<Fft>()), power_sum_(kBins, 0.0) {}
SpectrumPool::~SpectrumPool() = default;

void SpectrumPool::AddSegment(const double* first, const double* second, size_t count,
                              double sum_w) {
  const double mean = sum_w / static_cast<double>(count);
  double window_power = 0.0;
  double* in = fft_->in;
  if (count == kSegmentSamples) {
    const double* w = fft_->window.data();
    for (size_t i = 0; i < kHalfSegment; ++i) in[i] = (first[i] - mean) * w[i];
    for (size_t i = 0; i < kHalfSegment; ++i) {
      in[kHalfSegment + i] = (second[i] - mean) * w[kHalfSegment + i];
    }
    window_power = fft_->window_power;
  } else {
    for (size_t i = 0; i < count; ++i) {
      const double w = Hann(i, count);
      const double x = i < kHalfSegment ? first[i] : second[i - kHalfSegment];
      in[i] = (x - mean) * w;
      window_power += w * w;
    }
    std::fill(in + count, in + kSegmentSamples, 0.0);
  }
  fftw_execute(fft_->plan);
  const double scale = 1.0 / window_power;
  for (size_t k = 0; k < kBins; ++k) {
    const double re = fft_->out[k][0];
    const double im = fft_->out[k][1];
    power_sum_[k] += (re * re + im * im) * scale;
  }
  ++segments_;
}

SpectrumResult SpectrumPool::Result(double dt_s, double band_lo_hz, double band_hi_hz) const {
  SpectrumResult result;
  const double nyquist_hz = 0.5 / dt_s;
  result.band_lo_hz = band_lo_hz;
  result.band_hi_hz = std::min(band_hi_hz, nyquist_hz);
  if (segments_ == 0) return result;
  const double n = static_cast<double>(kSegmentSamples);
  // One-sided: bins strictly between DC and Nyquist stand for two.
  const auto one_sided = [&](size_t k) {
    return (k == 0 || k == kBins - 1) ? power_sum_[k] : 2.0 * power_sum_[k];
  };
  size_t dominant = 0;
  double dominant_power = -1.0;
  double band_power = 0.0;
  bool band_has_bins = false;
  for (size_t k = 1; k < kBins; ++k) {
    const double p = one_sided(k);
    if (p > dominant_power) {
      dominant_power = p;
      dominant = k;
    }
    const double f_hz = static_cast<double>(k) / (n * dt_s);
    if (f_hz >= result.band_lo_hz && f_hz <= result.band_hi_hz) {
      band_power += p;
      band_has_bins = true;
    }
  }
  // Density averaged over segments, integrated over the band: sum(c_k S_k) / (segments N).
  band_power /= static_cast<double>(segments_) * n;
  result.dominant_hz = static_cast<double>(dominant) / (n * dt_s);
  const double variance =
      variance_samples_ > 0 ? sum_sq_dev_ / static_cast<double>(variance_samples_) : 0.0;
  if (band_has_bins && variance > 0.0)
    result.band_fraction = std::clamp(band_power / variance, 0.0, 1.0);
  return result;
}

void WelchAccumulator::AddEarly(double t_s, double power_w) {
  if (n_ == 0) {
    shift_w_ = power_w;
  } else {
    early_steps_.push_back(t_s - last_t_s_);
  }
  last_t_s_ = t_s;
  const double x = power_w - shift_w_;
  sum_ += x;
  sum_sq_ += x * x;
  ++n_;
  if (buffer_.empty()) buffer_.resize(kProvisionalSteps + 1);  // every sample until the step
  buffer_[filled_++] = power_w;
  if (early_steps_.size() == kProvisionalSteps) {
    SetProvisionalStep();
    buffer_.resize(kSegmentSamples);  // segments from here on; keeps the samples at its start
  }
}

void WelchAccumulator::AddBatch(const double* t_s, const double* power_w, size_t n) {
  size_t i = 0;
  while (i < n && !provisional_dt_s_) {
    AddEarly(t_s[i], power_w[i]);
    ++i;
  }
  if (i == n) return;
  // Variance sums, four accumulators wide.
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0, q0 = 0, q1 = 0, q2 = 0, q3 = 0;
  const double shift = shift_w_;
  size_t j = i;
  for (; j + 4 <= n; j += 4) {
    const double x0 = power_w[j] - shift, x1 = power_w[j + 1] - shift;
    const double x2 = power_w[j + 2] - shift, x3 = power_w[j + 3] - shift;
    s0 += x0;
    s1 += x1;
    s2 += x2;
    s3 += x3;
    q0 += x0 * x0;
    q1 += x1 * x1;
    q2 += x2 * x2;
    q3 += x3 * x3;
  }
  for (; j < n; ++j) {
    const double x = power_w[j] - shift;
    s0 += x;
    q0 += x * x;
  }
  sum_ += (s0 + s1) + (s2 + s3);
  sum_sq_ += (q0 + q1) + (q2 + q3);
  n_ += n - i;
  // Segments: a gap restarts the buffer. Most batches have none: find the largest step first
  // (branch-free), and walk the steps only when it is a gap.
  const double gap_s = kGapSteps * *provisional_dt_s_;
  double max_step_s = t_s[i] - last_t_s_;
  for (j = i + 1; j < n; ++j) max_step_s = std::max(max_step_s, t_s[j] - t_s[j - 1]);
  size_t run_start = i;
  if (max_step_s > gap_s) {
    double prev_t_s = last_t_s_;
    for (j = i; j < n; ++j) {
      if (t_s[j] - prev_t_s > gap_s) {
        Append(power_w + run_start, j - run_start);
        Restart();
        run_start = j;
      }
      prev_t_s = t_s[j];
    }
  }
  Append(power_w + run_start, n - run_start);
  last_t_s_ = t_s[n - 1];
}

// The buffer holds two halves of a segment; first_half_ is the older. Sample j of the segment
// being filled is at half (first_half_ + j / kHalfSegment) % 2, offset j % kHalfSegment, so the
// 50 % overlap needs no copy: after a segment, the newer half becomes the older.
double* WelchAccumulator::FillPosition() {
  const size_t half = filled_ < kHalfSegment ? first_half_ : first_half_ ^ 1;
  return buffer_.data() + half * kHalfSegment + filled_ % kHalfSegment;
}

void WelchAccumulator::Append(const double* power_w, size_t n) {
  while (n > 0) {
    const size_t take = std::min(n, kHalfSegment - filled_ % kHalfSegment);
    std::copy(power_w, power_w + take, FillPosition());
    filled_ += take;
    power_w += take;
    n -= take;
    if (filled_ == kSegmentSamples) EmitSegment();
  }
}

void WelchAccumulator::AppendStrided(const double* power_w, size_t stride, size_t n) {
  while (n > 0) {
    const size_t take = std::min(n, kHalfSegment - filled_ % kHalfSegment);
    double* out = FillPosition();
    for (size_t i = 0; i < take; ++i) out[i] = power_w[i * stride];
    filled_ += take;
    power_w += take * stride;
    n -= take;
    if (filled_ == kSegmentSamples) EmitSegment();
  }
}

void WelchAccumulator::EmitSegment() {
  const double* older = buffer_.data() + first_half_ * kHalfSegment;
  const double* newer = buffer_.data() + (first_half_ ^ 1) * kHalfSegment;
  // Each half is summed once: a half's sum serves both segments it belongs to.
  if (!older_sum_w_) older_sum_w_ = SumOfHalf(older);
  const double newer_sum_w = SumOfHalf(newer);
  pool_->AddSegment(older, newer, kSegmentSamples, *older_sum_w_ + newer_sum_w);
  emitted_ = true;
  // 50 % overlap: the newer half starts the next segment.
  first_half_ ^= 1;
  filled_ = kHalfSegment;
  older_sum_w_ = newer_sum_w;
}

void WelchAccumulator::Restart() {
  filled_ = 0;
  first_half_ = 0;
  older_sum_w_.reset();
}

void WelchAccumulator::AddPolls(WelchAccumulator* const* lanes, size_t lane_count,
                                const double* t_s, const double* power_w, size_t polls) {
  if (polls == 0 || lane_count == 0) return;
  WelchAccumulator& lead = *lanes[0];
  size_t i = 0;
  while (i < polls && !lead.provisional_dt_s_) {
    for (size_t g = 0; g < lane_count; ++g) {
      lanes[g]->AddEarly(t_s[i], power_w[i * lane_count + g]);
    }
    ++i;
  }
  if (i == polls) return;
  // Variance sums, one pair of accumulators per lane.
  assert(lane_count <= kMaxLanes);
  double shift[kMaxLanes], sum[kMaxLanes], sum_sq[kMaxLanes];
  for (size_t g = 0; g < lane_count; ++g) {
    shift[g] = lanes[g]->shift_w_;
    sum[g] = 0.0;
    sum_sq[g] = 0.0;
  }
  for (size_t r = i; r < polls; ++r) {
    const double* row = power_w + r * lane_count;
    for (size_t g = 0; g < lane_count; ++g) {
      const double x = row[g] - shift[g];
      sum[g] += x;
      sum_sq[g] += x * x;
    }
  }
  for (size_t g = 0; g < lane_count; ++g) {
    lanes[g]->sum_ += sum[g];
    lanes[g]->sum_sq_ += sum_sq[g];
    lanes[g]->n_ += polls - i;
  }
  // Segments: a gap (the same for every lane) restarts the buffers.
  const double gap_s = kGapSteps * *lead.provisional_dt_s_;
  double max_step_s = t_s[i] - lead.last_t_s_;
  for (size_t j = i + 1; j < polls; ++j) max_step_s = std::max(max_step_s, t_s[j] - t_s[j - 1]);
  const auto append = [&](size_t begin, size_t end) {
    for (size_t g = 0; g < lane_count; ++g) {
      lanes[g]->AppendStrided(power_w + begin * lane_count + g, lane_count, end - begin);
    }
  };
  size_t run_start = i;
  if (max_step_s > gap_s) {
    double prev_t_s = lead.last_t_s_;
    for (size_t j = i; j < polls; ++j) {
      if (t_s[j] - prev_t_s > gap_s) {
        append(run_start, j);
        for (size_t g = 0; g < lane_count; ++g) lanes[g]->Restart();
        run_start = j;
      }
      prev_t_s = t_s[j];
    }
  }
  append(run_start, polls);
  for (size_t g = 0; g < lane_count; ++g) lanes[g]->last_t_s_ = t_s[polls - 1];
}

void WelchAccumulator::SetProvisionalStep() {
  std::vector<double> steps = early_steps_;
  provisional_dt_s_ = Median(steps);
  // Drop what came before the last gap among the early steps. Step i joins samples i and i+1;
  // the buffer holds every sample so far (fewer than a segment).
  for (size_t i = early_steps_.size(); i-- > 0;) {
    if (early_steps_[i] > kGapSteps * *provisional_dt_s_) {
      const size_t keep_from = i + 1;
      std::copy(buffer_.begin() + static_cast<std::ptrdiff_t>(keep_from),
                buffer_.begin() + static_cast<std::ptrdiff_t>(filled_), buffer_.begin());
      filled_ -= keep_from;
      break;
    }
  }
  early_steps_.clear();
  early_steps_.shrink_to_fit();
}

void WelchAccumulator::Finish() {
  if (n_ == 0) return;
  const double mean = sum_ / static_cast<double>(n_);
  pool_->AddVariance(std::max(0.0, sum_sq_ - mean * sum_), n_);
  if (!provisional_dt_s_ && !early_steps_.empty()) SetProvisionalStep();
  // Never a full segment: the samples lie in order from the buffer's start.
  if (!emitted_ && filled_ >= kMinSegmentSamples) {
    // A buffer still of the early samples only (fewer than half a segment) has no second half.
    const double* second =
        buffer_.size() > kHalfSegment ? buffer_.data() + kHalfSegment : buffer_.data();
    pool_->AddSegment(buffer_.data(), second, filled_, Sum(buffer_.data(), filled_));
  }
  Restart();
}

}  // namespace headroom::analysis
