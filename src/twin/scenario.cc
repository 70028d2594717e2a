#include "twin/scenario.h"

#include <fmt/format.h>
#include "common/read_file.h"

#include <toml++/toml.h>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "twin/builtin_scenarios.h"

namespace headroom::twin {
namespace {

constexpr double kBytesPerGib = 1073741824.0;
constexpr double kParamsPerBillion = 1e9;

// Reads keys out of a TOML document, remembering which it used, so that what is left over is
// an unknown key. Every error names the file, the line and the key.
class SchemaReader {
 public:
  SchemaReader(const toml::table& root, std::string_view source) : root_(root), source_(source) {}

  const toml::table* Table(std::string_view name, bool required) {
    const toml::node* node = root_.get(name);
    if (node == nullptr) {
      if (required) Fail(fmt::format("{}: missing table [{}]", source_, name));
      return nullptr;
    }
    const toml::table* table = node->as_table();
    if (table == nullptr) Fail(At(*node, name, "expected a table"));
    used_.insert(std::string(name));
    return table;
  }

  // The node of `table_name.key`, marked as read, and its full name; nullptr when absent,
  // which is an error unless the caller has a fallback.
  const toml::node* Find(const toml::table* table, std::string_view table_name,
                         std::string_view key, bool has_fallback, std::string& full) {
    full = fmt::format("{}.{}", table_name, key);
    const toml::node* node = table != nullptr ? table->get(key) : nullptr;
    if (node == nullptr) {
      if (!has_fallback) Fail(fmt::format("{}: missing key '{}'", source_, full));
      return nullptr;
    }
    used_.insert(full);
    return node;
  }

  // A number in [lo, hi]. Missing: `fallback`, or an error when there is none.
  double Number(const toml::table* table, std::string_view table_name, std::string_view key,
                double lo, double hi, std::optional<double> fallback = std::nullopt) {
    std::string full;
    const toml::node* node = Find(table, table_name, key, fallback.has_value(), full);
    if (node == nullptr) return fallback.value_or(0.0);
    const auto value = node->value<double>();
    if (!value || node->is_boolean()) {
      Fail(At(*node, full, "expected a number"));
      return 0.0;
    }
    if (!std::isfinite(*value) || *value < lo || *value > hi) {
      Fail(At(*node, full, fmt::format("{} is out of range [{}, {}]", *value, lo, hi)));
    }
    return *value;
  }

  int Integer(const toml::table* table, std::string_view table_name, std::string_view key, int lo,
              int hi, std::optional<int> fallback = std::nullopt) {
    std::string full;
    const toml::node* node = Find(table, table_name, key, fallback.has_value(), full);
    if (node == nullptr) return fallback.value_or(0);
    const auto value = node->value_exact<int64_t>();
    if (!value) {
      Fail(At(*node, full, "expected an integer"));
      return 0;
    }
    if (*value < lo || *value > hi) {
      Fail(At(*node, full, fmt::format("{} is out of range [{}, {}]", *value, lo, hi)));
    }
    return static_cast<int>(*value);
  }

  std::string Text(const toml::table* table, std::string_view table_name, std::string_view key,
                   std::optional<std::string> fallback = std::nullopt) {
    std::string full;
    const toml::node* node = Find(table, table_name, key, fallback.has_value(), full);
    if (node == nullptr) return fallback.value_or("");
    const auto value = node->value<std::string>();
    if (!value) Fail(At(*node, full, "expected a string"));
    return value.value_or("");
  }

  // "continuous" or "chunked" (twin/rollout.h). Missing: `fallback`.
  Admission AdmissionOf(const toml::table* table, std::string_view table_name, std::string_view key,
                        Admission fallback) {
    std::string full;
    const toml::node* node = Find(table, table_name, key, /*has_fallback=*/true, full);
    if (node == nullptr) return fallback;
    const auto text = node->value<std::string>();
    const auto admission = text ? ParseAdmission(*text) : std::nullopt;
    if (!admission) {
      Fail(At(*node, full,
              fmt::format("expected \"{}\" or \"{}\"", AdmissionName(Admission::kContinuous),
                          AdmissionName(Admission::kChunked))));
    }
    return admission.value_or(fallback);
  }

