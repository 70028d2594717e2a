#include "twin/calibrate.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>
#include <unsupported/Eigen/NonLinearOptimization>

#include "common/read_file.h"
#include "common/stats.h"

namespace headroom::twin {
namespace {

// Residuals and Jacobian of the logistic for Eigen's Levenberg-Marquardt.
struct LogisticFunctor {
  using Scalar = double;
  enum { InputsAtCompileTime = Eigen::Dynamic, ValuesAtCompileTime = Eigen::Dynamic };
  using InputType = Eigen::VectorXd;
  using ValueType = Eigen::VectorXd;
  using JacobianType = Eigen::MatrixXd;

  std::span<const double> x, y;
  int inputs() const { return 4; }
  int values() const { return static_cast<int>(x.size()); }

  int operator()(const Eigen::VectorXd& p, Eigen::VectorXd& residual) const {
    for (size_t i = 0; i < x.size(); ++i) {
      const double s = 1.0 / (1.0 + std::exp(-p[3] * (x[i] - p[2])));
      residual[static_cast<Eigen::Index>(i)] = p[0] + p[1] * s - y[i];
    }
    return 0;
  }
  int df(const Eigen::VectorXd& p, Eigen::MatrixXd& jacobian) const {
    for (size_t i = 0; i < x.size(); ++i) {
      const auto r = static_cast<Eigen::Index>(i);
      const double s = 1.0 / (1.0 + std::exp(-p[3] * (x[i] - p[2])));
      const double ds = s * (1.0 - s);
      jacobian(r, 0) = 1.0;
      jacobian(r, 1) = s;
      jacobian(r, 2) = -p[1] * ds * p[3];
      jacobian(r, 3) = p[1] * ds * (x[i] - p[2]);
    }
    return 0;
  }
};

bool Converged(Eigen::LevenbergMarquardtSpace::Status status) {
  using namespace Eigen::LevenbergMarquardtSpace;
  switch (status) {
    case RelativeReductionTooSmall:
    case RelativeErrorTooSmall:
    case RelativeErrorAndReductionTooSmall:
    case CosinusTooSmall:
    case FtolTooSmall:
    case XtolTooSmall:
    case GtolTooSmall:
      return true;
    default:
      return false;
  }
}

std::vector<std::string> SplitCsvLine(const std::string& line) {
  std::vector<std::string> out;
  std::string field;
  bool quoted = false;
  for (char c : line) {
    if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      out.push_back(field);
      field.clear();
    } else if (c != '\r') {
      field += c;
    }
  }
  out.push_back(field);
  return out;
}

// Mean of v over [begin, end).
double Mean(std::span<const double> v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

}  // namespace

double Rmse(const Logistic4& curve, std::span<const double> x, std::span<const double> y) {
  double ss = 0.0;
  for (size_t i = 0; i < x.size(); ++i) ss += (curve(x[i]) - y[i]) * (curve(x[i]) - y[i]);
  return x.empty() ? 0.0 : std::sqrt(ss / static_cast<double>(x.size()));
}

Result<LogisticFit> FitLogistic(std::span<const double> x, std::span<const double> y) {
  if (x.size() < kMinLogisticPoints) {
    return Error::Input(fmt::format("too few points to fit a 4-parameter logistic: {} (need {})",
                                    x.size(), kMinLogisticPoints));
  }
  const auto [y_min, y_max] = std::minmax_element(y.begin(), y.end());
  std::vector<double> xs(x.begin(), x.end());
  std::sort(xs.begin(), xs.end());
  std::optional<LogisticFit> best;
  // A few starts for the knee and the slope; the best converged fit wins.
  for (double knee_q : {0.25, 0.5, 0.75}) {
    for (double k0 : {0.5, 1.0, 2.0}) {
      Eigen::VectorXd p(4);
      p << *y_min, *y_max - *y_min,
          xs[static_cast<size_t>(knee_q * static_cast<double>(xs.size() - 1))], k0;
      LogisticFunctor f{x, y};
      Eigen::LevenbergMarquardt<LogisticFunctor> lm(f);
      lm.parameters.maxfev = 4000;
      const auto status = lm.minimize(p);
      if (!Converged(status) || !p.allFinite()) continue;
      LogisticFit fit;
      fit.curve = {p[0], p[1], p[2], p[3]};
      fit.rmse = Rmse(fit.curve, x, y);
      fit.points = x.size();
      if (!best || fit.rmse < best->rmse) best = fit;
    }
  }
  if (!best) return Error::Input("the logistic fit did not converge from any start");
  return *best;
}

Result<std::vector<MlEnergyRow>> ReadMlEnergyCsv(const std::string& path) {
  auto content = ReadFileCapped(path, kMaxDataFileBytes);
  if (!content) return std::move(content).error();
  std::istringstream in(std::move(*content));
  std::string line;
  if (!std::getline(in, line)) return Error::Input(fmt::format("{}: empty file", path));
  const auto header = SplitCsvLine(line);
  std::map<std::string, size_t> column;
  for (size_t i = 0; i < header.size(); ++i) column[header[i]] = i;
  const char* needed[] = {"task",
                          "model_id",
                          "gpu_model",
                          "num_gpus",
                          "tensor_parallel",
                          "avg_batch_size",
                          "avg_power_per_gpu_w",
                          "output_tok_per_s"};
  for (const char* name : needed) {
    if (!column.count(name)) {
      return Error::Input(
          fmt::format("{}:1: missing column '{}' (an ML.ENERGY v3 flattened CSV)", path, name));
    }
  }
  std::vector<MlEnergyRow> rows;
  int64_t line_no = 1;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty() || line == "\r") continue;
    const auto f = SplitCsvLine(line);
    const auto number = [&](const char* name, double& out) -> Status {
      const size_t i = column[name];
      const std::string& text = i < f.size() ? f[i] : std::string();
      const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
      if (ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(out)) {
        return Error::Input(LocatedMessage(path, line_no, static_cast<int>(i + 1), name,
                                           fmt::format("unparsable number '{}'", text)));
      }
      return OkStatus();
    };
    MlEnergyRow row;
    row.task = f[column["task"]];
    row.model = f[column["model_id"]];
    row.gpu = f[column["gpu_model"]];
    double num_gpus = 0, tp = 0;
    for (auto [name, out] : {std::pair{"num_gpus", &num_gpus}, std::pair{"tensor_parallel", &tp},
                             std::pair{"avg_batch_size", &row.avg_batch},
                             std::pair{"avg_power_per_gpu_w", &row.power_per_gpu_w},
                             std::pair{"output_tok_per_s", &row.tokens_per_s}}) {
      if (auto s = number(name, *out); !s) return std::move(s).error();
    }
    row.num_gpus = static_cast<int>(num_gpus);
    row.tp = static_cast<int>(tp);
    rows.push_back(row);
  }
  return rows;
}

