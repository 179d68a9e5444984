#pragma once

// The file through which `quartet launch`'s rank 0 hands the run's token to the other
// ranks on a shared filesystem (--token-file): its first line is the token, or
// "failed: REASON" once rank 0 has failed, so that ranks still waiting to join stop.

#include <filesystem>
#include <string>

namespace quartet::runner {

// Writes the token (or, with `failure` set, the failure) atomically, readable by its
// owner only; makes the missing folders above it (0700). InputError naming the file
// when it cannot.
void write_token_file(const std::filesystem::path& file, const std::string& token, const std::string& failure = "");

struct TokenFile {
  std::string token;    // "" while the file is missing or empty
  std::string failure;  // rank 0's reason, when it has failed
};
// What `file` holds now. A failure written more than a minute before `since` (a file
// left by an earlier job) is not this job's and reads as no token yet.
TokenFile read_token_file(const std::filesystem::path& file, std::filesystem::file_time_type since);

}  // namespace quartet::runner
