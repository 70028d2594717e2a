#include "trace/reader.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <unordered_map>

#include "trace/number_parse.h"

namespace headroom::trace {

const double* HundredthsTable() {
  static const std::vector<double> table = [] {
    std::vector<double> values(kHundredthsTableSize);
    for (size_t k = 0; k < values.size(); ++k) values[k] = static_cast<double>(k) / 100.0;
    return values;
  }();
  return table.data();
}

// ---------------------------------------------------------------------------------------------
// Byte sources

Result<size_t> MemorySource::Read(char* buffer, size_t capacity) {
  const size_t n = std::min(capacity, data_.size() - offset_);
  std::memcpy(buffer, data_.data() + offset_, n);
  offset_ += n;
  return n;
}

Result<std::optional<std::string_view>> MemorySource::View(uint64_t offset, size_t want) {
  if (offset >= data_.size()) return std::optional<std::string_view>(std::string_view());
  return std::optional<std::string_view>(data_.substr(offset, want));
}

namespace {

// SIGBUS guard for mapped windows: a file that shrinks under its mapping makes reads of the
// lost pages raise SIGBUS. The handler maps zeros over the faulting page of this thread's
// window, so the parse ends normally, and records the fault; FileSource::View then reports the
// file as changed. A fault anywhere else goes to the disposition from before.
[[gnu::tls_model("initial-exec")]] thread_local const char* g_window_begin = nullptr;
[[gnu::tls_model("initial-exec")]] thread_local const char* g_window_end = nullptr;
[[gnu::tls_model("initial-exec")]] thread_local volatile sig_atomic_t g_window_faulted = 0;
struct sigaction g_previous_sigbus {};
size_t g_page_bytes = 4096;

void OnSigbus(int signal, siginfo_t* info, void* context) {
  char* const address = static_cast<char*>(info->si_addr);
  if (address >= g_window_begin && address < g_window_end) {
    const auto page = reinterpret_cast<uintptr_t>(address) & ~(uintptr_t{g_page_bytes} - 1);
    void* const zeros = ::mmap(reinterpret_cast<void*>(page), g_page_bytes, PROT_READ,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (zeros != MAP_FAILED) {
      g_window_faulted = 1;
      return;
    }
  }
  if (g_previous_sigbus.sa_flags & SA_SIGINFO) {
    if (g_previous_sigbus.sa_sigaction != nullptr) {
      g_previous_sigbus.sa_sigaction(signal, info, context);
      return;
    }
  } else if (g_previous_sigbus.sa_handler != SIG_DFL && g_previous_sigbus.sa_handler != SIG_IGN) {
    g_previous_sigbus.sa_handler(signal);
    return;
  }
  // Default action: returning re-runs the faulting access, which now kills the process.
  ::signal(SIGBUS, SIG_DFL);
}

void InstallSigbusGuard() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_page_bytes = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    struct sigaction action {};
    action.sa_sigaction = OnSigbus;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, &g_previous_sigbus);
  });
}

}  // namespace

void FileSource::Unmap() {
  if (map_ == nullptr) return;
  g_window_begin = g_window_end = nullptr;
  ::munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
}

Result<std::optional<std::string_view>> FileSource::View(uint64_t offset, size_t want) {
  Unmap();
  if (g_window_faulted) {
    g_window_faulted = 0;
    return Error::Io(fmt::format("{}: the file shrank while being read", path_));
  }
  if (!mappable_ || !size_bytes_ || *size_bytes_ == 0) return std::optional<std::string_view>();
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    return Error::Io(fmt::format("{}: cannot stat: {}", path_, std::strerror(errno)));
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < offset) return Error::Io(fmt::format("{}: the file shrank while being read", path_));
  if (offset == size) return std::optional<std::string_view>(std::string_view());
  InstallSigbusGuard();
  const uint64_t map_offset = offset / g_page_bytes * g_page_bytes;
  const size_t lead = static_cast<size_t>(offset - map_offset);
  const size_t bytes = static_cast<size_t>(std::min<uint64_t>(size - map_offset, lead + want));
  void* const map =
      ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd_, static_cast<off_t>(map_offset));
  if (map == MAP_FAILED) {
    if (offset == 0) {  // a file system without mmap: read() instead
      mappable_ = false;
      return std::optional<std::string_view>();
    }
    return Error::Io(fmt::format("{}: cannot map: {}", path_, std::strerror(errno)));
  }
  map_ = map;
  map_bytes_ = bytes;
  g_window_begin = static_cast<const char*>(map);
  g_window_end = g_window_begin + bytes;
  return std::optional<std::string_view>(std::string_view(g_window_begin + lead, bytes - lead));
}

Result<std::unique_ptr<FileSource>> FileSource::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error::Io(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  struct stat st {};
  std::optional<uint64_t> size;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) size = static_cast<uint64_t>(st.st_size);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  return std::unique_ptr<FileSource>(new FileSource(path, fd, size));
}

FileSource::~FileSource() {
  Unmap();
  ::close(fd_);
}

Result<size_t> FileSource::Read(char* buffer, size_t capacity) {
  while (true) {
    const ssize_t n = ::read(fd_, buffer, capacity);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno == EINTR) continue;
    return Error::Io(fmt::format("{}: cannot read: {}", path_, std::strerror(errno)));
  }
}

// ---------------------------------------------------------------------------------------------
// Field scanning. Inside ParseLines every line ends with '\n', so scanning stops there at the
// latest and never needs the chunk end.