  IntRange Range(const toml::table* table, std::string_view table_name, std::string_view key,
                 int lo, int hi) {
    std::string full;
    const toml::node* node = Find(table, table_name, key, false, full);
    if (node == nullptr) return {};
    const toml::array* array = node->as_array();
    if (array == nullptr || array->size() != 2 || !(*array)[0].value_exact<int64_t>() ||
        !(*array)[1].value_exact<int64_t>()) {
      Fail(At(*node, full, "expected [low, high] integers"));
      return {};
    }
    const int a = static_cast<int>(*(*array)[0].value_exact<int64_t>());
    const int b = static_cast<int>(*(*array)[1].value_exact<int64_t>());
    if (a < lo || b > hi || a > b) {
      Fail(At(*node, full,
              fmt::format("[{}, {}] must satisfy {} <= low <= high <= {}", a, b, lo, hi)));
    }
    return {a, b};
  }

  std::vector<double> Numbers(const toml::table* table, std::string_view table_name,
                              std::string_view key, double lo, double hi) {
    std::string full;
    const toml::node* node = Find(table, table_name, key, false, full);
    if (node == nullptr) return {};
    const toml::array* array = node->as_array();
    std::vector<double> out;
    if (array == nullptr) {
      Fail(At(*node, full, "expected an array of numbers"));
      return out;
    }
    for (const toml::node& item : *array) {
      const auto v = item.value<double>();
      if (!v || item.is_boolean() || !std::isfinite(*v) || *v < lo || *v > hi) {
        Fail(At(item, full, fmt::format("every value must be a number in [{}, {}]", lo, hi)));
        return out;
      }
      out.push_back(*v);
    }
    return out;
  }

  // [low, high] numbers in [lo, hi] with low <= high. Missing: nullopt (the caller's default).
  std::optional<std::pair<double, double>> NumberPair(const toml::table* table,
                                                      std::string_view table_name,
                                                      std::string_view key, double lo, double hi) {
    std::string full;
    const toml::node* node = Find(table, table_name, key, /*has_fallback=*/true, full);
    if (node == nullptr) return std::nullopt;
    const toml::array* array = node->as_array();
    const auto item = [&](size_t i) -> std::optional<double> {
      if (array == nullptr || i >= array->size() || (*array)[i].is_boolean()) return std::nullopt;
      return (*array)[i].value<double>();
    };
    const auto a = item(0), b = item(1);
    if (array == nullptr || array->size() != 2 || !a || !b) {
      Fail(At(*node, full, "expected [low, high] numbers"));
      return std::nullopt;
    }
    if (!std::isfinite(*a) || !std::isfinite(*b) || *a < lo || *b > hi || *a > *b) {
      Fail(At(*node, full,
              fmt::format("[{}, {}] must satisfy {} <= low <= high <= {}", *a, *b, lo, hi)));
      return std::nullopt;
    }
    return std::pair{*a, *b};
  }

  // Keys of the document not read: the first is an error.
  void CheckUnknown() {
    for (const auto& [key, node] : root_) {
      const std::string table_name(key.str());
      if (!used_.count(table_name)) {
        Fail(At(node, table_name, "unknown key"));
        return;
      }
      if (const toml::table* table = node.as_table()) {
        for (const auto& [sub, sub_node] : *table) {
          const std::string full = fmt::format("{}.{}", table_name, sub.str());
          if (!used_.count(full)) {
            Fail(At(sub_node, full, "unknown key"));
            return;
          }
        }
      }
    }
  }

  void Fail(std::string message) {
    if (!error_) error_ = std::move(message);
  }
  void FailAt(std::string_view key, std::string_view reason) {
    Fail(fmt::format("{}: {}: {}", source_, key, reason));
  }
  const std::optional<std::string>& error() const { return error_; }

 private:
  std::string At(const toml::node& node, std::string_view key, std::string_view reason) const {
    const auto& where = node.source().begin;
    return fmt::format("{}:{}:{}: key '{}': {}", source_, where.line, where.column, key, reason);
  }

