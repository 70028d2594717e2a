// Numbers on the command line: one strict parser, and an explicit finite range, for every
// numeric option of every command.
//
// Accepted text, nothing else (no blanks, no trailing bytes):
//   reals     [+-]digits[.digits][(e|E)[+-]digits]    e.g. 0.5, -3, 2.5e3, 1E-3, 010.5
//   integers  [+-]digits, without a leading zero     e.g. 16, +4, -1, 0
// Refused: NaN, inf, infinity, hex (0x10), binary (0b1), "", ".5", "5.", blanks, values that
// overflow (1e999, 2^63), values outside [lo, hi], and integers with a leading zero (010: CLI11
// and strtol would read it as octal 8, a user means ten). Every message is one line, with the
// text quoted (control bytes escaped) and the bounds in their shortest form, e.g.
// "'nan' is not a number in [0.01, 60]".
//
// The CLI11 validators (->check) see the raw option text before CLI11 converts it, so CLI11's
// own lenient conversions (hex, binary, octal, "inf") never see refused text. The option keeps
// its type (FLOAT, INT, UINT) in --help, followed by the range: "FLOAT:[0.01, 60]".
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "trace/schema.h"

namespace headroom::cli {

// REQUIRES: lo <= hi, both finite. Usage errors without the option name (callers add it).
Result<double> ParseReal(std::string_view text, double lo, double hi);
Result<int64_t> ParseInteger(std::string_view text, int64_t lo, int64_t hi);

// CLI11 validators: ParseReal / ParseInteger on the option's raw text; the error becomes
// "--flag: 'TEXT' is not a number in [LO, HI]" (CLI11 adds the flag).
CLI::Validator Real(double lo, double hi);
CLI::Validator Integer(int64_t lo, int64_t hi);

// Window lengths with their unit (--windows 0.5s,30s,5min; --risk-window 30s): a bare number is
// refused, and each must be in [kMinWindowS, kMaxWindowS]. Errors start with `flag`.
inline constexpr double kMinWindowS = 0.001;
inline constexpr double kMaxWindowS = 30 * 86400.0;  // 30 days
Result<double> ParseWindowS(std::string_view flag, std::string_view text);
Result<std::vector<double>> ParseWindowListS(std::string_view flag, std::string_view text);

// `text` for a one-line message: at most 40 bytes (then "..."), control bytes and bytes >= 0x7f
// as \xNN.
std::string QuoteForMessage(std::string_view text);

// Bounds shared by several commands, with their units.
inline constexpr double kMinGpuPowerW = 1.0;
inline constexpr double kMaxGpuPowerW = trace::kMaxPowerW;  // per GPU: budgets, nameplates
inline constexpr double kMaxSitePowerW = 1e9;               // 1 GW: a fleet or a summed trace
inline constexpr int64_t kMaxSeed = 4294967295;             // 2^32 - 1
inline constexpr int64_t kMaxGpus = 4096;                   // GPUs of one trace or job
inline constexpr int64_t kMaxConcurrency = 1 << 20;         // the scenario files' bound
inline constexpr int64_t kMaxGroupSize = 4096;              // the scenario files' bound
inline constexpr double kMaxEnergyPriceUsdPerMwh = 1e5;     // 100 USD per kWh
inline constexpr double kMaxCarbonGPerKwh = 5000.0;         // coal is ~1000
inline constexpr double kMinDurationS = 0.001;              // simulated or synthesised time
inline constexpr double kMaxDurationS = 1e7;                // 116 days
inline constexpr double kMinIntervalS = 0.001;              // sample intervals
inline constexpr double kMaxIntervalS = 3600.0;

}  // namespace headroom::cli
