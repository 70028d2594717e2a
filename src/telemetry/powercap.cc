#include "telemetry/powercap.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <system_error>

namespace headroom::telemetry {

namespace {

// The zone families, in order of preference; the first with a counted zone is used alone.
constexpr std::string_view kFamilies[] = {"intel-rapl", "intel-rapl-tpmi"};
// sysfs attributes are a number and a newline; anything longer is not one.
constexpr size_t kMaxAttributeBytes = 64;
// How much of malformed content an error shows.
constexpr size_t kMaxShownBytes = 32;
constexpr double kJoulesPerMicrojoule = 1e-6;

std::string ErrnoText(int err) { return std::generic_category().message(err); }

// The content as one printable line: control bytes escaped, long content cut.
std::string Shown(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size() && i < kMaxShownBytes; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c >= 0x7f || c == '\'' || c == '\\') {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.size() > kMaxShownBytes) out += "...";
  return out;
}

// A small sysfs attribute, whole. EISDIR, ENOENT, EACCES and short files come back as Errors.
Result<std::string> ReadAttribute(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    std::string hint;
    if (err == EACCES) hint = " (energy_uj is readable by root only on current kernels)";
    return Error::Io(fmt::format("powercap: cannot read {}: {}{}", path, ErrnoText(err), hint));
  }
  std::string text;
  char buf[kMaxAttributeBytes + 1];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      close(fd);
      return Error::Io(fmt::format("powercap: cannot read {}: {}", path, ErrnoText(err)));
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxAttributeBytes) break;
  }
  close(fd);
  return text;
}

