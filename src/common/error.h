// Expected failures as values: the error policy of headroom.
//
// - An expected failure (a bad line in a trace, a missing file, a bad option value) is returned
//   as an Error inside a Result<T>; its message is one line, fit to print as is.
// - Programmer errors are assertions.
// - The CLI maps ErrorKind to the exit status: kUsage -> 2, anything else -> 1.
#pragma once

#include <cassert>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace headroom {

enum class ErrorKind {
  kInput,  // the data is wrong: a trace, a sidecar, a scenario
  kUsage,  // the command line is wrong, or misses what the input needs
  kIo,     // the system failed: open, read, write, rename
  // A store's answers, sorted where its client meets it (etcd/etcd_store.cc), so that no caller
  // reads a message to tell them apart:
  kUnavailable,      // no member could take the request (none reachable, no leader): not applied
  kOutcomeUnknown,   // a write was sent and no answer came: it may have been applied
  kNotFound,         // what the request names is not there (a lease expired or revoked)
  kConflict,         // the request conflicts with the store's state (a revision compacted)
  kUnauthenticated,  // the store refused the credentials or the session's token
};

class Error {
 public:
  Error(ErrorKind kind, std::string message) : kind_(kind), message_(std::move(message)) {}

  static Error Input(std::string message) { return {ErrorKind::kInput, std::move(message)}; }
  static Error Usage(std::string message) { return {ErrorKind::kUsage, std::move(message)}; }
  static Error Io(std::string message) { return {ErrorKind::kIo, std::move(message)}; }
  static Error Unavailable(std::string message) {
    return {ErrorKind::kUnavailable, std::move(message)};
  }
  static Error OutcomeUnknown(std::string message) {
    return {ErrorKind::kOutcomeUnknown, std::move(message)};
  }
  static Error NotFound(std::string message) { return {ErrorKind::kNotFound, std::move(message)}; }
  static Error Conflict(std::string message) { return {ErrorKind::kConflict, std::move(message)}; }
  static Error Unauthenticated(std::string message) {
    return {ErrorKind::kUnauthenticated, std::move(message)};
  }

  ErrorKind kind() const { return kind_; }
  const std::string& message() const { return message_; }

 private:
  ErrorKind kind_;
  std::string message_;
};

// "FILE:LINE:COLUMN: column 'FIELD': REASON" -- the one-line form of every input error that
// points into a text file. line and column count from 1; column 0 means the whole line, and an
// empty field is left out.
std::string LocatedMessage(std::string_view file, int64_t line, int column, std::string_view field,
                           std::string_view reason);

// A value or an Error. Small by design: what std::expected would be, in C++20.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  // REQUIRES: ok().
  T& value() & {
    assert(ok());
    return std::get<0>(v_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<0>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<0>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  // REQUIRES: !ok().
  const Error& error() const& {
    assert(!ok());
    return std::get<1>(v_);
  }
  Error&& error() && {
    assert(!ok());
    return std::get<1>(std::move(v_));
  }

 private:
  std::variant<T, Error> v_;
};

using Status = Result<std::monostate>;
inline Status OkStatus() { return std::monostate{}; }

}  // namespace headroom