namespace {

constexpr size_t kReadChunkBytes = size_t{256} << 10;
constexpr size_t kMaxQuotedFieldInMessage = 40;
constexpr uint32_t kMaxDirectGpuNumber = 1 << 16;
constexpr size_t kMaxPhases = SampleBatch::kNoPhase;
constexpr double kNanosPerSecond = 1e9;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The fast path takes powers of at most this many integer digits, all below kMaxPowerW: one
// compare per row for the power bound. Anything longer (10000 itself, 1e308 written out) takes
// the checked path, which compares the value.
constexpr size_t kMaxFastPowerIntegerDigits = 4;
static_assert(kMaxPowerW >= 9999.99999999999 && kMaxPowerW < 1e5,
              "kMaxFastPowerIntegerDigits assumes a bound of five integer digits");

inline bool IsFieldEnd(char c) { return c == ',' || c == '\n' || c == '\r'; }

inline const char* SkipBlanks(const char* p) {
  while (*p == ' ' || *p == '\t') ++p;
  return p;
}

// The end of the field starting at p: the next ',' or end of line outside quotes.
inline const char* FieldEnd(const char* p) {
  bool quoted = false;
  while (true) {
    const char c = *p;
    if (c == '\n') return p;
    if (c == '"') quoted = !quoted;
    if (!quoted && (c == ',' || c == '\r')) return p;
    ++p;
  }
}

// A field's text for a message: at most kMaxQuotedFieldInMessage bytes, control bytes as \xNN.
std::string FieldText(const char* p) {
  const char* const end = FieldEnd(p);
  std::string text;
  for (const char* q = p; q < end && q - p < static_cast<ptrdiff_t>(kMaxQuotedFieldInMessage);
       ++q) {
    const auto c = static_cast<unsigned char>(*q);
    if (c < 0x20 || c == 0x7f) {
      fmt::format_to(std::back_inserter(text), "\\x{:02x}", c);
    } else {
      text += *q;
    }
  }
  if (end - p > static_cast<ptrdiff_t>(kMaxQuotedFieldInMessage)) text += "...";
  return text;
}

// The first byte of [begin, end) that no field may hold: a control byte other than tab (a
// blank), or DEL; nullptr when there is none. Line endings end fields before they get here.
inline const char* FindControlByte(const char* begin, const char* end) {
  for (const char* p = begin; p < end; ++p) {
    const auto c = static_cast<unsigned char>(*p);
    if ((c < 0x20 && c != '\t') || c == 0x7f) [[unlikely]] {
      return p;
    }
  }
  return nullptr;
}

std::string ControlByteReason(const char* byte) {
  return fmt::format("control byte 0x{:02x} in the value", static_cast<unsigned char>(*byte));
}

// A field's text without surrounding blanks and quotes ("" inside quotes is one quote).
std::string UnquotedField(const char* begin, const char* end) {
  while (begin < end && (*begin == ' ' || *begin == '\t')) ++begin;
  while (end > begin && (end[-1] == ' ' || end[-1] == '\t')) --end;
  if (end - begin >= 2 && *begin == '"' && end[-1] == '"') {
    std::string out;
    for (const char* p = begin + 1; p < end - 1; ++p) {
      out += *p;
      if (*p == '"' && p + 1 < end - 1 && p[1] == '"') ++p;
    }
    return out;
  }
  return std::string(begin, end);
}

std::vector<std::string> SplitHeader(std::string_view line) {
  std::string text(line);
  text += '\n';
  std::vector<std::string> names;
  const char* p = text.c_str();
  while (true) {
    const char* end = FieldEnd(p);
    names.push_back(UnquotedField(p, end));
    if (*end != ',') break;
    p = end + 1;
  }
  return names;
}

enum class FieldValue { kNumber, kEmpty, kBad, kNotFinite };

// Parses a numeric field the slow way; `unit_suffix` allows nvidia-smi's " W", " %", " MHz".

[[gnu::noinline]] FieldValue NumberFieldSlow(const char*& p, const char* end, double& out,
                                             bool unit_suffix) {
  const char* q = SkipBlanks(p);
  if (IsFieldEnd(*q)) {
    p = q;
    return FieldValue::kEmpty;
  }
  if (*q == '"') {  // quoted number
    const char* field_end = FieldEnd(q);
    const std::string inner = UnquotedField(q, field_end);
    if (inner.empty()) {
      p = field_end;
      return FieldValue::kEmpty;
    }
    const char* r = ParseDouble(inner.data(), inner.data() + inner.size(), out);
    if (r != inner.data() + inner.size()) return FieldValue::kBad;
    p = field_end;
    return std::isfinite(out) ? FieldValue::kNumber : FieldValue::kNotFinite;
  }
  const char* r = ParseDouble(q, end, out);
  if (r == nullptr) return FieldValue::kBad;
  r = SkipBlanks(r);
  if (unit_suffix) {
    while ((*r >= 'A' && *r <= 'Z') || (*r >= 'a' && *r <= 'z') || *r == '%' || *r == '/') ++r;
    r = SkipBlanks(r);
  }
  if (!IsFieldEnd(*r)) return FieldValue::kBad;
  p = r;
  return std::isfinite(out) ? FieldValue::kNumber : FieldValue::kNotFinite;
}

// Parses a whole numeric field: the plain decimal that fills it, or the slow path for blanks,
// quotes, exponents, units ("69.85 W") and errors.
[[gnu::always_inline]] inline FieldValue NumberField(const char*& p, const char* end, double& out,
                                                     bool unit_suffix) {
  const char* r = ParsePlainDecimal(p, out);
  if (r != nullptr && IsFieldEnd(*r)) [[likely]] {
    p = r;
    return FieldValue::kNumber;
  }
  return NumberFieldSlow(p, end, out, unit_suffix);
}

// A GPU id as written: small non-negative integers take a direct path.
struct GpuToken {
  bool numeric = false;
  uint32_t number = 0;
  std::string name;
  bool empty() const { return !numeric && name.empty(); }
};

// The text of one field remembered with its value: the GPUs of one poll share a timestamp, so
// in a long trace most rows repeat the previous row's t_s to the byte, and comparing up to 16
// bytes is cheaper than parsing them. Exact: equal text, equal value.
class RepeatedField {
 public:
  // If the field at p (followed by its delimiter) is the remembered one, advances p to the
  // delimiter and returns true. REQUIRES: p < end.
  [[gnu::always_inline]] bool Match(const char*& p, const char* end, double& value) const {
    if (length_ == 0 || end - p < 16) return false;
    uint64_t lo, hi;
    std::memcpy(&lo, p, 8);
    std::memcpy(&hi, p + 8, 8);
    if (((lo ^ text_lo_) & mask_lo_) != 0 || ((hi ^ text_hi_) & mask_hi_) != 0) return false;
    p += length_ - 1;  // at the delimiter
    value = value_;
    return true;
  }

  // Remembers the field [begin, delimiter] and its value; fields of 16 bytes or more are not.
  void Remember(const char* begin, const char* delimiter, double value) {
    const size_t length = static_cast<size_t>(delimiter - begin) + 1;
    if (length > 16) {
      length_ = 0;
      return;
    }
    char text[16] = {};
    std::memcpy(text, begin, length);
    std::memcpy(&text_lo_, text, 8);
    std::memcpy(&text_hi_, text + 8, 8);
    mask_lo_ = length >= 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * length)) - 1;
    mask_hi_ = length <= 8    ? 0
               : length == 16 ? ~uint64_t{0}
                              : (uint64_t{1} << (8 * (length - 8))) - 1;
    length_ = length;
    value_ = value;
  }

 private:
  uint64_t text_lo_ = 0, text_hi_ = 0, mask_lo_ = 0, mask_hi_ = 0;
  size_t length_ = 0;  // bytes including the delimiter; 0 = nothing remembered
  double value_ = 0.0;
};

// ---------------------------------------------------------------------------------------------
// Row parsers: one per format. ParseLines parses whole lines and stops at the first bad one,
// leaving the message in error(). A line is validated completely before anything of it is
// committed (GPU ids interned, times recorded, samples batched), so a rejected line leaves the
// parser as it was.

class RowParser {
 public:
  RowParser(std::string_view name, const ReadOptions& options, SampleSink& sink,
            ReadSummary& summary)
      : name_(name), options_(options), sink_(sink), summary_(summary) {}
  virtual ~RowParser() = default;

  // REQUIRES: [begin, end) is whole lines; end[-1] == '\n'.
  virtual bool ParseLines(const char* begin, const char* end) = 0;

  // Sizes the batch for the schema. REQUIRES: called once the header is configured.
  void StartBatches() {
    batch_.Reserve(std::max<size_t>(1, options_.batch_rows), summary_.schema);
    any_field_ = summary_.schema.has_field.any();
  }

  void Flush() {
    if (batch_.size() > 0) {
      summary_.samples += batch_.size();
      sink_.OnBatch(batch_, summary_.schema);
      batch_.Clear();
    }
  }
  int64_t line_no() const { return line_no_; }
  void set_line_no(int64_t line_no) { line_no_ = line_no; }
  const std::string& error() const { return error_; }
  void set_column_names(std::vector<std::string> names) { column_names_ = std::move(names); }

