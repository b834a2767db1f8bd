// Reading planner data files (hardware profiles, engine calibrations): the fields of one JSON
// object, with errors that name the file and the field's path ("h100-sxm.json:
// fabric.intra_node.links: must be in [1, 1024], got 0").
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tpserve::planner {

// Reads the fields of one JSON object with errors that name the source and the field's path.
class Fields {
 public:
  Fields(const nlohmann::json& object, std::string source, std::string path)
      : object_(object), source_(std::move(source)), path_(std::move(path)) {}

  Status Number(const char* name, double* out, double min, double max, bool required = true) const {
    const nlohmann::json* value = Find(name);
    if (value == nullptr) return required ? Missing(name) : Status::Ok();
    if (!value->is_number()) return Error(name, "must be a number");
    const double v = value->get<double>();
    if (!(v >= min && v <= max)) {
      return Error(name, "must be in [" + Format(min) + ", " + Format(max) + "], got " + Format(v));
    }
    *out = v;
    return Status::Ok();
  }
  Status Integer(const char* name, int* out, int min, int max, bool required = true) const {
    double v = *out;
    RETURN_IF_ERROR(Number(name, &v, min, max, required));
    if (v != static_cast<int>(v)) return Error(name, "must be a whole number");
    *out = static_cast<int>(v);
    return Status::Ok();
  }
  Status Text(const char* name, std::string* out, bool required = true) const {
    const nlohmann::json* value = Find(name);
    if (value == nullptr) return required ? Missing(name) : Status::Ok();
    if (!value->is_string()) return Error(name, "must be a string");
    *out = value->get<std::string>();
    return Status::Ok();
  }
  Status Flag(const char* name, bool* out) const {
    const nlohmann::json* value = Find(name);
    if (value == nullptr) return Status::Ok();
    if (!value->is_boolean()) return Error(name, "must be true or false");
    *out = value->get<bool>();
    return Status::Ok();
  }
  Result<Fields> Object(const char* name, bool required = true) const {
    const nlohmann::json* value = Find(name);
    if (value == nullptr || value->is_null()) {
      if (required) return Missing(name);
      return Fields(kEmpty, source_, Path(name));
    }
    if (!value->is_object()) return Error(name, "must be an object");
    return Fields(*value, source_, Path(name));
  }
  bool Has(const char* name) const {
    const nlohmann::json* value = Find(name);
    return value != nullptr && !value->is_null();
  }
  const nlohmann::json& raw() const { return object_; }
  Status Error(const std::string& name, const std::string& what) const {
    return InvalidArgument(source_ + ": " + Path(name) + ": " + what);
  }

 private:
  static inline const nlohmann::json kEmpty = nlohmann::json::object();
  const nlohmann::json* Find(const char* name) const {
    auto it = object_.find(name);
    return it == object_.end() ? nullptr : &*it;
  }
  std::string Path(const std::string& name) const { return path_.empty() ? name : path_ + "." + name; }
  Status Missing(const std::string& name) const { return Error(name, "missing"); }
  static std::string Format(double v) {
    char buffer[32];
    std::snprintf(buffer, sizeof(buffer), "%g", v);
    return buffer;
  }

  const nlohmann::json& object_;
  std::string source_, path_;
};

}  // namespace tpserve::planner
