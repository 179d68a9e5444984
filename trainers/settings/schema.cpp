#include "trainers/settings/schema.h"

#include <cmath>
#include <sstream>

namespace quartet::trainers {
namespace {

using nlohmann::json;

std::string type_word(FieldType t) {
  switch (t) {
    case FieldType::integer: return "an integer";
    case FieldType::number: return "a number";
    case FieldType::string: return "a string";
    case FieldType::boolean: return "true or false";
    case FieldType::object: return "an object";
    case FieldType::array: return "an array";
  }
  return "a value";
}

std::string found(const json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// Whole numbers in full ("16777216", not "1.67772e+07"), others as streams write them.
std::string number_str(double v) {
  if (std::floor(v) == v && std::abs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  std::ostringstream out;
  out << v;
  return out.str();
}

bool type_matches(const json& v, FieldType t) {
  switch (t) {
    case FieldType::integer:
      if (v.is_number_integer()) return true;
      return v.is_number_float() && std::isfinite(v.get<double>()) && std::floor(v.get<double>()) == v.get<double>() &&
             std::abs(v.get<double>()) < 9.0e15;
    case FieldType::number: return v.is_number() && std::isfinite(v.get<double>());
    case FieldType::string: return v.is_string();
    case FieldType::boolean: return v.is_boolean();
    case FieldType::object: return v.is_object();
    case FieldType::array: return v.is_array();
  }
  return false;
}

}  // namespace

Field& Field::at_least(double v) {
  minimum = v;
  return *this;
}

Field& Field::applies_when(std::string field_name, std::vector<std::string> values) {
  when_field = std::move(field_name);
  when_values = std::move(values);
  return *this;
}

Field& Field::names_a(std::string what) {
  format = std::move(what);
  return *this;
}

Field& Field::defaults_elsewhere_to(json v) {
  shown_default = std::move(v);
  return *this;
}

Field& Field::above(double v) {
  exclusive_minimum = v;
  return *this;
}

Field& Field::at_most(double v) {
  maximum = v;
  return *this;
}

Field& Field::allowed(std::vector<std::string> values) {
  one_of = std::move(values);
  return *this;
}

Field& Field::needed() {
  required = true;
  default_value = nullptr;
  return *this;
}

Field& Field::defaults_to(json v) {
  default_value = std::move(v);
  return *this;
}

Field& Field::without_default() {
  default_value = nullptr;
  return *this;
}

Field& Field::with_fields(std::vector<Field> members) {
  fields = std::move(members);
  return *this;
}

Field& Field::of(Field item) {
  items = {std::move(item)};
  return *this;
}

Field field(std::string name, FieldType type, std::string description) {
  Field f;
  f.name = std::move(name);
  f.type = type;
  f.description = std::move(description);
  return f;
}

std::string joined_words(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i)
    out += (i == 0 ? "" : i + 1 == words.size() ? " and " : ", ") + words[i];
  return out;
}

std::string describe_allowed(const Field& f) {
  std::string s = type_word(f.type);
  if (!f.one_of.empty()) {
    s = "one of ";
    for (size_t i = 0; i < f.one_of.size(); ++i) s += (i ? ", \"" : "\"") + f.one_of[i] + "\"";
    return s;
  }
  if (f.type == FieldType::array) {
    if (f.minimum && f.maximum && *f.minimum == *f.maximum) return "an array of " + number_str(*f.minimum) + " entries";
    if (f.minimum) return "an array of at least " + number_str(*f.minimum) + " entries";
    return s;
  }
  if (f.minimum) s += " ≥ " + number_str(*f.minimum);
  if (f.exclusive_minimum) s += " > " + number_str(*f.exclusive_minimum);
  if (f.maximum) s += (f.minimum || f.exclusive_minimum ? " and ≤ " : " ≤ ") + number_str(*f.maximum);
  return s;
}

void validate_and_fill(json& value, const Field& f, const std::string& path) {
  if (!type_matches(value, f.type))
    throw SettingsError(path + ": expected " + describe_allowed(f) + ", got " + found(value));
  if (f.type == FieldType::integer && value.is_number_float()) value = static_cast<int64_t>(value.get<double>());
  if (f.type == FieldType::integer || f.type == FieldType::number) {
    const double x = value.get<double>();
    if ((f.minimum && x < *f.minimum) || (f.exclusive_minimum && x <= *f.exclusive_minimum) ||
        (f.maximum && x > *f.maximum))
      throw SettingsError(path + ": expected " + describe_allowed(f) + ", got " + found(value));
  }
  if (f.type == FieldType::string && !f.one_of.empty()) {
    const std::string s = value.get<std::string>();
    bool ok = false;
    for (const auto& o : f.one_of) ok = ok || o == s;
    if (!ok) throw SettingsError(path + ": unknown value \"" + s + "\"; expected " + describe_allowed(f));
  }
  if (f.type == FieldType::object) {
    for (auto it = value.begin(); it != value.end(); ++it) {
      bool known = f.open;
      for (const Field& m : f.fields) known = known || m.name == it.key();
      if (!known) {
        std::string names;
        for (const Field& m : f.fields) names += (names.empty() ? "" : ", ") + m.name;
        throw SettingsError(path + ": unknown field \"" + it.key() + "\"; allowed fields: " + names);
      }
    }
    for (const Field& m : f.fields) {
      const std::string sub = path + "." + m.name;
      if (!value.contains(m.name)) {
        if (m.required) throw SettingsError(sub + ": missing; expected " + describe_allowed(m) + " (" + m.description + ")");
        if (!m.default_value.is_null()) value[m.name] = m.default_value;
        if (m.type == FieldType::object && !value.contains(m.name) && !m.required) continue;
      }
      if (value.contains(m.name)) validate_and_fill(value[m.name], m, sub);
    }
  }
  if (f.type == FieldType::array && !f.items.empty()) {
    if (f.minimum && static_cast<double>(value.size()) < *f.minimum)
      throw SettingsError(path + ": expected at least " + number_str(*f.minimum) + " entries, got " +
                          std::to_string(value.size()));
    if (f.maximum && static_cast<double>(value.size()) > *f.maximum)
      throw SettingsError(path + ": expected at most " + number_str(*f.maximum) + " entries, got " +
                          std::to_string(value.size()));
    for (size_t i = 0; i < value.size(); ++i)
      validate_and_fill(value[i], f.items[0], path + "[" + std::to_string(i) + "]");
  }
}

json schema_of(const Field& f) {
  json s;
  static const char* names[] = {"integer", "number", "string", "boolean", "object", "array"};
  s["type"] = names[static_cast<int>(f.type)];
  if (!f.description.empty()) s["description"] = f.description;
  if (!f.default_value.is_null()) s["default"] = f.default_value;
  else if (!f.shown_default.is_null()) s["default"] = f.shown_default;
  if (!f.one_of.empty()) s["enum"] = f.one_of;
  if (!f.format.empty()) s["format"] = f.format;
  if (!f.when_field.empty()) s["x-applies-when"] = {{f.when_field, f.when_values}};
  if (f.type == FieldType::array) {
    if (f.minimum) s["minItems"] = static_cast<int64_t>(*f.minimum);
    if (f.maximum) s["maxItems"] = static_cast<int64_t>(*f.maximum);
    if (!f.items.empty()) s["items"] = schema_of(f.items[0]);
  } else {
    if (f.minimum) s["minimum"] = *f.minimum;
    if (f.exclusive_minimum) s["exclusiveMinimum"] = *f.exclusive_minimum;
    if (f.maximum) s["maximum"] = *f.maximum;
  }
  if (f.type == FieldType::object) {
    json props = json::object();
    json required = json::array();
    for (const Field& m : f.fields) {
      props[m.name] = schema_of(m);
      if (m.required) required.push_back(m.name);
    }
    s["properties"] = props;
    if (!required.empty()) s["required"] = required;
    s["additionalProperties"] = f.open;
  }
  return s;
}

std::string markdown_rows(const Field& f, const std::string& path) {
  const json& shown = f.default_value.is_null() ? f.shown_default : f.default_value;
  std::string def = shown.is_null() ? (f.required ? "required" : "—") : "`" + shown.dump() + "`";
  std::string out = "| `" + path + "` | " + describe_allowed(f) + " | " + def + " | " + f.description + " |\n";
  for (const Field& m : f.fields) out += markdown_rows(m, path + "." + m.name);
  if (f.type == FieldType::array && !f.items.empty())
    for (const Field& m : f.items[0].fields) out += markdown_rows(m, path + "[]." + m.name);
  return out;
}

std::string to_markdown_table(const std::vector<Field>& fields, const std::string& prefix) {
  std::string out = "| field | allowed | default | meaning |\n| --- | --- | --- | --- |\n";
  for (const Field& m : fields) out += markdown_rows(m, prefix + m.name);
  return out;
}

json to_json_schema(const Field& root, const std::string& title) {
  json s = schema_of(root);
  s["$schema"] = "https://json-schema.org/draft/2020-12/schema";
  s["title"] = title;
  return s;
}

}  // namespace quartet::trainers