 protected:
  // A line longer than the limit is reported as that, whatever else is wrong in it, so that the
  // error does not depend on how much of the file was in memory when the line was seen.
  [[gnu::noinline, gnu::cold]] bool Fail(size_t column_index, std::string_view reason) {
    if (LineTooLong()) return FailLine("");
    const std::string_view field =
        column_index < column_names_.size() ? std::string_view(column_names_[column_index]) : "";
    error_ = LocatedMessage(name_, line_no_, static_cast<int>(column_index + 1), field, reason);
    return false;
  }
  [[gnu::noinline, gnu::cold]] bool FailLine(std::string_view reason) {
    if (LineTooLong()) {
      error_ = LocatedMessage(name_, line_no_, 0, "",
                              fmt::format("line longer than {} bytes", options_.max_line_bytes));
      return false;
    }
    error_ = LocatedMessage(name_, line_no_, 0, "", reason);
    return false;
  }
  // Whether the line being parsed, with its newline, is longer than max_line_bytes.
  bool LineTooLong() const {
    if (line_begin_ == nullptr || chunk_end_ == nullptr) return false;
    const auto* nl = static_cast<const char*>(
        std::memchr(line_begin_, '\n', static_cast<size_t>(chunk_end_ - line_begin_)));
    const size_t bytes = static_cast<size_t>((nl != nullptr ? nl + 1 : chunk_end_) - line_begin_);
    return bytes > options_.max_line_bytes;
  }

  // Parses a numeric field. Empty leaves `out` NaN; `required` makes it an error.
  [[gnu::always_inline]] bool Number(const char*& p, size_t column, double& out, bool required,
                                     bool unit_suffix = false) {
    const char* field_begin = p;
    const FieldValue v = NumberField(p, chunk_end_, out, unit_suffix);
    if (v == FieldValue::kNumber) [[likely]] {
      return true;
    }
    if (v == FieldValue::kEmpty) {
      out = kNaN;
      if (!required) return true;
    }
    return NumberError(column, v, field_begin);
  }

  [[gnu::noinline, gnu::cold]] bool NumberError(size_t column, FieldValue v,
                                                const char* field_begin) {
    if (const char* c = FindControlByte(field_begin, FieldEnd(field_begin))) {
      return Fail(column, ControlByteReason(c));
    }
    switch (v) {
      case FieldValue::kEmpty:
        return Fail(column, "missing value");
      case FieldValue::kNotFinite:
        return Fail(column, fmt::format("not a finite number '{}'", FieldText(field_begin)));
      default:
        return Fail(column, fmt::format("unparsable number '{}'", FieldText(field_begin)));
    }
  }

  // Separator before field `column` (> 0).
  [[gnu::always_inline]] bool Separator(const char*& p, size_t column) {
    if (*p == ',') [[likely]] {
      ++p;
      return true;
    }
    return FailLine(
        fmt::format("row has {} fields, the header has {}", column, column_names_.size()));
  }

  [[gnu::always_inline]] bool EndOfLine(const char*& p, const char* line_begin) {
    if (*p == '\r') ++p;
    if (*p != '\n') return ExtraFields(p);
    ++p;
    if (static_cast<size_t>(p - line_begin) > options_.max_line_bytes) {
      return FailLine(fmt::format("line longer than {} bytes", options_.max_line_bytes));
    }
    return true;
  }

  [[gnu::noinline, gnu::cold]] bool ExtraFields(const char* p) {
    const char* nl = p;
    while (*nl != '\n') ++nl;
    if (const char* c = FindControlByte(p, nl)) {
      return FailLine(fmt::format("control byte 0x{:02x} after the last field",
                                  static_cast<unsigned char>(*c)));
    }
    return FailLine(fmt::format("row has more fields than the header's {}", column_names_.size()));
  }

  // A text field (an ignored column, a phase, a timestamp): [p, end) must hold no control byte.
  [[gnu::always_inline]] bool TextField(const char* p, const char* end, size_t column) {
    if (const char* c = FindControlByte(p, end)) [[unlikely]] {
      return Fail(column, ControlByteReason(c));
    }
    return true;
  }

  // Per-GPU power: finite (checked by Number), in [0, kMaxPowerW]. NaN (no sample) passes.
  [[gnu::always_inline]] bool PowerInBounds(double power_w, size_t column) {
    if (power_w < 0.0 || power_w > kMaxPowerW) [[unlikely]] {
      return PowerError(power_w, column);
    }
    return true;
  }
  [[gnu::noinline, gnu::cold]] bool PowerError(double power_w, size_t column) {
    if (power_w < 0.0) return Fail(column, fmt::format("negative power {} W", power_w));
    return Fail(column, fmt::format("power {} W is above {} W, the bound on one GPU's power",
                                    power_w, kMaxPowerW));
  }

  // Runs parse_row(p, line_begin) on every non-blank line of [p, end); parse_row advances p past
  // the line's newline or returns false (error() set).
  template <class ParseRow>
  [[gnu::always_inline]] bool ForEachLine(const char* p, const char* end, ParseRow&& parse_row) {
    chunk_end_ = end;
    while (p < end) {
      ++line_no_;
      const char* const line_begin = p;
      line_begin_ = line_begin;
      if (BlankLine(p)) continue;
      if (!parse_row(p, line_begin)) return false;
    }
    line_begin_ = nullptr;  // the chunk may be unmapped next
    return true;
  }

  static bool BlankLine(const char*& p) {
    if (*p == '\n') {
      ++p;
      return true;
    }
    if (*p == '\r' && p[1] == '\n') {
      p += 2;
      return true;
    }
    return false;
  }

  // Reads a GPU id field.
  [[gnu::always_inline]] bool GpuField(const char*& p, size_t column, GpuToken& token) {
    if (IsDigit(*p)) [[likely]] {  // fast path: a small number filling the field
      uint32_t number = static_cast<uint32_t>(*p - '0');
      const char* q = p + 1;
      while (IsDigit(*q) && q - p < 9) number = number * 10 + static_cast<uint32_t>(*q++ - '0');
      if (IsFieldEnd(*q)) {
        token.numeric = true;
        token.number = number;
        p = q;
        return true;
      }
    }
    return GpuFieldSlow(p, column, token);
  }

  [[gnu::noinline]] bool GpuFieldSlow(const char*& p, size_t column, GpuToken& token) {
    const char* q = SkipBlanks(p);
    uint32_t number = 0;
    const char* digits = q;
    while (static_cast<unsigned>(*q - '0') < 10u && q - digits < 9) {
      number = number * 10 + static_cast<uint32_t>(*q - '0');
      ++q;
    }
    const char* after = SkipBlanks(q);
    if (q > digits && IsFieldEnd(*after)) {
      token.numeric = true;
      token.number = number;
      p = after;
      return true;
    }
    const char* end = FieldEnd(p);
    if (!TextField(p, end, column)) return false;
    token.numeric = false;
    token.name = UnquotedField(p, end);
    p = end;
    if (token.name.empty()) return Fail(column, "missing value");
    return true;
  }

  // The dense index of a GPU, or -1 if not seen yet.
  [[gnu::always_inline]] int64_t FindGpu(const GpuToken& token) const {
    if (token.numeric && token.number < kMaxDirectGpuNumber) [[likely]] {
      return token.number < direct_gpu_.size() ? direct_gpu_[token.number] : -1;
    }
    return FindNamedGpu(token);
  }
  [[gnu::noinline]] int64_t FindNamedGpu(const GpuToken& token) const {
    const auto it = named_gpu_.find(token.numeric ? std::to_string(token.number) : token.name);
    return it == named_gpu_.end() ? int64_t{-1} : static_cast<int64_t>(it->second);
  }

  [[gnu::always_inline]] uint32_t InternGpu(const GpuToken& token, int64_t found) {
    if (found >= 0) [[likely]] {
      return static_cast<uint32_t>(found);
    }
    return AddGpu(token);
  }
  uint32_t InternGpu(const GpuToken& token) { return InternGpu(token, FindGpu(token)); }