  const toml::table& root_;
  std::string source_;
  std::set<std::string> used_;
  std::optional<std::string> error_;
};

Logistic4 ReadLogistic(SchemaReader& r, const toml::table* t, std::string_view table,
                       std::string_view prefix, double max_level) {
  Logistic4 f;
  f.b0 = r.Number(t, table, fmt::format("{}_b0", prefix), -max_level, max_level);
  f.l = r.Number(t, table, fmt::format("{}_l", prefix), -max_level, max_level);
  f.x0 = r.Number(t, table, fmt::format("{}_x0", prefix), -10.0, 30.0);
  f.k = r.Number(t, table, fmt::format("{}_k", prefix), 0.0, 50.0);
  return f;
}

}  // namespace

double KvBytesPerToken(const Scenario& s) {
  return 2.0 * s.layers * s.kv_heads * s.head_dim * s.kv_bytes_per_value;  // K and V
}

int KvCapacitySequences(const Scenario& s) {
  const double memory_bytes = s.tp * s.memory_gib * kBytesPerGib * s.gpu_memory_utilization;
  const double weight_bytes = s.params_b * kParamsPerBillion * s.weight_bytes_per_param;
  const double kv_tokens = (memory_bytes - weight_bytes) / KvBytesPerToken(s);
  const double per_sequence = s.prompt_tokens + s.max_new_tokens;
  if (kv_tokens <= 0.0 || per_sequence <= 0.0) return 0;
  return static_cast<int>(std::min(kv_tokens / per_sequence, 1e9));
}

Result<Scenario> ParseScenario(std::string_view toml_text, std::string_view source_name) {
  toml::table root;
  try {
    root = toml::parse(toml_text, source_name);
  } catch (const toml::parse_error& e) {
    return Error::Input(fmt::format("{}:{}:{}: {}", source_name, e.source().begin.line,
                                    e.source().begin.column, e.description()));
  }
  SchemaReader r(root, source_name);
  Scenario s;
  s.source = std::string(source_name);

  const auto* scenario = r.Table("scenario", true);
  s.name = r.Text(scenario, "scenario", "name");
  s.description = r.Text(scenario, "scenario", "description", "");

  const auto* job = r.Table("job", true);
  s.gpus = r.Integer(job, "job", "gpus", 1, 4096);
  s.tp = r.Integer(job, "job", "tp", 1, 64);
  s.idle_before_s = r.Number(job, "job", "idle_before_s", 0.0, 1e6, 0.0);
  s.startup_s = r.Number(job, "job", "startup_s", 0.0, 1e6, 0.0);
  if (job != nullptr && job->get("stop_at_s") != nullptr) {
    s.stop_at_s = r.Number(job, "job", "stop_at_s", 0.0, 1e9);
  }

  const auto* hw = r.Table("hardware", true);
  s.gpu_model = r.Text(hw, "hardware", "gpu_model");
  s.nameplate_w = r.Number(hw, "hardware", "nameplate_w", 1.0, 5000.0);
  const double max_w = s.nameplate_w * 1.5;  // levels above 150 % of nameplate are typos
  s.memory_gib = r.Number(hw, "hardware", "memory_gib", 1.0, 1024.0);
  s.idle_w = r.Number(hw, "hardware", "idle_w", 0.0, max_w);
  s.idle_loaded_w = r.Number(hw, "hardware", "idle_loaded_w", 0.0, max_w);

  const auto* model = r.Table("model", true);
  s.model = r.Text(model, "model", "name");
  s.params_b = r.Number(model, "model", "params_b", 0.001, 10000.0);
  s.layers = r.Integer(model, "model", "layers", 1, 1000);
  s.kv_heads = r.Integer(model, "model", "kv_heads", 1, 1024);
  s.head_dim = r.Integer(model, "model", "head_dim", 1, 4096);
  s.weight_bytes_per_param = r.Number(model, "model", "weight_bytes_per_param", 0.1, 8.0, 2.0);
  s.kv_bytes_per_value = r.Number(model, "model", "kv_bytes_per_value", 0.5, 8.0, 2.0);

  const auto* rollout = r.Table("rollout", false);
  s.has_rollout = rollout != nullptr;
  if (s.has_rollout) {
    s.prompts_per_step = r.Integer(rollout, "rollout", "prompts_per_step", 1, 1 << 20);
    s.group_size = r.Integer(rollout, "rollout", "group_size", 1, 4096);
    s.concurrency = r.Integer(rollout, "rollout", "concurrency", 1, 1 << 20);
    s.admission = r.AdmissionOf(rollout, "rollout", "admission", Admission::kContinuous);
    s.group_size_range = r.Range(rollout, "rollout", "group_size_range", 1, 4096);
    s.concurrency_range = r.Range(rollout, "rollout", "concurrency_range", 1, 1 << 20);
    s.prompt_tokens = r.Number(rollout, "rollout", "prompt_tokens", 0.0, 1e7);
    s.max_new_tokens = r.Number(rollout, "rollout", "max_new_tokens", 1.0, 1e7);
    s.length_median_tokens = r.Number(rollout, "rollout", "length_median_tokens", 1.0, 1e7);
    s.length_sigma = r.Number(rollout, "rollout", "length_sigma", 0.0, 5.0);
    s.gpu_memory_utilization =
        r.Number(rollout, "rollout", "gpu_memory_utilization", 0.05, 1.0, 0.9);
    s.prefill_tokens_per_s = r.Number(rollout, "rollout", "prefill_tokens_per_s", 1.0, 1e9);
    s.prefill_power_w = r.Number(rollout, "rollout", "prefill_power_w", 0.0, max_w);
    s.decode.power_w = ReadLogistic(r, rollout, "rollout", "decode_power", max_w);
    s.decode.tokens_per_s = ReadLogistic(r, rollout, "rollout", "decode_tokens_per_s", 1e9);
    s.decode.n_min = r.Number(rollout, "rollout", "decode_min_batch", 1.0, 1e6, 8.0);
    s.decode.idle_loaded_w = s.idle_loaded_w;
  }

  const auto* logprob = r.Table("logprob", false);
  if (logprob != nullptr) {
    s.logprob_passes = r.Integer(logprob, "logprob", "passes", 0, 16);
    s.logprob_tokens_per_s = r.Number(logprob, "logprob", "tokens_per_s", 1.0, 1e9);
    s.logprob_power_w = r.Number(logprob, "logprob", "power_w", 0.0, max_w);
  }

  // [train] may be left out only by a generation-only job (a rollout proxy with no update).
  const auto* train = r.Table("train", !s.has_rollout);
  s.has_train = train != nullptr;
  if (s.has_train) {
    s.train_tokens_per_s = r.Number(train, "train", "tokens_per_s", 1.0, 1e9);
    s.train_power_w = r.Number(train, "train", "power_w", 0.0, max_w);
    s.train_tokens_per_step = r.Number(train, "train", "tokens_per_step", 0.0, 1e12,
                                       s.has_rollout ? 0.0 : std::optional<double>());
  }

  const auto* sync = r.Table("sync", false);
  if (sync != nullptr) {
    s.sync_s = r.Number(sync, "sync", "duration_s", 0.0, 1e5);
    s.sync_power_w = r.Number(sync, "sync", "power_w", 0.0, max_w);
  }

  const auto* checkpoint = r.Table("checkpoint", false);
  bool has_slow_checkpoints = false;
  if (checkpoint != nullptr) {
    s.checkpoint_every_steps = r.Integer(checkpoint, "checkpoint", "every_steps", 0, 1 << 30);
    s.checkpoint_s = r.Number(checkpoint, "checkpoint", "duration_s", 0.0, 1e6);
    s.checkpoint_power_w = r.Number(checkpoint, "checkpoint", "power_w", 0.0, max_w);
    s.checkpoint_slow_onset_mean_s =
        r.Number(checkpoint, "checkpoint", "slow_onset_mean_s", 0.0, 1e9, 0.0);
    has_slow_checkpoints = checkpoint->contains("slow_duration_s");
    s.checkpoint_slow_s =
        r.Number(checkpoint, "checkpoint", "slow_duration_s", 0.0, 1e6, s.checkpoint_s);
  }

  const auto* dynamics = r.Table("dynamics", true);
  s.tau_up_s = r.Number(dynamics, "dynamics", "tau_up_s", 0.0, 100.0);
  s.tau_down_s = r.Number(dynamics, "dynamics", "tau_down_s", 0.0, 100.0);
  s.noise_w = r.Number(dynamics, "dynamics", "noise_w", 0.0, max_w);
  s.noise_rho = r.Number(dynamics, "dynamics", "noise_rho", 0.0, 0.9999);

  const auto* telemetry = r.Table("telemetry", false);
  s.telemetry_average_s = r.Number(telemetry, "telemetry", "average_s", 0.0, 60.0, 1.0);

  const auto* limit = r.Table("power_limit", true);
  const auto fractions = r.Numbers(limit, "power_limit", "power_fraction", 0.01, 1.0);
  const auto factors = r.Numbers(limit, "power_limit", "time_factor", 1.0, 100.0);
  s.power_limit_min_w = r.Number(limit, "power_limit", "min_w", 1.0, max_w);

  const auto* control = r.Table("control", false);
  s.tick_s = r.Number(control, "control", "tick_s", 0.001, 10.0, 0.1);
  s.interval_s = r.Number(control, "control", "interval_s", 0.001, 600.0, 0.5);

  const auto* budget = r.Table("budget", true);
  s.budget_w = r.Number(budget, "budget", "default_w", 1.0, max_w);
  s.budget_range_w = {s.idle_loaded_w, s.nameplate_w};
  if (const auto range = r.NumberPair(budget, "budget", "range_w", 1.0, max_w)) {
    s.budget_range_w = *range;
  }

  r.CheckUnknown();
  if (r.error()) return Error::Input(*r.error());

  // Consistency.
  const auto fail = [&](std::string_view key, std::string reason) {
    return Error::Input(fmt::format("{}: {}: {}", source_name, key, reason));
  };
  if (s.budget_w < s.budget_range_w.first || s.budget_w > s.budget_range_w.second) {
    return fail("budget.default_w",
                fmt::format("{} W is outside budget.range_w [{}, {}]", s.budget_w,
                            s.budget_range_w.first, s.budget_range_w.second));
  }
  if (s.checkpoint_slow_onset_mean_s > 0.0 && !has_slow_checkpoints) {
    return fail("checkpoint.slow_onset_mean_s", "needs checkpoint.slow_duration_s");
  }
  if (has_slow_checkpoints && s.checkpoint_slow_onset_mean_s == 0.0) {
    return fail("checkpoint.slow_duration_s", "needs checkpoint.slow_onset_mean_s > 0");
  }
  if (s.gpus % s.tp != 0) {
    return fail("job.tp", fmt::format("tp = {} does not divide job.gpus = {}", s.tp, s.gpus));
  }
  if (fractions.size() != factors.size() || fractions.size() < 2) {
    return fail("power_limit", "power_fraction and time_factor need the same length, >= 2");
  }
  std::vector<ClockCurve::Point> points;
  for (size_t i = 0; i < fractions.size(); ++i) points.push_back({fractions[i], factors[i]});
  s.clock = ClockCurve(points);
  if (s.clock.points().front().power_fraction != 1.0 ||
      s.clock.points().front().time_factor != 1.0) {
    return fail("power_limit",
                "the curve must start at full clock: power_fraction 1, time_factor 1");
  }
  if (std::abs(s.interval_s / s.tick_s - std::round(s.interval_s / s.tick_s)) > 1e-9) {
    return fail("control.interval_s",
                fmt::format("{} s is not a whole number of {} s ticks", s.interval_s, s.tick_s));
  }
  if (s.stop_at_s && *s.stop_at_s <= s.idle_before_s + s.startup_s) {
    return fail("job.stop_at_s", "must be after job.idle_before_s + job.startup_s");
  }
  if (s.has_rollout) {
    const auto in = [](int v, IntRange range) { return v >= range.lo && v <= range.hi; };
    if (!in(s.group_size, s.group_size_range)) {
      return fail("rollout.group_size",
                  fmt::format("{} is outside group_size_range [{}, {}]", s.group_size,
                              s.group_size_range.lo, s.group_size_range.hi));
    }
    if (!in(s.concurrency, s.concurrency_range)) {
      return fail("rollout.concurrency",
                  fmt::format("{} is outside concurrency_range [{}, {}]", s.concurrency,
                              s.concurrency_range.lo, s.concurrency_range.hi));
    }
    if (s.length_median_tokens > s.max_new_tokens) {
      return fail("rollout.length_median_tokens", "is above rollout.max_new_tokens");
    }
    const int capacity = KvCapacitySequences(s);
    if (capacity < 1) {
      return fail(
          "model",
          fmt::format("KV cache capacity is below one sequence: {} GiB x {} GPUs "
                      "x {} leaves no room for {} tokens after {:.1f} GB of weights",
                      s.memory_gib, s.tp, s.gpu_memory_utilization,
                      s.prompt_tokens + s.max_new_tokens, s.params_b * s.weight_bytes_per_param));
    }
    if (s.logprob_passes > 0 && s.logprob_tokens_per_s <= 0.0) {
      return fail("logprob.tokens_per_s", "must be > 0");
    }
  } else if (s.train_tokens_per_step <= 0.0) {
    return fail("train.tokens_per_step", "a job without [rollout] needs tokens per step > 0");
  }
  return s;
}

namespace {

// A TOML basic string: quotes, backslashes and control characters escaped.
std::string Quoted(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// The shortest decimal that reads back as the same double (fmt's "{}").
std::string Num(double v) { return fmt::format("{}", v); }

}  // namespace

std::string ScenarioToToml(const Scenario& s, const std::vector<std::string>& header) {
  std::string o;
  for (const auto& line : header) o += "# " + line + "\n";
  const auto key = [&o](std::string_view k, const std::string& v) {
    o += fmt::format("{} = {}\n", k, v);
  };
  o += "\n[scenario]\n";
  key("name", Quoted(s.name));
  key("description", Quoted(s.description));
  o += "\n[job]\n";
  key("gpus", std::to_string(s.gpus));
  key("tp", std::to_string(s.tp));
  key("idle_before_s", Num(s.idle_before_s));
  key("startup_s", Num(s.startup_s));
  if (s.stop_at_s) key("stop_at_s", Num(*s.stop_at_s));
  o += "\n[hardware]\n";
  key("gpu_model", Quoted(s.gpu_model));
  key("nameplate_w", Num(s.nameplate_w));
  key("memory_gib", Num(s.memory_gib));
  key("idle_w", Num(s.idle_w));
  key("idle_loaded_w", Num(s.idle_loaded_w));
  o += "\n[model]\n";
  key("name", Quoted(s.model));
  key("params_b", Num(s.params_b));
  key("layers", std::to_string(s.layers));
  key("kv_heads", std::to_string(s.kv_heads));
  key("head_dim", std::to_string(s.head_dim));
  key("weight_bytes_per_param", Num(s.weight_bytes_per_param));
  key("kv_bytes_per_value", Num(s.kv_bytes_per_value));
  if (s.has_rollout) {
    o += "\n[rollout]\n";
    key("prompts_per_step", std::to_string(s.prompts_per_step));
    key("group_size", std::to_string(s.group_size));
    key("concurrency", std::to_string(s.concurrency));
    key("admission", Quoted(AdmissionName(s.admission)));
    key("group_size_range", fmt::format("[{}, {}]", s.group_size_range.lo, s.group_size_range.hi));
    key("concurrency_range",
        fmt::format("[{}, {}]", s.concurrency_range.lo, s.concurrency_range.hi));
    key("prompt_tokens", Num(s.prompt_tokens));
    key("max_new_tokens", Num(s.max_new_tokens));
    key("length_median_tokens", Num(s.length_median_tokens));
    key("length_sigma", Num(s.length_sigma));
    key("gpu_memory_utilization", Num(s.gpu_memory_utilization));
    key("prefill_tokens_per_s", Num(s.prefill_tokens_per_s));
    key("prefill_power_w", Num(s.prefill_power_w));
    const auto logistic = [&](std::string_view prefix, const Logistic4& f) {
      key(fmt::format("{}_b0", prefix), Num(f.b0));
      key(fmt::format("{}_l", prefix), Num(f.l));
      key(fmt::format("{}_x0", prefix), Num(f.x0));
      key(fmt::format("{}_k", prefix), Num(f.k));
    };
    logistic("decode_power", s.decode.power_w);
    logistic("decode_tokens_per_s", s.decode.tokens_per_s);
    key("decode_min_batch", Num(s.decode.n_min));
  }
  if (s.logprob_passes > 0 || s.logprob_tokens_per_s > 0.0) {
    o += "\n[logprob]\n";
    key("passes", std::to_string(s.logprob_passes));
    key("tokens_per_s", Num(s.logprob_tokens_per_s));
    key("power_w", Num(s.logprob_power_w));
  }
  if (s.has_train) {
    o += "\n[train]\n";
    key("tokens_per_s", Num(s.train_tokens_per_s));
    key("power_w", Num(s.train_power_w));
    if (s.train_tokens_per_step > 0.0 || !s.has_rollout) {
      key("tokens_per_step", Num(s.train_tokens_per_step));
    }
  }
  if (s.sync_s > 0.0 || s.sync_power_w > 0.0) {
    o += "\n[sync]\n";
    key("duration_s", Num(s.sync_s));
    key("power_w", Num(s.sync_power_w));
  }
  if (s.checkpoint_every_steps > 0 || s.checkpoint_s > 0.0) {
    o += "\n[checkpoint]\n";
    key("every_steps", std::to_string(s.checkpoint_every_steps));
    key("duration_s", Num(s.checkpoint_s));
    key("power_w", Num(s.checkpoint_power_w));
    if (s.checkpoint_slow_onset_mean_s > 0.0) {
      key("slow_onset_mean_s", Num(s.checkpoint_slow_onset_mean_s));
      key("slow_duration_s", Num(s.checkpoint_slow_s));
    }
  }
  o += "\n[dynamics]\n";
  key("tau_up_s", Num(s.tau_up_s));
  key("tau_down_s", Num(s.tau_down_s));
  key("noise_w", Num(s.noise_w));
  key("noise_rho", Num(s.noise_rho));
  o += "\n[telemetry]\n";
  key("average_s", Num(s.telemetry_average_s));
  o += "\n[power_limit]\n";
  std::string fractions, factors;
  for (const auto& p : s.clock.points()) {
    fractions += (fractions.empty() ? "" : ", ") + Num(p.power_fraction);
    factors += (factors.empty() ? "" : ", ") + Num(p.time_factor);
  }
  key("power_fraction", "[" + fractions + "]");
  key("time_factor", "[" + factors + "]");
  key("min_w", Num(s.power_limit_min_w));
  o += "\n[control]\n";
  key("tick_s", Num(s.tick_s));
  key("interval_s", Num(s.interval_s));
  o += "\n[budget]\n";
  key("default_w", Num(s.budget_w));
  key("range_w",
      fmt::format("[{}, {}]", Num(s.budget_range_w.first), Num(s.budget_range_w.second)));
  return o;
}

Result<Scenario> LoadScenario(std::string_view name_or_path) {
  if (auto text = BuiltinScenarioText(name_or_path)) {
    return ParseScenario(*text, fmt::format("scenario {}", name_or_path));
  }
  const std::string path(name_or_path);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    std::string names;
    for (const auto& n : BuiltinScenarioNames()) names += (names.empty() ? "" : ", ") + n;
    return Error::Usage(
        fmt::format("no scenario '{}': not a built-in ({}) and not a file", name_or_path, names));
  }
  auto text = ReadFileCapped(path, kMaxSmallFileBytes);
  if (!text) return std::move(text).error();
  return ParseScenario(*text, path);
}

std::vector<std::string> BuiltinScenarioNames() {
  std::vector<std::string> names;
  for (const auto& b : kBuiltinScenarios) names.emplace_back(b.name);
  return names;
}

std::optional<std::string_view> BuiltinScenarioText(std::string_view name) {
  for (const auto& b : kBuiltinScenarios) {
    if (b.name == name) return b.text;
  }
  return std::nullopt;
}

}  // namespace headroom::twin
