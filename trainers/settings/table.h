#pragma once

// Typed settings: a struct's members bound to schema fields, each written once.
//
//   struct Settings {
//     double bucket_mb = 25.0;   // the default lives here, and only here
//     static const SettingsTable<Settings>& table();
//   };
//   const SettingsTable<Settings>& Settings::table() {
//     static const SettingsTable<Settings> t = [] {
//       SettingsTable<Settings> t;
//       t.add(&Settings::bucket_mb, "bucket_mb", "gradient bucket size, MiB").above(0);
//       return t;
//     }();
//     return t;
//   }
//
// A field's type comes from its member (integers, double, bool, std::string, a vector of
// strings, another table's struct as an object), its default from a default-constructed
// struct; an std::optional member has no default (the settings fill it later, or it stays
// unset). parse() validates JSON against the fields and reads it; to_json() writes every
// member that has a value, so the JSON says what will run.

#include <concepts>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "trainers/settings/schema.h"

namespace quartet::trainers {

template <class S>
class SettingsTable;

namespace detail {

template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};

template <class T>
constexpr FieldType field_type_of() {
  if constexpr (is_optional<T>::value) return field_type_of<typename T::value_type>();
  else if constexpr (std::is_same_v<T, bool>) return FieldType::boolean;
  else if constexpr (std::is_integral_v<T>) return FieldType::integer;
  else if constexpr (std::is_floating_point_v<T>) return FieldType::number;
  else if constexpr (std::is_same_v<T, std::string>) return FieldType::string;
  else if constexpr (std::is_same_v<T, std::vector<std::string>>) return FieldType::array;
  else {
    static_assert(std::is_same_v<T, bool>, "a settings member is an integer, double, bool, string or vector<string>");
    return FieldType::string;
  }
}

}  // namespace detail

template <class S>
class SettingsTable {
 public:
  // Binds `member` to a field named `name`; returns the field for refinements
  // (at_least, allowed, needed, ...), valid until the next add.
  template <class T>
  Field& add(T S::*member, std::string name, std::string description) {
    Field f = field(std::move(name), detail::field_type_of<T>(), std::move(description));
    if constexpr (detail::field_type_of<T>() == FieldType::array) f.of(field("item", FieldType::string, ""));
    const T fallback = S{}.*member;
    if constexpr (detail::is_optional<T>::value) {
      if (fallback) f.default_value = *fallback;
    } else {
      f.default_value = fallback;
    }
    const std::string key = f.name;
    bindings_.push_back({[member, key](const nlohmann::json& j, S& s) {
                           const auto it = j.find(key);
                           if (it == j.end() || it->is_null()) return;
                           if constexpr (detail::is_optional<T>::value) s.*member = it->template get<typename T::value_type>();
                           else s.*member = it->template get<T>();
                         },
                         [member, key](const S& s, nlohmann::json& j) {
                           if constexpr (detail::is_optional<T>::value) {
                             if (s.*member) j[key] = *(s.*member);
                           } else {
                             j[key] = s.*member;
                           }
                         }});
    fields_.push_back(std::move(f));
    return fields_.back();
  }

  // Binds a member that is itself a table's struct: a JSON object with that table's fields.
  template <class T>
  Field& add(T S::*member, std::string name, std::string description, const SettingsTable<T>& nested) {
    Field f = field(std::move(name), FieldType::object, std::move(description));
    f.fields = nested.fields();
    f.default_value = nlohmann::json::object();
    const std::string key = f.name;
    bindings_.push_back({[member, key, &nested](const nlohmann::json& j, S& s) {
                           const auto it = j.find(key);
                           if (it != j.end() && it->is_object()) nested.read(*it, s.*member);
                         },
                         [member, key, &nested](const S& s, nlohmann::json& j) { j[key] = nested.to_json(s.*member); }});
    fields_.push_back(std::move(f));
    return fields_.back();
  }

  const std::vector<Field>& fields() const { return fields_; }
  bool has(const std::string& name) const {
    for (const Field& f : fields_)
      if (f.name == name) return true;
    return false;
  }
  const Field& at(const std::string& name) const {
    for (const Field& f : fields_)
      if (f.name == name) return f;
    throw std::out_of_range("no setting named " + name);
  }

  // Validates `j` (an object of these fields; any other key is refused, naming the
  // allowed ones), fills the defaults into it and reads it. Throws SettingsError naming
  // `path`.
  S parse(nlohmann::json& j, const std::string& path) const {
    Field object = field("", FieldType::object, "");
    object.fields = fields_;
    validate_and_fill(j, object, path);
    S s;
    read(j, s);
    return s;
  }

  // Reads the members of validated JSON (keys absent from `j` keep their values in `s`).
  void read(const nlohmann::json& j, S& s) const {
    for (const Binding& b : bindings_) b.read(j, s);
  }

  nlohmann::json to_json(const S& s) const {
    nlohmann::json j = nlohmann::json::object();
    for (const Binding& b : bindings_) b.write(s, j);
    return j;
  }

 private:
  struct Binding {
    std::function<void(const nlohmann::json&, S&)> read;
    std::function<void(const S&, nlohmann::json&)> write;
  };
  std::vector<Field> fields_;
  std::vector<Binding> bindings_;
};

}  // namespace quartet::trainers