  [[gnu::noinline]] uint32_t AddGpu(const GpuToken& token) {
    auto& ids = summary_.schema.gpu_ids;
    const auto index = static_cast<uint32_t>(ids.size());
    ids.push_back(token.numeric ? std::to_string(token.number) : token.name);
    last_t_.push_back(-std::numeric_limits<double>::infinity());
    if (token.numeric && token.number < kMaxDirectGpuNumber) {
      if (direct_gpu_.size() <= token.number) direct_gpu_.resize(token.number + 1, -1);
      direct_gpu_[token.number] = index;
    } else {
      named_gpu_.emplace(ids.back(), index);
    }
    return index;
  }

  // Time must not go backwards for a GPU. `gpu` < 0: not seen yet.
  [[gnu::always_inline]] bool CheckTime(int64_t gpu, double t_s, size_t column) {
    if (gpu >= 0 && t_s < last_t_[static_cast<size_t>(gpu)]) [[unlikely]] {
      return Fail(column, fmt::format("time goes backwards for gpu {}: {} s after {} s",
                                      summary_.schema.gpu_ids[static_cast<size_t>(gpu)], t_s,
                                      last_t_[static_cast<size_t>(gpu)]));
    }
    return true;
  }

  static bool NonNegative(double v) { return !(v < 0.0); }  // NaN (absent) passes

  // Appends one validated sample. `fields` holds kFieldCount values (NaN = absent).
  [[gnu::always_inline]] void Emit(uint32_t gpu, double t_s, double power_w, const double* fields,
                                   uint16_t phase) {
    last_t_[gpu] = t_s;
    const size_t i = batch_.count;
    batch_.gpu[i] = gpu;
    batch_.t_s[i] = t_s;
    batch_.power_w[i] = power_w;
    if (any_field_) {
      const auto& has = summary_.schema.has_field;
      for (size_t f = 0; f < kFieldCount; ++f) {
        if (has.test(f)) batch_.fields[f][i] = fields[f];
      }
    }
    if (summary_.schema.has_phase) batch_.phase[i] = phase;
    if (++batch_.count == batch_.capacity()) Flush();
  }

  std::string_view name_;
  const ReadOptions& options_;
  SampleSink& sink_;
  ReadSummary& summary_;
  std::vector<std::string> column_names_;
  // The fast path's powers before conversion: integer mantissa and fraction digits per sample.
  std::vector<uint64_t> mantissa_;
  std::vector<uint8_t> fraction_digits_;
  const char* chunk_end_ = nullptr;   // end of the lines being parsed
  const char* line_begin_ = nullptr;  // the line being parsed (for errors)
  int64_t line_no_ = 1;               // the header is line 1
  std::string error_;
  SampleBatch batch_;
  bool any_field_ = false;
  std::vector<double> last_t_;  // per dense GPU index

 protected:
  std::vector<int64_t> direct_gpu_;  // GPU number -> dense index (-1: not seen)

 private:
  std::unordered_map<std::string, uint32_t> named_gpu_;
};

// ---------------------------------------------------------------------------------------------
// headroom's long format: t_s,gpu,power_w plus optional columns, in any order.

class LongParser final : public RowParser {
 public:
  // Numeric columns parse into a slot: t_s, power_w, then the optional fields.
  static constexpr uint8_t kTimeSlot = 0;
  static constexpr uint8_t kPowerSlot = 1;
  static constexpr uint8_t kFirstFieldSlot = 2;
  static constexpr size_t kSlots = kFirstFieldSlot + kFieldCount;

  enum class Kind : uint8_t { kNumber, kGpu, kPhase, kIgnore };
  struct Column {
    Kind kind = Kind::kIgnore;
    uint8_t slot = 0;
    bool required = false;
  };

  using RowParser::RowParser;

  // Returns an error message if a required column is missing.
  std::optional<std::string> Configure(const std::vector<std::string>& names) {
    set_column_names(names);
    bool has_t = false, has_gpu = false, has_power = false;
    for (size_t col = 0; col < names.size(); ++col) {
      const std::string& name = names[col];
      Column c;
      if (name == "t_s") {
        c = {Kind::kNumber, kTimeSlot, true};
        has_t = true;
        slot_column_[kTimeSlot] = col;
      } else if (name == "gpu") {
        c.kind = Kind::kGpu;
        has_gpu = true;
      } else if (name == "power_w") {
        c = {Kind::kNumber, kPowerSlot, true};
        has_power = true;
        slot_column_[kPowerSlot] = col;
      } else if (name == kPhaseColumn) {
        c.kind = Kind::kPhase;
        summary_.schema.has_phase = true;
        phase_column_ = col;
      } else {
        for (size_t i = 0; i < kFieldCount; ++i) {
          if (name == kFieldNames[i]) {
            const auto slot = static_cast<uint8_t>(kFirstFieldSlot + i);
            c = {Kind::kNumber, slot, false};
            summary_.schema.has_field.set(i);
            slot_column_[slot] = col;
          }
        }
      }
      columns_.push_back(c);
    }
    if (!has_t) return "missing column 't_s' (long format: t_s, gpu, power_w)";
    if (!has_gpu) return "missing column 'gpu' (long format: t_s, gpu, power_w)";
    if (!has_power) return "missing column 'power_w' (long format: t_s, gpu, power_w)";
    minimal_layout_ =
        names.size() == 3 && names[0] == "t_s" && names[1] == "gpu" && names[2] == "power_w";
    return std::nullopt;
  }

  bool ParseLines(const char* p, const char* end) override {
    return minimal_layout_ ? ParseMinimalLines(p, end) : ParseAnyLines(p, end);
  }

