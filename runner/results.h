#pragma once

// Result files of a run (docs/results.md): written atomically, never overwritten. Reading
// them is analysis/'s (analysis/results_model.h, analysis/summary.h).

#include <sys/types.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace quartet::runner {

// Writes `text` to `path` through a temporary file in the same folder and a rename, so
// readers see the old file or the new one, never half of it. The file has `mode` (less
// the umask) from its first byte: a secret is never readable by others on its way.
void write_file_atomically(const std::filesystem::path& path, const std::string& text, mode_t mode = 0644);
void write_json_atomically(const std::filesystem::path& path, const nlohmann::json& j);

}  // namespace quartet::runner
