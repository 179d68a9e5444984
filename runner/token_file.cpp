#include "runner/token_file.h"

#include <chrono>
#include <fstream>
#include <system_error>

#include "runner/results.h"
#include "runner/wiring.h"

namespace quartet::runner {
namespace fs = std::filesystem;

namespace {
constexpr const char* kFailed = "failed: ";
}

void write_token_file(const fs::path& file, const std::string& token, const std::string& failure) {
  const fs::path folder = file.parent_path();
  std::error_code ec;
  if (!folder.empty() && !fs::is_directory(folder)) {
    fs::create_directories(folder, ec);
    if (!ec) fs::permissions(folder, fs::perms::owner_all, fs::perm_options::replace, ec);
    if (ec) throw InputError("--token-file " + file.string() + ": cannot make its folder: " + ec.message());
  }
  const std::string text = failure.empty() ? token : kFailed + failure.substr(0, failure.find('\n'));
  try {
    write_file_atomically(file, text + "\n", 0600);
  } catch (const std::runtime_error& e) {
    throw InputError("--token-file " + file.string() + ": " + e.what());
  }
}

TokenFile read_token_file(const fs::path& file, fs::file_time_type since) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  if (line.rfind(kFailed, 0) != 0) return {line, ""};
  std::error_code ec;
  const fs::file_time_type written = fs::last_write_time(file, ec);
  if (ec || written < since - std::chrono::minutes(1)) return {};
  return {"", line.substr(std::string(kFailed).size())};
}

}  // namespace quartet::runner