 private:
  // The layout with just the required columns, "t_s,gpu,power_w": the same checks as
  // ParseAnyLines, unrolled (measured 13 % faster than the column loop on long traces). A line
  // of plain decimals and a known GPU takes a fast path that keeps the parser's state in locals;
  // anything else (blank lines, quotes, units, new GPUs, errors) takes the checked path.
  bool ParseMinimalLines(const char* p, const char* end) {
    chunk_end_ = end;
    const double no_fields[kFieldCount] = {kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN};
    GpuToken gpu;
    RepeatedField time;
    const auto checked_line = [&](const char*& q, const char* line_begin) {
      double t_s, power_w;
      if (!time.Match(q, end, t_s)) {
        const char* field = q;
        if (!Number(q, 0, t_s, /*required=*/true)) return false;
        time.Remember(field, q, t_s);
      }
      if (!Separator(q, 1) || !GpuField(q, 1, gpu) || !Separator(q, 2) ||
          !Number(q, 2, power_w, /*required=*/true) || !EndOfLine(q, line_begin)) {
        return false;
      }
      if (!PowerInBounds(power_w, 2)) return false;
      const int64_t known = FindGpu(gpu);
      if (!CheckTime(known, t_s, 0)) return false;
      Emit(InternGpu(gpu, known), t_s, power_w, no_fields, SampleBatch::kNoPhase);
      ++summary_.rows;
      return true;
    };
    const size_t max_line_bytes = options_.max_line_bytes;
    const double* const hundredths = HundredthsTable();
    mantissa_.resize(batch_.capacity());
    fraction_digits_.resize(batch_.capacity());
    while (p < end) {
      // The fast path's state, reloaded after every checked line (which may add a GPU or
      // flush the batch).
      const int64_t* const direct = direct_gpu_.data();
      const size_t direct_size = direct_gpu_.size();
      double* const last_t = last_t_.data();
      uint32_t* const batch_gpu = batch_.gpu.data();
      double* const batch_t = batch_.t_s.data();
      double* const batch_power = batch_.power_w.data();
      uint64_t* const mantissas = mantissa_.data();
      uint8_t* const fraction_digit_counts = fraction_digits_.data();
      const size_t capacity = batch_.capacity();
      size_t count = batch_.count;
      int64_t line_no = line_no_;
      uint64_t rows = 0;
      while (p < end) {
        const char* q = p;
        double t_s;
        if (!time.Match(q, end, t_s)) {
          const char* after = ParsePlainDecimal(q, t_s);
          if (after == nullptr || *after != ',') break;
          time.Remember(q, after, t_s);
          q = after;
        }
        ++q;  // ','
        uint32_t number = static_cast<uint32_t>(*q - '0');
        if (number > 9) break;
        ++q;
        while (IsDigit(*q) && number < kMaxDirectGpuNumber) {
          number = number * 10 + static_cast<uint32_t>(*q - '0');
          ++q;
        }
        if (*q != ',' || number >= direct_size) break;
        const int64_t dense = direct[number];
        // The power as digits[.digits]: only its integer mantissa and the number of fraction
        // digits here; the division to a double is done for the whole run below, off the
        // line-to-line path (the same value as ParsePlainDecimal gives).
        ++q;
        uint64_t mantissa = 0;
        const char* const integer = q;
        while (IsDigit(*q)) mantissa = mantissa * 10 + static_cast<unsigned>(*q++ - '0');
        const size_t integer_digits = static_cast<size_t>(q - integer);
        size_t total_digits = integer_digits;
        size_t fraction_digits = 0;
        if (*q == '.') {
          const char* const fraction = ++q;
          while (IsDigit(*q)) mantissa = mantissa * 10 + static_cast<unsigned>(*q++ - '0');
          fraction_digits = static_cast<size_t>(q - fraction);
          total_digits += fraction_digits;
        }
        q += *q == '\r';
        // At most 4 integer digits: below kMaxPowerW (10000 itself takes the checked path).
        if (*q != '\n' || total_digits == 0 || total_digits > kMaxPlainDigits ||
            integer_digits > kMaxFastPowerIntegerDigits || dense < 0 || t_s < last_t[dense]) {
          break;
        }
        ++q;
        if (static_cast<size_t>(q - p) > max_line_bytes) break;
        last_t[dense] = t_s;
        batch_gpu[count] = static_cast<uint32_t>(dense);
        batch_t[count] = t_s;
        mantissas[count] = mantissa;
        fraction_digit_counts[count] = static_cast<uint8_t>(fraction_digits);
        ++line_no;
        ++rows;
        p = q;
        if (++count == capacity) break;
      }
      for (size_t i = count - rows; i < count; ++i) {
        batch_power[i] = PlainDecimalValue(mantissas[i], fraction_digit_counts[i], hundredths);
      }
      batch_.count = count;
      line_no_ = line_no;
      summary_.rows += rows;
      if (count == capacity) {
        Flush();
        continue;
      }
      if (p == end) break;
      // The line at p did not take the fast path: the checked path parses it (or says why not).
      ++line_no_;
      const char* const line_begin = p;
      line_begin_ = line_begin;
      if (BlankLine(p)) continue;
      if (!checked_line(p, line_begin)) return false;
    }
    line_begin_ = nullptr;  // the chunk may be unmapped next
    return true;
  }

  bool ParseAnyLines(const char* begin, const char* end) {
    double values[kSlots];
    std::fill(std::begin(values), std::end(values), kNaN);
    double* const fields = values + kFirstFieldSlot;
    const auto& has_field = summary_.schema.has_field;
    GpuToken gpu;
    std::string phase;
    RepeatedField time;
    return ForEachLine(begin, end, [&](const char*& p, const char* line_begin) {
      bool has_phase_value = false;
      for (size_t col = 0; col < columns_.size(); ++col) {
        if (col > 0 && !Separator(p, col)) return false;
        const Column c = columns_[col];
        if (c.kind == Kind::kNumber) [[likely]] {
          if (c.slot == kTimeSlot) {
            if (time.Match(p, end, values[kTimeSlot])) continue;
            const char* field = p;
            if (!Number(p, col, values[kTimeSlot], /*required=*/true)) return false;
            time.Remember(field, p, values[kTimeSlot]);
            continue;
          }
          if (!Number(p, col, values[c.slot], c.required)) return false;
        } else if (c.kind == Kind::kGpu) {
          if (!GpuField(p, col, gpu)) return false;
        } else if (c.kind == Kind::kPhase) {
          const char* field_end = FieldEnd(p);
          if (!TextField(p, field_end, col)) return false;
          phase = UnquotedField(p, field_end);
          has_phase_value = !phase.empty();
          p = field_end;
        } else {
          const char* field_end = FieldEnd(p);
          if (!TextField(p, field_end, col)) return false;
          p = field_end;
        }
      }
      if (!EndOfLine(p, line_begin)) return false;
      const double t_s = values[kTimeSlot];
      const double power_w = values[kPowerSlot];
      if (!PowerInBounds(power_w, slot_column_[kPowerSlot])) return false;
      if (any_field_) {
        for (size_t i = 0; i < kFieldCount; ++i) {
          if (has_field.test(i) && fields[i] < 0.0) [[unlikely]] {
            return Fail(slot_column_[kFirstFieldSlot + i],
                        fmt::format("negative value {}", fields[i]));
          }
        }
      }
      const int64_t known = FindGpu(gpu);
      if (!CheckTime(known, t_s, slot_column_[kTimeSlot])) return false;
      uint16_t phase_index = SampleBatch::kNoPhase;
      if (has_phase_value) {
        const auto found = InternPhase(phase);
        if (!found) return Fail(phase_column_, "more than 65534 distinct phases");
        phase_index = *found;
      }
      Emit(InternGpu(gpu, known), t_s, power_w, fields, phase_index);
      ++summary_.rows;
      return true;
    });
  }

  std::optional<uint16_t> InternPhase(const std::string& name) {
    auto& names = summary_.schema.phase_names;
    if (last_phase_ < names.size() && names[last_phase_] == name) {
      return static_cast<uint16_t>(last_phase_);
    }
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == name) {
        last_phase_ = i;
        return static_cast<uint16_t>(i);
      }
    }
    if (names.size() >= kMaxPhases) return std::nullopt;
    names.push_back(name);
    last_phase_ = names.size() - 1;
    return static_cast<uint16_t>(last_phase_);
  }

  std::vector<Column> columns_;
  bool minimal_layout_ = false;
  size_t slot_column_[kSlots] = {};
  size_t phase_column_ = 0;
  size_t last_phase_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Wide format: t_s plus p<i>_w per GPU (util<i>_pct read when present; other columns ignored).

std::optional<uint32_t> MatchNumbered(std::string_view name, std::string_view prefix,
                                      std::string_view suffix) {
  if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) ||
      !name.ends_with(suffix)) {
    return std::nullopt;
  }
  const std::string_view digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  uint32_t value = 0;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || ptr != digits.data() + digits.size()) return std::nullopt;
  return value;
}

class WideParser final : public RowParser {
 public:
  enum class Role : uint8_t { kIgnore, kTime, kPower, kUtil };
  struct Column {
    Role role = Role::kIgnore;
    uint32_t gpu = 0;  // dense index
  };

  using RowParser::RowParser;