Result<DecodeCalibration> CalibrateDecode(const std::vector<MlEnergyRow>& rows,
                                          const std::string& model, const std::string& gpu, int tp,
                                          const std::string& fit_task,
                                          const std::vector<std::string>& held_out_models) {
  DecodeCalibration c;
  c.model = model;
  c.gpu = gpu;
  c.tp = tp;
  c.fit_task = fit_task;
  std::vector<double> fx, fp, ft, hx, hp, ht;
  for (const auto& r : rows) {
    if (r.model != model || r.gpu != gpu || r.tp != tp || r.avg_batch <= 0.0) continue;
    const double engines = static_cast<double>(r.num_gpus) / r.tp;
    const double x = std::log2(r.avg_batch);
    auto& xs = r.task == fit_task ? fx : hx;
    auto& ps = r.task == fit_task ? fp : hp;
    auto& ts = r.task == fit_task ? ft : ht;
    xs.push_back(x);
    ps.push_back(r.power_per_gpu_w);
    ts.push_back(r.tokens_per_s / engines);
  }
  if (fx.size() < kMinLogisticPoints) {
    return Error::Input(fmt::format(
        "too few ML.ENERGY rows for model '{}', GPU '{}', TP {}, task '{}': {} (need {})", model,
        gpu, tp, fit_task, fx.size(), kMinLogisticPoints));
  }
  auto power = FitLogistic(fx, fp);
  if (!power) return Error::Input(fmt::format("decode power: {}", power.error().message()));
  auto tokens = FitLogistic(fx, ft);
  if (!tokens) return Error::Input(fmt::format("decode throughput: {}", tokens.error().message()));
  c.power = *power;
  c.tokens = *tokens;
  c.min_batch = std::exp2(*std::min_element(fx.begin(), fx.end()));
  c.held_out_points = hx.size();
  if (!hx.empty()) {
    c.held_out_power_rmse_w = Rmse(c.power.curve, hx, hp);
    c.held_out_tokens_rmse = Rmse(c.tokens.curve, hx, ht);
  }
  for (const auto& other : held_out_models) {
    std::vector<double> ox, op;
    for (const auto& r : rows) {
      if (r.model != other || r.gpu != gpu || r.tp != tp || r.avg_batch <= 0.0) continue;
      ox.push_back(std::log2(r.avg_batch));
      op.push_back(r.power_per_gpu_w);
    }
    if (ox.empty()) {
      return Error::Input(
          fmt::format("held-out model '{}' has no rows on GPU '{}' with TP {}", other, gpu, tp));
    }
    c.held_out_models.push_back({other, ox.size(), Rmse(c.power.curve, ox, op)});
  }
  return c;
}

