#pragma once

// Reading the records that trainers/metrics.h writes (docs/results.md, "Step record"):
// lenient accessors for Quartet's JSON and a typed view of one record line, for every
// reader (arm summaries, the results model, the projection). Lenient: a missing or
// mistyped field reads as its default, never an exception; record_problem() says what a
// reader that must refuse bad files (load_run) should refuse.

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "trainers/metrics.h"

namespace quartet::trainers {

// `j[key]`, or null when `j` is not an object or has no `key`.
const nlohmann::json& member(const nlohmann::json& j, const char* key);
// `j[key]` as a number, an integer (a float is truncated) or a string; `fallback` when
// it is missing or of another type.
double number(const nlohmann::json& j, const char* key, double fallback = 0.0);
int64_t integer(const nlohmann::json& j, const char* key, int64_t fallback = 0);
std::string text(const nlohmann::json& j, const char* key, const std::string& fallback = "");

// What is wrong with `j[key]` when it is present with a type other than `want`
// (number_float stands for any number), as "\"key\" should be a number, got string";
// "" when it is absent or of that type.
std::string type_problem(const nlohmann::json& j, const char* key, nlohmann::json::value_t want);

// One role's records, in the order written: RUN/<arm>/roles/<role>.jsonl.
struct RoleRecords {
  std::string role;                     // trainer, rank0, server, pool1, …
  std::vector<nlohmann::json> records;
};

// Bytes the engine tracked for one memory tag.
struct TagMemory {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t at_total_peak = -1;  // its bytes when the total peaked; -1 in records without it
};

// A record line read back: the writer's StepRecord and what to_json() adds. Records of
// other types (a federated pool's client_round, a split client's client_turn) fill what
// they carry: their role, memory and peak RSS.
struct RecordView : StepRecord {
  std::string type;  // "step", "client_round", …
  std::string role;  // "" when the line has none
  std::optional<std::map<std::string, TagMemory>> memory;  // per tag and "total", when the line has it
  std::optional<std::map<std::string, TagMemory>> gpu_memory;  // per tag on the arm's GPU, when it ran on one
  std::optional<int64_t> rss_peak;                          // when the line has it

  bool is_step() const { return type == "step"; }
  // The step's own compute: forward, backward, optimizer and batch assembly, seconds.
  double compute_seconds() const { return forward + backward + optimizer + data; }
};

RecordView read_record(const nlohmann::json& line);

// Why `line` cannot be read as a record ("" when it can): not a JSON object, a step
// record without a numeric wall, samples or step, a figure that is not a number, memory
// or compute that is not an object, an evaluation without a numeric value.
std::string record_problem(const nlohmann::json& line);

bool has_steps(const RoleRecords& role);

// The role whose step records carry an arm's clock and evaluations: server, trainer or
// rank0 when it has step records, else the first role that has; null when none has.
const RoleRecords* clock_role(const std::vector<RoleRecords>& roles);

// Of an arm's role names (in the regime's order), the one clock_role() picks once they
// all have records: server, trainer or rank0 when present, else the first.
std::string clock_role_name(const std::vector<std::string>& roles);

}  // namespace quartet::trainers