  std::optional<std::string> Configure(const std::vector<std::string>& names) {
    set_column_names(names);
    bool has_t = false;
    std::vector<uint32_t> gpu_numbers;
    for (const auto& name : names) {
      if (name == "t_s") has_t = true;
      if (auto n = MatchNumbered(name, "p", "_w")) gpu_numbers.push_back(*n);
    }
    if (!has_t) return "missing column 't_s' (wide format: t_s, p0_w, p1_w, ...)";
    if (gpu_numbers.empty()) return "no power columns p<i>_w (wide format: t_s, p0_w, p1_w, ...)";
    for (const auto& name : names) {
      Column c;
      if (name == "t_s") {
        c.role = Role::kTime;
      } else if (auto n = MatchNumbered(name, "p", "_w")) {
        c.role = Role::kPower;
        c.gpu = InternGpu(GpuToken{true, *n, {}});
      } else if (auto u = MatchNumbered(name, "util", "_pct")) {
        const auto it = std::find(gpu_numbers.begin(), gpu_numbers.end(), *u);
        if (it != gpu_numbers.end()) {
          c.role = Role::kUtil;
          c.gpu = InternGpu(GpuToken{true, *u, {}});
          summary_.schema.has_field.set(FieldIndex(Field::kUtilPct));
        }
      }
      columns_.push_back(c);
    }
    const size_t gpus = summary_.schema.gpu_ids.size();
    if (gpus != gpu_numbers.size()) return "duplicate power column p<i>_w";
    power_.resize(gpus);
    util_.resize(gpus);
    return std::nullopt;
  }

  bool ParseLines(const char* begin, const char* end) override {
    double fields[kFieldCount];
    std::fill(std::begin(fields), std::end(fields), kNaN);
    return ForEachLine(begin, end, [&](const char*& p, const char* line_begin) {
      std::fill(power_.begin(), power_.end(), kNaN);
      std::fill(util_.begin(), util_.end(), kNaN);
      double t_s = kNaN;
      size_t t_column = 0;
      for (size_t col = 0; col < columns_.size(); ++col) {
        if (col > 0 && !Separator(p, col)) return false;
        const Column c = columns_[col];
        switch (c.role) {
          case Role::kTime:
            t_column = col;
            if (!Number(p, col, t_s, /*required=*/true)) return false;
            break;
          case Role::kPower: {
            double& v = power_[c.gpu];
            if (!Number(p, col, v, /*required=*/false)) return false;
            if (!PowerInBounds(v, col)) return false;
            break;
          }
          case Role::kUtil: {
            double& v = util_[c.gpu];
            if (!Number(p, col, v, /*required=*/false)) return false;
            if (!NonNegative(v)) return Fail(col, fmt::format("negative value {}", v));
            break;
          }
          case Role::kIgnore: {
            const char* field_end = FieldEnd(p);
            if (!TextField(p, field_end, col)) return false;
            p = field_end;
            break;
          }
        }
      }
      if (!EndOfLine(p, line_begin)) return false;
      for (uint32_t g = 0; g < power_.size(); ++g) {
        if (!std::isnan(power_[g]) && !CheckTime(g, t_s, t_column)) return false;
      }
      for (uint32_t g = 0; g < power_.size(); ++g) {
        if (std::isnan(power_[g])) continue;
        fields[FieldIndex(Field::kUtilPct)] = util_[g];
        Emit(g, t_s, power_[g], fields, SampleBatch::kNoPhase);
      }
      ++summary_.rows;
      return true;
    });
  }

 private:
  std::vector<Column> columns_;
  std::vector<double> power_, util_;
};

// ---------------------------------------------------------------------------------------------
// Raw nvidia-smi CSV: "timestamp, index, power.draw [W], ..." with units in the values.

// "YYYY/MM/DD HH:MM:SS[.fraction]" (or with '-') -> nanoseconds since 1970-01-01 (no zone).
std::optional<int64_t> ParseTimestampNs(std::string_view s) {
  size_t i = 0;
  const auto number = [&](size_t digits, int& out) {
    if (i + digits > s.size()) return false;
    out = 0;
    for (size_t k = 0; k < digits; ++k) {
      const char c = s[i + k];
      if (c < '0' || c > '9') return false;
      out = out * 10 + (c - '0');
    }
    i += digits;
    return true;
  };
  const auto expect = [&](std::string_view options) {
    if (i < s.size() && options.find(s[i]) != std::string_view::npos) {
      ++i;
      return true;
    }
    return false;
  };
  int year, month, day, hour, minute, second;
  if (!number(4, year) || !expect("/-") || !number(2, month) || !expect("/-") || !number(2, day) ||
      !expect(" T") || !number(2, hour) || !expect(":") || !number(2, minute) || !expect(":") ||
      !number(2, second)) {
    return std::nullopt;
  }
  int64_t fraction_ns = 0;
  if (i < s.size() && s[i] == '.') {
    ++i;
    int64_t scale = 100'000'000;
    const size_t begin = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      fraction_ns += (s[i] - '0') * scale;
      scale /= 10;
      ++i;
    }
    if (i == begin) return std::nullopt;
  }
  if (i != s.size()) return std::nullopt;
  const std::chrono::year_month_day date{std::chrono::year{year},
                                         std::chrono::month{static_cast<unsigned>(month)},
                                         std::chrono::day{static_cast<unsigned>(day)}};
  if (!date.ok() || hour > 23 || minute > 59 || second > 60) return std::nullopt;
  const int64_t days = std::chrono::sys_days(date).time_since_epoch().count();
  const int64_t seconds = ((days * 24 + hour) * 60 + minute) * 60 + second;
  return seconds * 1'000'000'000 + fraction_ns;
}

class NvidiaSmiParser final : public RowParser {
 public:
  enum class Role : uint8_t { kIgnore, kTimestamp, kIndex, kPower, kUtil, kSmClock };

  using RowParser::RowParser;

  std::optional<std::string> Configure(const std::vector<std::string>& names, bool* needs_gpus) {
    set_column_names(names);
    // Match on the name without its unit: "power.draw [W]" -> "power.draw".
    std::vector<std::string> keys;
    for (const auto& name : names) keys.push_back(name.substr(0, name.find(" [")));
    const auto find = [&](std::string_view key) -> int {
      for (size_t i = 0; i < keys.size(); ++i) {
        if (keys[i] == key) return static_cast<int>(i);
      }
      return -1;
    };
    roles_.assign(names.size(), Role::kIgnore);
    const int timestamp = find("timestamp");
    int power = find("power.draw");
    if (power < 0) power = find("power.draw.average");
    if (power < 0) power = find("power.draw.instant");
    if (timestamp < 0) return "missing column 'timestamp' (nvidia-smi --query-gpu=timestamp,...)";
    if (power < 0) return "missing column 'power.draw [W]' (nvidia-smi --query-gpu=...,power.draw)";
    roles_[static_cast<size_t>(timestamp)] = Role::kTimestamp;
    roles_[static_cast<size_t>(power)] = Role::kPower;
    const int index = find("index");
    if (index >= 0) roles_[static_cast<size_t>(index)] = Role::kIndex;
    int util = find("utilization.gpu");
    if (util >= 0) {
      roles_[static_cast<size_t>(util)] = Role::kUtil;
      summary_.schema.has_field.set(FieldIndex(Field::kUtilPct));
    }
    int clock = find("clocks.sm");
    if (clock < 0) clock = find("clocks.current.sm");
    if (clock >= 0) {
      roles_[static_cast<size_t>(clock)] = Role::kSmClock;
      summary_.schema.has_field.set(FieldIndex(Field::kSmClockMhz));
    }
    has_index_ = index >= 0;
    *needs_gpus = !has_index_;
    return std::nullopt;
  }

