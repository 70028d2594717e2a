// Typed reads of a JSON document's fields: the one reader under the JSON headroom reads (the
// site's values, coord/layout.cc; etcd's answers, etcd/etcd_wire.cc; policy files,
// control/policy.cc; the DiLoCo reports, diloco_core/run_report.h). A field is named by its
// path in the document ("actor.parameters", "envelopes[0].budget_w", "jobs.a.floor_w"), and a
// problem is one line naming it:
//
//   WHERE: field 'PATH': WHY
//
// WHY is "missing" or "expected ..." (a number, a finite number, an integer, an integer >= 0,
// a string, true or false, an object, an array, an array of numbers / integers / strings /
// objects), or the caller's own (Fail: "expected watts >= 0"). The first problem is kept and
// every later read returns a zero value (0, "", false, empty), so a reader reads every field
// and checks ok() once. Null is a value of the wrong type, except where missing fields are
// zero (Missing::kZero: etcd's gateway leaves zero-valued fields out, and writes null).
// Not thread-safe: one reader of one document.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common/error.h"

namespace headroom {

class JsonObject;

// One document's read: where it is, and its first problem.
class JsonFields {
 public:
  enum class Missing { kProblem, kZero };  // what a field that is not there is
  // `where`: the document, for messages ("p.json", "/headroom/s/ledger"; may be empty).
  // `noun`: what a field is called in them ("field"; policy files say "key").
  explicit JsonFields(std::string where, Missing missing = Missing::kProblem,
                      std::string noun = "field");

  // A view of `document` for reads (its fields at the top of the paths).
  JsonObject Root(const nlohmann::json& document);

  bool ok() const { return problem_.empty(); }
  Missing missing() const { return missing_; }
  // "field 'PATH': WHY" (or WHY alone for the document itself); empty while ok.
  const std::string& problem() const { return problem_; }
  // "WHERE: PROBLEM".
  std::string message() const;
  // OK, or the problem as an error of `kind`.
  Status status(ErrorKind kind = ErrorKind::kInput) const;

  // Records a problem with the field at `path` ("" for the document), the first one only.
  void Fail(std::string_view path, std::string_view why);

 private:
  std::string where_;
  Missing missing_;
  std::string noun_;
  std::string problem_;
};

// An object in a document, and its path there: typed reads of its fields. Cheap to copy.
// REQUIRES: the JsonFields and the json outlive the view.
class JsonObject {
 public:
  // `object` at `path` ("" at the top); a value that is not an object fails its first read.
  JsonObject(JsonFields& fields, const nlohmann::json& object, std::string path = "");

  // Whether `key` is there and not null (an optional field); no problem either way.
  bool Has(std::string_view key) const;
  // The member, or nullptr when not there (a problem unless Missing::kZero) or after a problem.
  const nlohmann::json* Member(std::string_view key);

  double Number(std::string_view key);  // finite
  bool Bool(std::string_view key);
  std::string String(std::string_view key);
  // An integer T can hold: "expected an integer" (">= 0" for an unsigned T).
  template <class T>
  T Integer(std::string_view key) {
    const nlohmann::json* v = Member(key);
    if (v == nullptr) return T{};
    if (!FitsInteger<T>(*v)) {
      Fail(key, std::is_signed_v<T> ? "expected an integer" : "expected an integer >= 0");
      return T{};
    }
    return v->get<T>();
  }
  int64_t Int64(std::string_view key) { return Integer<int64_t>(key); }

  // A nested object (path "PATH.KEY"); on a problem, a view of an empty object.
  JsonObject Object(std::string_view key);
  // An array (empty on a problem), and arrays of one type: "expected an array of numbers"
  // whether the value is not an array or one of its elements is not a number. Objects are
  // named "PATH.KEY[i]".
  const nlohmann::json& Array(std::string_view key);
  std::vector<double> Numbers(std::string_view key);
  std::vector<std::string> Strings(std::string_view key);
  template <class T>
  std::vector<T> Integers(std::string_view key) {
    const nlohmann::json& a = ArrayOf(key, "expected an array of integers", &FitsInteger<T>);
    std::vector<T> out;
    out.reserve(a.size());
    for (const nlohmann::json& v : a) out.push_back(v.get<T>());
    return out;
  }
  std::vector<JsonObject> Objects(std::string_view key);

  // Records a problem with the field `key` of this object.
  void Fail(std::string_view key, std::string_view why);
  // "PATH.KEY" ("KEY" at the top).
  std::string PathOf(std::string_view key) const;
  const std::string& path() const { return path_; }
  const nlohmann::json& value() const { return *object_; }
  bool ok() const { return fields_->ok(); }

 private:
  // The array at `key` when every element is element_ok; else `expected` (and an empty one).
  const nlohmann::json& ArrayOf(std::string_view key, std::string_view expected,
                                bool (*element_ok)(const nlohmann::json&));
  template <class T>
  static bool FitsInteger(const nlohmann::json& v) {
    if (v.is_number_unsigned()) {
      return v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
    }
    if (!v.is_number_integer()) return false;
    const int64_t i = v.get<int64_t>();
    if constexpr (std::is_signed_v<T>) {
      return i >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
             i <= static_cast<int64_t>(std::numeric_limits<T>::max());
    } else {
      return i >= 0;
    }
  }

  JsonFields* fields_;
  const nlohmann::json* object_;
  std::string path_;
};

}  // namespace headroom
