#pragma once

// A small declarative schema for JSON documents: one table of fields drives both the
// validation of experiment files (errors name the field, what was found and what is
// allowed) and the JSON Schema that `quartet schema` prints for editors and the GUI.

#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace quartet::experiments {

// A spec the user wrote is wrong: the message names the field path ("spec.arms[2].batch").
class SpecError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class FieldType { integer, number, string, boolean, object, array };

struct Field {
  std::string name;
  FieldType type = FieldType::string;
  std::string description;
  bool required = false;
  nlohmann::json default_value;  // null: no default
  std::optional<double> minimum;           // inclusive
  std::optional<double> exclusive_minimum;
  std::optional<double> maximum;           // inclusive
  std::vector<std::string> one_of;         // allowed strings, when non-empty
  std::vector<Field> fields;               // object members
  std::vector<Field> items;                // array: one element schema
  bool open = false;                       // object accepts keys not listed (checked elsewhere)
};

// Checks `value` against `field`, fills defaults in place, and throws SpecError naming
// `path` and the first problem. Unknown object keys are refused, listing the known ones.
void validate_and_fill(nlohmann::json& value, const Field& field, const std::string& path);

// JSON Schema (draft 2020-12) for `root`.
nlohmann::json to_json_schema(const Field& root, const std::string& title);

// A Markdown table with one row per field (dotted path, allowed values, default,
// description), for docs/spec.md.
std::string to_markdown_table(const Field& root);

// "an integer ≥ 1", "one of \"sgd\", \"adam\"": what `field` allows, in words.
std::string describe_allowed(const Field& field);

}  // namespace quartet::experiments
