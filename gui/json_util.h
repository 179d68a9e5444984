#pragma once

// Lenient reads of result JSON for charts: a missing or mistyped field gives the default,
// never an exception (load_run has already refused files that are wrong where it matters).

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace quartet::gui {

inline const nlohmann::json& member(const nlohmann::json& j, const char* key) {
  static const nlohmann::json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

inline double number(const nlohmann::json& j, const char* key, double fallback = 0.0) {
  const nlohmann::json& v = member(j, key);
  return v.is_number() ? v.get<double>() : fallback;
}

inline int64_t integer(const nlohmann::json& j, const char* key, int64_t fallback = 0) {
  const nlohmann::json& v = member(j, key);
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number()) return static_cast<int64_t>(v.get<double>());
  return fallback;
}

inline std::string text(const nlohmann::json& j, const char* key, const std::string& fallback = "") {
  const nlohmann::json& v = member(j, key);
  return v.is_string() ? v.get<std::string>() : fallback;
}

}  // namespace quartet::gui