  bool ParseLines(const char* begin, const char* end) override {
    double fields[kFieldCount];
    std::fill(std::begin(fields), std::end(fields), kNaN);
    return ForEachLine(begin, end, [&](const char*& p, const char* line_begin) {
      int64_t ns = 0;
      double power_w = kNaN;
      GpuToken gpu;
      size_t t_column = 0;
      fields[FieldIndex(Field::kUtilPct)] = kNaN;
      fields[FieldIndex(Field::kSmClockMhz)] = kNaN;
      for (size_t col = 0; col < roles_.size(); ++col) {
        if (col > 0 && !Separator(p, col)) return false;
        switch (roles_[col]) {
          case Role::kTimestamp: {
            t_column = col;
            const char* field_end = FieldEnd(p);
            if (!TextField(p, field_end, col)) return false;
            const std::string text = UnquotedField(p, field_end);
            const auto parsed = ParseTimestampNs(text);
            if (!parsed) {
              return Fail(col, fmt::format("bad timestamp '{}' (expected YYYY/MM/DD "
                                           "HH:MM:SS.mmm)",
                                           FieldText(p)));
            }
            ns = *parsed;
            p = field_end;
            break;
          }
          case Role::kIndex:
            if (!GpuField(p, col, gpu)) return false;
            break;
          case Role::kPower:
            if (NotAvailable(p)) return Fail(col, "power not available ('[N/A]')");
            if (!Number(p, col, power_w, /*required=*/true, /*unit_suffix=*/true)) return false;
            if (!PowerInBounds(power_w, col)) return false;
            break;
          case Role::kUtil:
          case Role::kSmClock: {
            double& v = fields[FieldIndex(roles_[col] == Role::kUtil ? Field::kUtilPct
                                                                     : Field::kSmClockMhz)];
            if (NotAvailable(p)) {
              const char* field_end = FieldEnd(p);
              if (!TextField(p, field_end, col)) return false;
              p = field_end;
              v = kNaN;
              break;
            }
            if (!Number(p, col, v, /*required=*/false, /*unit_suffix=*/true)) return false;
            if (!NonNegative(v)) return Fail(col, fmt::format("negative value {}", v));
            break;
          }
          case Role::kIgnore: {
            const char* field_end = FieldEnd(p);
            if (!TextField(p, field_end, col)) return false;
            p = field_end;
            break;
          }
        }
      }
      if (!EndOfLine(p, line_begin)) return false;
      if (!has_index_) {
        gpu.numeric = true;
        gpu.number =
            static_cast<uint32_t>(summary_.rows % static_cast<uint64_t>(options_.gpus_per_poll));
      }
      if (!origin_ns_) origin_ns_ = ns;
      const double t_s = static_cast<double>(ns - *origin_ns_) / kNanosPerSecond;
      if (!CheckTime(FindGpu(gpu), t_s, t_column)) return false;
      Emit(InternGpu(gpu), t_s, power_w, fields, SampleBatch::kNoPhase);
      ++summary_.rows;
      return true;
    });
  }

 private:
  static bool NotAvailable(const char* p) {
    const char* q = SkipBlanks(p);
    return *q == '[' || (q[0] == 'N' && q[1] == '/' && q[2] == 'A');
  }

  std::vector<Role> roles_;
  bool has_index_ = false;
  std::optional<int64_t> origin_ns_;
};

