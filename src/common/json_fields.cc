#include "common/json_fields.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace headroom {

using nlohmann::json;

namespace {

const json& EmptyObject() {
  static const json kEmpty = json::object();
  return kEmpty;
}

const json& EmptyArray() {
  static const json kEmpty = json::array();
  return kEmpty;
}

}  // namespace

JsonFields::JsonFields(std::string where, Missing missing, std::string noun)
    : where_(std::move(where)), missing_(missing), noun_(std::move(noun)) {}

JsonObject JsonFields::Root(const json& document) { return JsonObject(*this, document); }

std::string JsonFields::message() const {
  return where_.empty() ? problem_ : fmt::format("{}: {}", where_, problem_);
}

Status JsonFields::status(ErrorKind kind) const {
  if (ok()) return OkStatus();
  return Error(kind, message());
}

void JsonFields::Fail(std::string_view path, std::string_view why) {
  if (!ok()) return;
  problem_ = path.empty() ? std::string(why) : fmt::format("{} '{}': {}", noun_, path, why);
}

JsonObject::JsonObject(JsonFields& fields, const json& object, std::string path)
    : fields_(&fields), object_(&object), path_(std::move(path)) {}

bool JsonObject::Has(std::string_view key) const {
  if (!object_->is_object()) return false;
  const auto it = object_->find(key);
  return it != object_->end() && !it->is_null();
}

const json* JsonObject::Member(std::string_view key) {
  if (!fields_->ok()) return nullptr;
  if (!object_->is_object()) {
    fields_->Fail(path_, "expected an object");
    return nullptr;
  }
  const auto it = object_->find(key);
  const bool zero = fields_->missing() == JsonFields::Missing::kZero;
  if (it == object_->end() || (zero && it->is_null())) {
    if (!zero) Fail(key, "missing");
    return nullptr;
  }
  return &*it;
}

double JsonObject::Number(std::string_view key) {
  const json* v = Member(key);
  if (v == nullptr) return 0.0;
  if (!v->is_number()) {
    Fail(key, "expected a number");
    return 0.0;
  }
  const double d = v->get<double>();
  if (!std::isfinite(d)) {
    Fail(key, "expected a finite number");
    return 0.0;
  }
  return d;
}

bool JsonObject::Bool(std::string_view key) {
  const json* v = Member(key);
  if (v == nullptr) return false;
  if (!v->is_boolean()) {
    Fail(key, "expected true or false");
    return false;
  }
  return v->get<bool>();
}

std::string JsonObject::String(std::string_view key) {
  const json* v = Member(key);
  if (v == nullptr) return {};
  if (!v->is_string()) {
    Fail(key, "expected a string");
    return {};
  }
  return v->get<std::string>();
}

JsonObject JsonObject::Object(std::string_view key) {
  const json* v = Member(key);
  if (v != nullptr && !v->is_object()) {
    Fail(key, "expected an object");
    v = nullptr;
  }
  return JsonObject(*fields_, v != nullptr ? *v : EmptyObject(), PathOf(key));
}

const json& JsonObject::Array(std::string_view key) {
  const json* v = Member(key);
  if (v == nullptr) return EmptyArray();
  if (!v->is_array()) {
    Fail(key, "expected an array");
    return EmptyArray();
  }
  return *v;
}

const json& JsonObject::ArrayOf(std::string_view key, std::string_view expected,
                                bool (*element_ok)(const json&)) {
  const json* v = Member(key);
  if (v == nullptr) return EmptyArray();
  if (!v->is_array() || !std::all_of(v->begin(), v->end(), element_ok)) {
    Fail(key, expected);
    return EmptyArray();
  }
  return *v;
}

std::vector<double> JsonObject::Numbers(std::string_view key) {
  const json& a = ArrayOf(key, "expected an array of numbers", [](const json& v) {
    return v.is_number() && std::isfinite(v.get<double>());
  });
  std::vector<double> out;
  out.reserve(a.size());
  for (const json& v : a) out.push_back(v.get<double>());
  return out;
}

std::vector<std::string> JsonObject::Strings(std::string_view key) {
  const json& a =
      ArrayOf(key, "expected an array of strings", [](const json& v) { return v.is_string(); });
  std::vector<std::string> out;
  out.reserve(a.size());
  for (const json& v : a) out.push_back(v.get<std::string>());
  return out;
}

std::vector<JsonObject> JsonObject::Objects(std::string_view key) {
  const json& a =
      ArrayOf(key, "expected an array of objects", [](const json& v) { return v.is_object(); });
  std::vector<JsonObject> out;
  for (size_t i = 0; i < a.size(); ++i) {
    out.emplace_back(*fields_, a[i], fmt::format("{}[{}]", PathOf(key), i));
  }
  return out;
}

void JsonObject::Fail(std::string_view key, std::string_view why) {
  if (fields_->ok()) fields_->Fail(PathOf(key), why);
}

std::string JsonObject::PathOf(std::string_view key) const {
  return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
}

}  // namespace headroom
