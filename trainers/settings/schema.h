#pragma once

// A small declarative schema for JSON settings: one list of fields drives the validation
// of experiment files (errors name the field, what was found and what is allowed), the
// JSON Schema that `quartet schema` prints for editors and the GUI, and the tables of
// docs/spec.md. Typed settings bind these fields to struct members (settings/table.h).

#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace quartet::trainers {

// Settings someone wrote are wrong: the message names the field path
// ("spec.arms[2].batch") and what is allowed.
class SettingsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class FieldType { integer, number, string, boolean, object, array };

struct Field {
  std::string name;
  FieldType type = FieldType::string;
  std::string description;
  bool required = false;
  nlohmann::json default_value;            // null: no default
  std::optional<double> minimum;           // inclusive; arrays: fewest entries
  std::optional<double> exclusive_minimum;
  std::optional<double> maximum;           // inclusive; arrays: most entries
  std::vector<std::string> one_of;         // allowed strings, when non-empty
  std::vector<Field> fields;               // object members
  std::vector<Field> items;                // array: one element schema
  bool open = false;                       // object accepts keys not listed (checked elsewhere)
  // Where the field means something: when the field `when_field` names (a sibling's name,
  // or a JSON Pointer from the document's root such as "/workload/name") holds one of
  // `when_values`. Not validated: an editor shows the field only then ("x-applies-when").
  std::string when_field;
  std::vector<std::string> when_values;
  std::string format;                      // what a string names ("model", "stage"): JSON Schema's format
  // A default that a rule elsewhere applies (a volume workload's settings), not filled in
  // by validate_and_fill: the schema and the docs show it as the field's default.
  nlohmann::json shown_default;

  // Refinements, so that a field reads as one line where it is declared:
  //   field("ranks", FieldType::integer, "processes").at_least(1).at_most(1024).needed()
  Field& at_least(double v);
  Field& above(double v);
  Field& at_most(double v);
  Field& allowed(std::vector<std::string> values);
  Field& needed();                          // required, so no default
  Field& defaults_to(nlohmann::json v);
  Field& without_default();
  Field& with_fields(std::vector<Field> members);
  Field& of(Field item);                    // an array's element
  Field& applies_when(std::string field, std::vector<std::string> values);
  Field& names_a(std::string what);         // format: an editor offers the names it knows
  Field& defaults_elsewhere_to(nlohmann::json v);  // shown_default
};

Field field(std::string name, FieldType type, std::string description);

// Checks `value` against `field`, fills defaults in place, and throws SettingsError naming
// `path` and the first problem. Unknown object keys are refused, listing the known ones.
void validate_and_fill(nlohmann::json& value, const Field& field, const std::string& path);

// The JSON Schema (draft 2020-12) of one field.
nlohmann::json schema_of(const Field& field);
// JSON Schema of a whole document with `root` as its top object.
nlohmann::json to_json_schema(const Field& root, const std::string& title);

// Markdown table rows, one per field and per member of an object field (dotted path
// under `prefix`, allowed values, default, description), and a table of `fields` with
// its header.
std::string markdown_rows(const Field& field, const std::string& path);
std::string to_markdown_table(const std::vector<Field>& fields, const std::string& prefix = "");

// "an integer ≥ 1", "one of \"sgd\", \"adam\"": what `field` allows, in words.
std::string describe_allowed(const Field& field);

// "a", "a and b", "a, b and c".
std::string joined_words(const std::vector<std::string>& words);

}  // namespace quartet::trainers