std::string_view TrimTrailingSpace(std::string_view s) {
  while (!s.empty() &&
         (s.back() == '\n' || s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

Result<uint64_t> ReadMicrojoules(const std::string& path) {
  auto text = ReadAttribute(path);
  if (!text.ok()) return std::move(text).error();
  const std::string_view digits = TrimTrailingSpace(*text);
  uint64_t value = 0;
  const char* end = digits.data() + digits.size();
  const auto [ptr, ec] = std::from_chars(digits.data(), end, value);
  if (digits.empty() || ec != std::errc() || ptr != end) {
    const char* why = ec == std::errc::result_out_of_range ? "a whole number of microjoules "
                                                             "below 2^64"
                                                           : "a whole number of microjoules";
    return Error::Input(
        fmt::format("powercap: {}: expected {}, got '{}'", path, why, Shown(*text)));
  }
  return value;
}

// "N" for an entry FAMILY:N with N all digits (a top-level zone); none for subzones and others.
std::optional<uint64_t> TopLevelIndex(std::string_view entry, std::string_view family) {
  if (entry.size() <= family.size() + 1 || entry.substr(0, family.size()) != family ||
      entry[family.size()] != ':') {
    return std::nullopt;
  }
  const std::string_view digits = entry.substr(family.size() + 1);
  uint64_t index = 0;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  if (ec != std::errc() || ptr != digits.data() + digits.size()) return std::nullopt;
  return index;
}

bool IsPackage(std::string_view name) { return name.starts_with("package"); }
bool IsPsys(std::string_view name) { return name.starts_with("psys"); }

}  // namespace

Result<PowercapReader> PowercapReader::Open(const std::string& root) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::directory_iterator it(root, ec);
  if (ec) return Error::Io(fmt::format("powercap: cannot list {}: {}", root, ec.message()));
  std::vector<std::string> entries;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    entries.push_back(it->path().filename().string());
  }
  if (ec) return Error::Io(fmt::format("powercap: cannot list {}: {}", root, ec.message()));

  for (const std::string_view family : kFamilies) {
    // The family's top-level zones, in index order, with their names.
    std::vector<std::pair<uint64_t, Zone>> found;
    for (const std::string& entry : entries) {
      const auto index = TopLevelIndex(entry, family);
      if (!index) continue;
      Zone zone;
      zone.dir = (fs::path(root) / entry).string();
      if (!fs::is_directory(zone.dir, ec)) continue;  // a stray file, not a zone
      auto name = ReadAttribute(zone.dir + "/name");
      if (!name.ok()) return std::move(name).error();
      zone.name = std::string(TrimTrailingSpace(*name));
      found.emplace_back(*index, std::move(zone));
    }
    std::sort(found.begin(), found.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    const bool has_psys = std::any_of(found.begin(), found.end(),
                                      [](const auto& z) { return IsPsys(z.second.name); });
    std::vector<Zone> zones;
    for (auto& [index, zone] : found) {
      if (has_psys ? IsPsys(zone.name) : IsPackage(zone.name)) zones.push_back(std::move(zone));
    }
    if (zones.empty()) continue;

    for (Zone& zone : zones) {
      const std::string range_path = zone.dir + "/max_energy_range_uj";
      auto range = ReadMicrojoules(range_path);
      if (!range.ok()) return std::move(range).error();
      if (*range == 0) {
        return Error::Input(
            fmt::format("powercap: {}: expected a range above 0, got '0'", range_path));
      }
      zone.max_energy_range_uj = *range;
      const std::string energy_path = zone.dir + "/energy_uj";
      auto energy = ReadMicrojoules(energy_path);
      if (!energy.ok()) return std::move(energy).error();
      if (*energy > zone.max_energy_range_uj) {
        return Error::Input(fmt::format("powercap: {}: {} is above max_energy_range_uj {}",
                                        energy_path, *energy, zone.max_energy_range_uj));
      }
    }
    return PowercapReader(std::move(zones));
  }
  return Error::Io(fmt::format(
      "powercap: no RAPL zone to count under {} (looking for intel-rapl:N or intel-rapl-tpmi:N "
      "named package* or psys; is the intel_rapl_msr module loaded?)",
      root));
}

Result<std::optional<double>> PowercapReader::Sample(double t_s) {
  assert(std::isfinite(t_s));
  assert(!last_t_s_ || t_s >= *last_t_s_);
  std::vector<uint64_t> energy_uj;
  energy_uj.reserve(zones_.size());
  for (const Zone& zone : zones_) {
    const std::string path = zone.dir + "/energy_uj";
    auto energy = ReadMicrojoules(path);
    if (!energy.ok()) return std::move(energy).error();
    if (*energy > zone.max_energy_range_uj) {
      return Error::Input(fmt::format("powercap: {}: {} is above max_energy_range_uj {}", path,
                                      *energy, zone.max_energy_range_uj));
    }
    energy_uj.push_back(*energy);
  }
  if (!last_t_s_) {
    last_t_s_ = t_s;
    last_energy_uj_ = std::move(energy_uj);
    return std::optional<double>();
  }
  if (!(t_s > *last_t_s_)) return std::optional<double>();

  uint64_t delta_uj = 0;
  for (size_t i = 0; i < zones_.size(); ++i) {
    const uint64_t before = last_energy_uj_[i];
    const uint64_t now = energy_uj[i];
    // Both are within [0, range] (checked on reading), so neither difference can underflow.
    delta_uj += now >= before ? now - before : (zones_[i].max_energy_range_uj - before) + now;
  }
  const double power_w = static_cast<double>(delta_uj) * kJoulesPerMicrojoule / (t_s - *last_t_s_);
  last_t_s_ = t_s;
  last_energy_uj_ = std::move(energy_uj);
  return std::optional<double>(power_w);
}

std::string PowercapReader::Describe() const {
  std::string out;
  for (const Zone& zone : zones_) {
    if (!out.empty()) out += '+';
    out += zone.name;
  }
  return out;
}

NodeOverhead NodeOverhead::Constant(double watts) {
  assert(std::isfinite(watts) && watts >= 0.0);
  return NodeOverhead(watts, std::nullopt, "--node-overhead-w");
}

Result<NodeOverhead> NodeOverhead::Powercap(PowercapReader reader, double t_s) {
  auto first = reader.Sample(t_s);
  if (!first.ok()) return std::move(first).error();
  std::string from = "powercap:" + reader.Describe();
  return NodeOverhead(0.0, std::move(reader), std::move(from));
}

double NodeOverhead::CurrentW(double t_s) {
  if (!reader_) return watts_;
  auto sample = reader_->Sample(t_s);
  if (!sample.ok()) {
    if (failed_reads_ == 0) {
      warnings_.push_back(fmt::format("node overhead: {}; counting the last good value, {:.1f} W",
                                      sample.error().message(), watts_));
    }
    ++failed_reads_;
    return watts_;
  }
  if (failed_reads_ > 0) {
    warnings_.push_back(fmt::format("node overhead: powercap read again after {} failed read{}",
                                    failed_reads_, failed_reads_ == 1 ? "" : "s"));
    failed_reads_ = 0;
  }
  if (*sample) watts_ = **sample;
  return watts_;
}

}  // namespace headroom::telemetry