std::string DecodeCalibrationToml(const DecodeCalibration& c, const std::string& source) {
  std::string out;
  out += fmt::format("# Decode curves fitted by `headroom twin calibrate` on {}\n", source);
  out += fmt::format("# model {}, GPU {}, TP {}, task {}: {} points\n", c.model, c.gpu, c.tp,
                     c.fit_task, c.power.points);
  out += fmt::format("# power RMSE {:.2f} W per GPU; throughput RMSE {:.1f} tok/s per engine\n",
                     c.power.rmse, c.tokens.rmse);
  if (c.held_out_power_rmse_w) {
    out += fmt::format(
        "# held out (other tasks, {} points): power RMSE {:.2f} W, throughput "
        "RMSE {:.1f} tok/s\n",
        c.held_out_points, *c.held_out_power_rmse_w, *c.held_out_tokens_rmse);
  }
  for (const auto& m : c.held_out_models) {
    out += fmt::format("# held-out model {} ({} points, all tasks): power RMSE {:.2f} W\n", m.model,
                       m.points, m.power_rmse_w);
  }
  out += "[rollout]\n";
  const auto emit = [&](std::string_view prefix, const Logistic4& f) {
    out += fmt::format("{}_b0 = {:.6g}\n{}_l = {:.6g}\n{}_x0 = {:.6g}\n{}_k = {:.6g}\n", prefix,
                       f.b0, prefix, f.l, prefix, f.x0, prefix, f.k);
  };
  emit("decode_power", c.power.curve);
  emit("decode_tokens_per_s", c.tokens.curve);
  out += fmt::format("decode_min_batch = {:.6g}\n", c.min_batch);
  return out;
}