bool HasColumn(const std::vector<std::string>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

TraceFormat DetectFormat(const std::vector<std::string>& names) {
  if (HasColumn(names, "t_s") && HasColumn(names, "gpu") && HasColumn(names, "power_w")) {
    return TraceFormat::kLong;
  }
  if (HasColumn(names, "t_s")) {
    for (const auto& name : names) {
      if (MatchNumbered(name, "p", "_w")) return TraceFormat::kWide;
    }
  }
  bool timestamp = false, power = false;
  for (const auto& name : names) {
    const std::string key = name.substr(0, name.find(" ["));
    timestamp |= key == "timestamp";
    power |= key.starts_with("power.draw");
  }
  if (timestamp && power) return TraceFormat::kNvidiaSmi;
  return TraceFormat::kAuto;
}

// Builds the parser for a header line, or an error.
Result<std::unique_ptr<RowParser>> MakeParser(std::string_view name, std::string_view header,
                                              const ReadOptions& options, SampleSink& sink,
                                              ReadSummary& summary) {
  if (const char* c = FindControlByte(header.data(), header.data() + header.size())) {
    const auto column = 1 + std::count(header.data(), c, ',');
    return Error::Input(LocatedMessage(
        name, 1, static_cast<int>(column), "",
        fmt::format("control byte 0x{:02x} in the header", static_cast<unsigned char>(*c))));
  }
  const std::vector<std::string> names = SplitHeader(header);
  for (size_t i = 0; i < names.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (!names[i].empty() && names[i] == names[j]) {
        return Error::Input(
            LocatedMessage(name, 1, static_cast<int>(i + 1), names[i], "duplicate column name"));
      }
    }
  }
  TraceFormat format = options.format;
  if (format == TraceFormat::kAuto) format = DetectFormat(names);
  summary.schema.format = format;
  const auto header_error = [&](const std::string& reason) {
    return Error::Input(LocatedMessage(name, 1, 0, "", reason));
  };
  switch (format) {
    case TraceFormat::kAuto:
      return header_error(
          "unknown trace format: the header has neither t_s,gpu,power_w (long), t_s,p0_w,... "
          "(wide) nor nvidia-smi's timestamp and power.draw (see --format)");
    case TraceFormat::kLong: {
      auto parser = std::make_unique<LongParser>(name, options, sink, summary);
      if (auto error = parser->Configure(names)) return header_error(*error);
      parser->StartBatches();
      return std::unique_ptr<RowParser>(std::move(parser));
    }
    case TraceFormat::kWide: {
      auto parser = std::make_unique<WideParser>(name, options, sink, summary);
      if (auto error = parser->Configure(names)) return header_error(*error);
      parser->StartBatches();
      return std::unique_ptr<RowParser>(std::move(parser));
    }
    case TraceFormat::kNvidiaSmi: {
      auto parser = std::make_unique<NvidiaSmiParser>(name, options, sink, summary);
      bool needs_gpus = false;
      if (auto error = parser->Configure(names, &needs_gpus)) return header_error(*error);
      parser->StartBatches();
      if (needs_gpus && options.gpus_per_poll <= 0) {
        return Error::Usage(fmt::format(
            "{}: nvidia-smi log without an 'index' column: give --gpus N (the N GPUs of one "
            "poll are consecutive rows, in GPU order)",
            name));
      }
      return std::unique_ptr<RowParser>(std::move(parser));
    }
  }
  return header_error("unknown trace format");
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The driver's parts: the header, the last line, reading through views.

namespace {

Error TooLong(std::string_view name, int64_t line_no, const ReadOptions& options) {
  return Error::Input(LocatedMessage(
      name, line_no, 0, "", fmt::format("line longer than {} bytes", options.max_line_bytes)));
}

// The parser for the header line `header` (without its newline).
Result<std::unique_ptr<RowParser>> ParserForHeader(std::string_view header, std::string_view name,
                                                   const ReadOptions& options, SampleSink& sink,
                                                   ReadSummary& summary) {
  if (header.size() > options.max_line_bytes) return TooLong(name, 1, options);
  if (!header.empty() && header.back() == '\r') header.remove_suffix(1);
  return MakeParser(name, header, options, sink, summary);
}

// The end of a read: `rest` holds what followed the last newline (the header of a header-only
// file, or an unterminated last line).
Result<ReadSummary> FinishRead(std::unique_ptr<RowParser> parser, std::string rest,
                               uint64_t consumed, std::string_view name, const ReadOptions& options,
                               SampleSink& sink, ReadSummary& summary) {
  if (!parser) {
    if (rest.empty()) return Error::Input(fmt::format("{}: empty file (no header)", name));
    auto made = ParserForHeader(rest, name, options, sink, summary);
    if (!made) return std::move(made).error();
    return std::move(summary);
  }
  const size_t rest_bytes = rest.size();
  if (!rest.empty()) {
    rest += '\n';
    if (!parser->ParseLines(rest.data(), rest.data() + rest.size())) {
      summary.warnings.push_back(fmt::format(
          "{} (last line, no newline at the end: skipped as a trace still being written)",
          parser->error()));
    }
  }
  parser->Flush();
  if (options.on_progress) options.on_progress(consumed + rest_bytes);
  return std::move(summary);
}

// Reading through views: the source's bytes are parsed where they lie.
// `first` is the source's view from offset 0.
Result<ReadSummary> ReadViews(ByteSource& source, std::string_view first, std::string_view name,
                              const ReadOptions& options, SampleSink& sink, size_t window_bytes) {
  ReadSummary summary;
  std::unique_ptr<RowParser> parser;
  uint64_t offset = 0;
  std::string rest;
  std::optional<std::string_view> next = first;
  while (true) {
    if (!next) {
      auto viewed = source.View(offset, window_bytes);
      if (!viewed) return std::move(viewed).error();
      next = viewed->value_or(std::string_view());
    }
    const std::string_view view = *next;
    next.reset();
    if (offset == 0 && view.starts_with("\xEF\xBB\xBF")) {
      offset = 3;  // the BOM is not data
      continue;
    }
    if (view.empty()) break;
    const char* const base = view.data();
    const void* const last_nl = memrchr(base, '\n', view.size());
    if (last_nl == nullptr) {
      // A view shorter than asked for ends the source; window_bytes > max_line_bytes + 1.
      if (view.size() > options.max_line_bytes) {
        return TooLong(name, parser ? parser->line_no() + 1 : 1, options);
      }
      rest.assign(view);
      offset += view.size();
      // Once more: the source reports a file that changed under the copy.
      auto end = source.View(offset, 1);
      if (!end) return std::move(end).error();
      break;
    }
    const size_t stop = static_cast<size_t>(static_cast<const char*>(last_nl) - base) + 1;
    if (!parser) {
      const char* nl = static_cast<const char*>(std::memchr(base, '\n', stop));
      auto made = ParserForHeader(std::string_view(base, static_cast<size_t>(nl - base)), name,
                                  options, sink, summary);
      if (!made) return std::move(made).error();
      parser = std::move(made).value();
      offset += static_cast<uint64_t>(nl - base) + 1;
      continue;
    }
    if (!parser->ParseLines(base, base + stop)) return Error::Input(parser->error());
    offset += stop;
    if (options.on_progress) options.on_progress(offset);
  }
  const uint64_t consumed = offset - rest.size();
  return FinishRead(std::move(parser), std::move(rest), consumed, name, options, sink, summary);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The driver: whole lines to the parser, the header, the last line. Sources that can are read
// through views (no copy); others in chunks through a buffer.

Result<ReadSummary> ReadTrace(ByteSource& source, std::string_view name, const ReadOptions& options,
                              SampleSink& sink) {
  // A view holds at least one whole line of the longest allowed, or shows that it is too long.
  const size_t window_bytes = std::max(options.view_bytes, options.max_line_bytes + 2);
  {
    auto viewed = source.View(0, window_bytes);
    if (!viewed) return std::move(viewed).error();
    if (viewed->has_value()) return ReadViews(source, **viewed, name, options, sink, window_bytes);
  }
  ReadSummary summary;
  const size_t capacity = options.max_line_bytes + kReadChunkBytes;
  // Uninitialised on purpose: only what is read gets touched (small inputs stay cheap).
  std::unique_ptr<char[]> storage(new char[capacity]);
  char* const buffer_data = storage.get();
  size_t begin = 0;   // first unconsumed byte
  size_t filled = 0;  // bytes in buffer
  uint64_t consumed = 0;
  bool at_start = true;
  bool eof = false;
  std::unique_ptr<RowParser> parser;

  while (true) {
    // Whole lines available? (Once the start is known not to be a BOM.)
    if (!at_start) {
      const char* base = buffer_data;
      const void* last_nl = filled > begin ? memrchr(base + begin, '\n', filled - begin) : nullptr;
      if (last_nl != nullptr) {
        const size_t stop = static_cast<size_t>(static_cast<const char*>(last_nl) - base) + 1;
        if (!parser) {
          const char* nl = static_cast<const char*>(std::memchr(base + begin, '\n', stop - begin));
          auto made = ParserForHeader(
              std::string_view(base + begin, static_cast<size_t>(nl - (base + begin))), name,
              options, sink, summary);
          if (!made) return std::move(made).error();
          parser = std::move(made).value();
          begin = static_cast<size_t>(nl - base) + 1;
          continue;
        }
        if (!parser->ParseLines(base + begin, base + stop)) return Error::Input(parser->error());
        consumed += stop - begin;
        begin = stop;
        if (options.on_progress) options.on_progress(consumed);
      } else if (filled - begin > options.max_line_bytes) {
        return TooLong(name, parser ? parser->line_no() + 1 : 1, options);
      }
      if (eof) break;
    }
    // Compact and read more.
    if (begin > 0) {
      std::memmove(buffer_data, buffer_data + begin, filled - begin);
      filled -= begin;
      begin = 0;
    }
    // Reads of kReadChunkBytes keep the bytes being parsed in the L2 cache.
    auto n = source.Read(buffer_data + filled, std::min(capacity - filled, kReadChunkBytes));
    if (!n) return std::move(n).error();
    if (*n == 0) eof = true;
    filled += *n;
    // A BOM is not data; it is known once three bytes (or the end) are in.
    if (at_start && (filled >= 3 || eof)) {
      at_start = false;
      if (filled >= 3 && std::memcmp(buffer_data, "\xEF\xBB\xBF", 3) == 0) {
        std::memmove(buffer_data, buffer_data + 3, filled - 3);
        filled -= 3;
      }
    }
  }
  return FinishRead(std::move(parser), std::string(buffer_data + begin, filled - begin), consumed,
                    name, options, sink, summary);
}

Result<ReadSummary> ReadTraceFile(const std::string& path, const ReadOptions& options,
                                  SampleSink& sink) {
  auto source = FileSource::Open(path);
  if (!source) return std::move(source).error();
  return ReadTrace(**source, path, options, sink);
}

void CollectingSink::OnBatch(const SampleBatch& batch, const TraceSchema& schema) {
  if (series_.size() < schema.gpu_ids.size()) series_.resize(schema.gpu_ids.size());
  const bool has_tokens = schema.Has(Field::kTokens);
  const auto& tokens = batch.fields[FieldIndex(Field::kTokens)];
  const bool has_budget = schema.Has(Field::kBudgetW);
  const auto& budget = batch.fields[FieldIndex(Field::kBudgetW)];
  for (size_t i = 0; i < batch.size(); ++i) {
    Series& s = series_[batch.gpu[i]];
    s.t_s.push_back(batch.t_s[i]);
    s.power_w.push_back(batch.power_w[i]);
    if (has_tokens) s.tokens.push_back(std::isnan(tokens[i]) ? 0.0 : tokens[i]);
    if (has_budget) s.budget_w.push_back(budget[i]);
  }
}

}  // namespace headroom::trace
