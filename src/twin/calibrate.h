// `headroom twin calibrate`: fits the twin's curves to measurements.
//
// - Decode power and throughput against occupancy: a 4-parameter logistic in log2 n, fitted by
//   Levenberg-Marquardt (Eigen) to ML.ENERGY rows (one model, GPU and TP degree; the fitting
//   task only), with the error on held-out rows (the other tasks) reported beside it.
// - Dynamics from a measured trace with a concurrency column: per-concurrency steady levels,
//   up and down time constants of the responses to concurrency changes, and AR(1) noise.
//
// Too few points, or a fit that does not converge, is an error; nothing is written then.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "twin/curves.h"

namespace headroom::twin {

struct LogisticFit {
  Logistic4 curve;
  double rmse = 0.0;
  size_t points = 0;
};

inline constexpr size_t kMinLogisticPoints = 5;

// Least-squares fit of y = b0 + l / (1 + exp(-k (x - x0))). Fails with fewer than
// kMinLogisticPoints points or without convergence.
Result<LogisticFit> FitLogistic(std::span<const double> x, std::span<const double> y);

// Root-mean-square error of a curve on points.
double Rmse(const Logistic4& curve, std::span<const double> x, std::span<const double> y);

// One ML.ENERGY configuration row.
struct MlEnergyRow {
  std::string task, model, gpu;
  int num_gpus = 0, tp = 0;
  double avg_batch = 0.0;
  double power_per_gpu_w = 0.0;
  double tokens_per_s = 0.0;  // whole run
};

// Reads the flattened ML.ENERGY v3 CSV (mlenergy_v3_llm_configs.csv).
Result<std::vector<MlEnergyRow>> ReadMlEnergyCsv(const std::string& path);

struct DecodeCalibration {
  std::string model, gpu, fit_task;
  int tp = 0;
  LogisticFit power;   // per GPU, x = log2 avg batch
  LogisticFit tokens;  // per engine (tok/s), x = log2 avg batch
  size_t held_out_points = 0;
  std::optional<double> held_out_power_rmse_w;
  std::optional<double> held_out_tokens_rmse;
  double min_batch = 0.0;  // lowest fitted batch
  struct HeldOutModel {
    std::string model;
    size_t points = 0;
    double power_rmse_w = 0.0;
  };
  std::vector<HeldOutModel> held_out_models;  // other models predicted by this fit
};

// Fits on the rows of `model` on `gpu` at `tp` for `fit_task`; the model's other tasks, and
// `held_out_models` (same GPU and TP, any task), are predicted and their error reported.
Result<DecodeCalibration> CalibrateDecode(const std::vector<MlEnergyRow>& rows,
                                          const std::string& model, const std::string& gpu, int tp,
                                          const std::string& fit_task,
                                          const std::vector<std::string>& held_out_models = {});

// The [rollout] keys of a scenario file holding a calibration, with its provenance as comments.
std::string DecodeCalibrationToml(const DecodeCalibration& c, const std::string& source);

struct DynamicsFit {
  double tau_up_s = 0.0;
  double tau_down_s = 0.0;
  double noise_w = 0.0;
  double noise_rho = 0.0;  // per sample of the trace
  size_t up_steps = 0, down_steps = 0;
  double sample_interval_s = 0.0;
};

// From one GPU's samples (times, power, concurrency in force). Fails without at least one up
// and one down change of concurrency between steady levels.
Result<DynamicsFit> FitDynamics(std::span<const double> t_s, std::span<const double> power_w,
                                std::span<const double> concurrency);

std::string DynamicsFitToml(const DynamicsFit& fit, const std::string& source);

}  // namespace headroom::twin