Result<DynamicsFit> FitDynamics(std::span<const double> t_s, std::span<const double> power_w,
                                std::span<const double> concurrency) {
  const size_t n = t_s.size();
  if (n < 3) return Error::Input("too few samples to fit dynamics");
  std::vector<double> steps;
  for (size_t i = 1; i < n; ++i) steps.push_back(t_s[i] - t_s[i - 1]);
  DynamicsFit fit;
  fit.sample_interval_s = Median(steps);

  // Segments of constant concurrency; the second half of a segment is steady.
  struct Segment {
    size_t begin, end;
    double c;
  };
  std::vector<Segment> segments;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && concurrency[j] == concurrency[i]) ++j;
    segments.push_back({i, j, concurrency[i]});
    i = j;
  }
  constexpr size_t kMinSteadySamples = 5;
  std::map<double, std::vector<double>> levels_by_c;
  for (const auto& s : segments) {
    const size_t half = s.begin + (s.end - s.begin) / 2;
    if (s.end - half < kMinSteadySamples) continue;
    levels_by_c[s.c].push_back(Mean(power_w.subspan(half, s.end - half)));
  }
  std::map<double, double> level;
  for (auto& [c, v] : levels_by_c) level[c] = Median(v);

  // Noise: residuals about the segment's steady level in steady halves.
  double ss = 0.0, lag = 0.0;
  size_t count = 0;
  for (const auto& s : segments) {
    const size_t half = s.begin + (s.end - s.begin) / 2;
    if (s.end - half < kMinSteadySamples) continue;
    const double m = Mean(power_w.subspan(half, s.end - half));
    for (size_t i = half; i < s.end; ++i) {
      const double e = power_w[i] - m;
      ss += e * e;
      ++count;
      if (i > half) lag += e * (power_w[i - 1] - m);
    }
  }
  if (count == 0) return Error::Input("no steady segment of constant concurrency to fit noise on");
  fit.noise_w = std::sqrt(ss / static_cast<double>(count));
  fit.noise_rho = ss > 0.0 ? std::clamp(lag / ss, 0.0, 0.9999) : 0.0;

  // Step responses: r(s) = (p - L_old) / (L_new - L_old) against 1 - exp(-s / tau), s from the
  // last sample at the old concurrency.
  std::vector<double> up_s, up_r, down_s, down_r;
  for (size_t k = 1; k < segments.size(); ++k) {
    const auto& prev = segments[k - 1];
    const auto& next = segments[k];
    if (!level.count(prev.c) || !level.count(next.c)) continue;
    const double l_old = level[prev.c], l_new = level[next.c];
    if (std::abs(l_new - l_old) < 3.0 * fit.noise_w) continue;  // too small to see
    const double t_ref = t_s[next.begin - 1];
    const size_t stop = next.begin + (next.end - next.begin) / 2;
    auto& ss_out = l_new > l_old ? up_s : down_s;
    auto& rr_out = l_new > l_old ? up_r : down_r;
    for (size_t i = next.begin; i < stop; ++i) {
      ss_out.push_back(t_s[i] - t_ref);
      rr_out.push_back((power_w[i] - l_old) / (l_new - l_old));
    }
    (l_new > l_old ? fit.up_steps : fit.down_steps)++;
  }
  if (fit.up_steps == 0 || fit.down_steps == 0) {
    return Error::Input(
        "dynamics need at least one rise and one fall of concurrency between "
        "steady levels");
  }
  // One-parameter least squares by golden-section search on log tau.
  const auto fit_tau = [](const std::vector<double>& s, const std::vector<double>& r) {
    const auto cost = [&](double log_tau) {
      const double tau = std::exp(log_tau);
      double c = 0.0;
      for (size_t i = 0; i < s.size(); ++i) {
        const double e = r[i] - (1.0 - std::exp(-s[i] / tau));
        c += e * e;
      }
      return c;
    };
    double a = std::log(1e-3), b = std::log(1e3);
    const double g = (std::sqrt(5.0) - 1.0) / 2.0;
    for (int it = 0; it < 200; ++it) {
      const double c1 = b - g * (b - a), c2 = a + g * (b - a);
      if (cost(c1) < cost(c2)) {
        b = c2;
      } else {
        a = c1;
      }
    }
    return std::exp(0.5 * (a + b));
  };
  fit.tau_up_s = fit_tau(up_s, up_r);
  fit.tau_down_s = fit_tau(down_s, down_r);
  return fit;
}

std::string DynamicsFitToml(const DynamicsFit& fit, const std::string& source) {
  return fmt::format(
      "# Dynamics fitted by `headroom twin calibrate --fit-dynamics` on {}\n"
      "# {} rises and {} falls of concurrency; samples every {:.4g} s\n"
      "[dynamics]\n"
      "tau_up_s = {:.4g}\n"
      "tau_down_s = {:.4g}\n"
      "noise_w = {:.4g}\n"
      "noise_rho = {:.4g}  # per sample of that trace\n",
      source, fit.up_steps, fit.down_steps, fit.sample_interval_s, fit.tau_up_s, fit.tau_down_s,
      fit.noise_w, fit.noise_rho);
}

}  // namespace headroom::twin
