// Power-swing spectrum: the fraction of a series' variance in a frequency band, and the
// dominant frequency, from Welch's method with FFTW.
//
// Definition (docs/METRICS.md): samples are taken as equally spaced at the trace's median step
// dt. Each series is cut into segments of kSegmentSamples samples with 50 % overlap; each
// segment has its own mean removed, a periodic Hann window applied, and its periodogram added to
// one pool shared by all series. A series shorter than one segment is one segment of its own
// length, zero-padded. The band power is the pooled density integrated over the bins inside
// the band; the band fraction is that band power divided by the series' variance (each series
// about its own mean, pooled), clipped to [0, 1]. A segment that holds a step longer than 5x the
// series' provisional step (the median of its first 63 steps) is dropped: a gap is not a swing.
//
// Not thread-safe: one writer per accumulator; a SpectrumPool may be shared by the accumulators
// of one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace headroom::analysis {

inline constexpr size_t kSegmentSamples = 4096;
inline constexpr size_t kHalfSegment = kSegmentSamples / 2;
inline constexpr double kDefaultBandLoHz = 0.1;
inline constexpr double kDefaultBandHiHz = 20.0;

struct SpectrumResult {
  double band_lo_hz = kDefaultBandLoHz;
  double band_hi_hz = kDefaultBandHiHz;  // clipped at Nyquist
  std::optional<double> band_fraction;   // none: no variance, or the band is empty
  std::optional<double> dominant_hz;     // none: no segment
};

// The pooled periodograms of every series, and the FFT plan they share.
class SpectrumPool {
 public:
  SpectrumPool();
  ~SpectrumPool();
  SpectrumPool(const SpectrumPool&) = delete;
  SpectrumPool& operator=(const SpectrumPool&) = delete;

  // Adds one segment of `count` (<= kSegmentSamples) samples, the first kHalfSegment of them
  // from `first`, the rest from `second`, with its mean (sum_w / count) removed and
  // Hann-windowed.
  void AddSegment(const double* first, const double* second, size_t count, double sum_w);
  // Adds a series' variance about its own mean (sum of squared deviations over n samples).
  void AddVariance(double sum_sq_dev, uint64_t n) {
    sum_sq_dev_ += sum_sq_dev;
    variance_samples_ += n;
  }

  // REQUIRES: dt_s > 0; band_lo_hz < band_hi_hz.
  SpectrumResult Result(double dt_s, double band_lo_hz, double band_hi_hz) const;

  uint64_t segments() const { return segments_; }

 private:
  struct Fft;
  std::unique_ptr<Fft> fft_;
  std::vector<double> power_sum_;  // sum over segments of |X_k|^2 / sum(w^2), k = 0..N/2
  uint64_t segments_ = 0;
  double sum_sq_dev_ = 0.0;
  uint64_t variance_samples_ = 0;
};

// Welch segmentation of one series, feeding a SpectrumPool.
class WelchAccumulator {
 public:
  // The segment buffer is allocated when the series needs it: a few samples' worth while the
  // step is provisional, a whole segment from then on (a trace naming 30,000 GPUs of one sample
  // each must not cost 30,000 segments).
  explicit WelchAccumulator(SpectrumPool* pool) : pool_(pool) {}

  // Adds n time-ordered samples. REQUIRES: t_s not below the last time added.
  void AddBatch(const double* t_s, const double* power_w, size_t n);

  // Adds `polls` samples to each of `lane_count` series that share their times: series g gets
  // power_w[r * lane_count + g] at t_s[r]. The same as AddBatch on each series with its own
  // column. REQUIRES: every lane has been given the same times so far; lane_count <= kMaxLanes.
  static constexpr size_t kMaxLanes = 64;
  static void AddPolls(WelchAccumulator* const* lanes, size_t lane_count, const double* t_s,
                       const double* power_w, size_t polls);
  // REQUIRES: called once, after the last AddBatch.
  void Finish();

 private:
  static constexpr size_t kProvisionalSteps = 63;
  static constexpr double kGapSteps = 5.0;

  void AddEarly(double t_s, double power_w);
  void SetProvisionalStep();
  // Appends samples to the segment buffer, emitting every full segment.
  void Append(const double* power_w, size_t n);
  // The same for every stride-th value from power_w.
  void AppendStrided(const double* power_w, size_t stride, size_t n);
  // Where the next sample goes.
  double* FillPosition();
  // Emits the full segment and keeps its newer half.
  void EmitSegment();
  // Drops the samples of the segment being filled (after a gap).
  void Restart();

  SpectrumPool* pool_;
  std::vector<double> buffer_;         // two halves of kHalfSegment (see FillPosition)
  size_t filled_ = 0;                  // samples of the segment being filled
  size_t first_half_ = 0;              // the half holding its older samples
  std::optional<double> older_sum_w_;  // their sum, once the older half is full and summed
  std::vector<double> early_steps_;
  std::optional<double> provisional_dt_s_;
  double last_t_s_ = 0.0;
  double shift_w_ = 0.0;  // variance is summed about the first sample: well conditioned
  double sum_ = 0.0;
  double sum_sq_ = 0.0;
  uint64_t n_ = 0;
  bool emitted_ = false;
};

}  // namespace headroom::analysis
