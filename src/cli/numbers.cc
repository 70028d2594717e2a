#include "cli/numbers.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <system_error>

#include "common/duration.h"

namespace headroom::cli {
namespace {

constexpr size_t kMaxQuotedBytes = 40;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// The length of the run of digits at text[i...].
size_t Digits(std::string_view text, size_t i) {
  size_t n = 0;
  while (i + n < text.size() && IsDigit(text[i + n])) ++n;
  return n;
}

// Whether `text` is [+-]digits[.digits][(e|E)[+-]digits] (`real`) or [+-]digits.
bool IsPlainDecimal(std::string_view text, bool real) {
  size_t i = 0;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
  size_t n = Digits(text, i);
  if (n == 0) return false;
  i += n;
  if (!real) return i == text.size();
  if (i < text.size() && text[i] == '.') {
    n = Digits(text, ++i);
    if (n == 0) return false;
    i += n;
  }
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    n = Digits(text, i);
    if (n == 0) return false;
    i += n;
  }
  return i == text.size();
}

template <class T>
std::string Bounds(T lo, T hi) {
  return fmt::format("[{}, {}]", lo, hi);
}

}  // namespace

std::string QuoteForMessage(std::string_view text) {
  std::string out = "'";
  for (size_t i = 0; i < text.size() && i < kMaxQuotedBytes; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c >= 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.size() > kMaxQuotedBytes) out += "...";
  out += "'";
  return out;
}

Result<double> ParseReal(std::string_view text, double lo, double hi) {
  const auto not_a_number = [&] {
    return Error::Usage(
        fmt::format("{} is not a number in {}", QuoteForMessage(text), Bounds(lo, hi)));
  };
  if (!IsPlainDecimal(text, /*real=*/true)) return not_a_number();
  // from_chars takes no '+'.
  const std::string_view digits = text.front() == '+' ? text.substr(1) : text;
  double value = 0.0;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec == std::errc::result_out_of_range) {
    // Overflow (1e999) or underflow (1e-999): outside any finite range of ours but [0, x] for
    // an underflow, which is 0.
    const bool underflow = [&] {
      const size_t e = digits.find_first_of("eE");
      return e != std::string_view::npos && e + 1 < digits.size() && digits[e + 1] == '-';
    }();
    if (!underflow) {
      return Error::Usage(
          fmt::format("{} is out of range {}", QuoteForMessage(text), Bounds(lo, hi)));
    }
    value = digits.front() == '-' ? -0.0 : 0.0;
  } else if (ec != std::errc() || ptr != digits.data() + digits.size() || !std::isfinite(value)) {
    return not_a_number();
  }
  if (!(value >= lo && value <= hi)) {
    return Error::Usage(
        fmt::format("{} is out of range {}", QuoteForMessage(text), Bounds(lo, hi)));
  }
  return value;
}

Result<int64_t> ParseInteger(std::string_view text, int64_t lo, int64_t hi) {
  if (!IsPlainDecimal(text, /*real=*/false)) {
    return Error::Usage(
        fmt::format("{} is not an integer in {}", QuoteForMessage(text), Bounds(lo, hi)));
  }
  const size_t first_digit = IsDigit(text.front()) ? 0 : 1;
  if (text[first_digit] == '0' && first_digit + 1 < text.size()) {
    return Error::Usage(fmt::format("{} is not an integer in {} (a leading zero reads as octal)",
                                    QuoteForMessage(text), Bounds(lo, hi)));
  }
  const std::string_view digits = text.front() == '+' ? text.substr(1) : text;
  int64_t value = 0;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || ptr != digits.data() + digits.size() || value < lo || value > hi) {
    return Error::Usage(
        fmt::format("{} is out of range {}", QuoteForMessage(text), Bounds(lo, hi)));
  }
  return value;
}

Result<std::vector<double>> ParseWindowListS(std::string_view flag, std::string_view text) {
  auto windows = ParseDurationListS(text, BareNumber::kRefused);
  if (!windows) return Error::Usage(fmt::format("{}: {}", flag, windows.error().message()));
  for (double w : *windows) {
    if (w < kMinWindowS || w > kMaxWindowS) {
      return Error::Usage(fmt::format("{}: {} is out of range [{}, {}] s", flag,
                                      QuoteForMessage(text), kMinWindowS, kMaxWindowS));
    }
  }
  return windows;
}

Result<double> ParseWindowS(std::string_view flag, std::string_view text) {
  if (text.find(',') != std::string_view::npos) {
    return Error::Usage(
        fmt::format("{}: {}: expected one duration, e.g. 30s", flag, QuoteForMessage(text)));
  }
  auto windows = ParseWindowListS(flag, text);
  if (!windows) return std::move(windows).error();
  return windows->front();
}

CLI::Validator Real(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        auto parsed = ParseReal(text, lo, hi);
        return parsed ? std::string() : parsed.error().message();
      },
      Bounds(lo, hi));
}

CLI::Validator Integer(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        auto parsed = ParseInteger(text, lo, hi);
        return parsed ? std::string() : parsed.error().message();
      },
      Bounds(lo, hi));
}

}  // namespace headroom::cli
