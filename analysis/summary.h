#pragma once

// An arm's figures from its roles' records (RUN/<arm>/summary.json) and the run's
// side-by-side table (RUN/summary.md), as `quartet run` writes them (docs/results.md).

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace quartet::analysis {

// Reads every complete line of a JSON-lines file; a torn last line (a crash mid-write)
// is ignored, a corrupt complete line throws std::runtime_error naming file and line.
std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& path);

// An arm's figures from its roles' step records:
// samples/s, time, peak memory (per tag and RSS), bytes, the metric and final quality,
// time and samples to the target (the first evaluation at or past it: at or below it for
// a lower-is-better metric, workloads::higher_is_better), and the last round's privacy
// account (null without DP).
nlohmann::json summarize_arm(const std::string& arm, const std::string& regime,
                             const std::vector<std::vector<nlohmann::json>>& roles_records,
                             std::optional<double> target, int64_t train_samples);

// Below this share of its planned samples an arm that lost work has failed.
inline constexpr double kLeastTrainedShare = 0.5;

// An arm's status from how its roles ended and what they recorded, worst first:
// "interrupted"; "failed" (`why` given: a role failed; or no sample trained, every step,
// turn or round lost; or it lost work and trained less than kLeastTrainedShare of its
// planned samples); "diverged" (a step's loss was not finite); "degraded" (steps short
// of clients or turns, or `lost_roles`, roles the arm went on without); "finished". `why`
// says why for failed, diverged and degraded, with "trained N of M planned samples (P %)"
// first where the records say what was planned.
std::string arm_status(bool interrupted, std::string& why, const nlohmann::json& summary,
                       const std::vector<std::string>& lost_roles = {});

// "62 %": an arm summary's trained_share (samples over planned_samples, rounded down);
// "" when it has none.
std::string share_text(const nlohmann::json& summary);
// The summary's status as people read it: "degraded (62 % trained)" where the share is
// known, else the status itself ("finished" when it has none).
std::string status_text(const nlohmann::json& summary);

// summary.md: the run's name and the arms' table (analysis/report.h, arms_table), one row
// per arm summary.
std::string summary_table(const std::string& run_name, const std::vector<nlohmann::json>& arm_summaries);

// The same arms as a terminal `columns` wide shows them (arms_table_text).
std::string summary_text(const std::string& run_name, const std::vector<nlohmann::json>& arm_summaries, int columns);

}  // namespace quartet::analysis
