#pragma once

// The committed run folder tests/data/gui/tiny-run (made by a real run of every regime;
// tests/data/gui/README.md), scratch copies of it to corrupt or to report into, and what
// a report leaves untouched.

#include <filesystem>
#include <cstdint>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#ifndef QUARTET_TEST_DATA_DIR
#error "QUARTET_TEST_DATA_DIR must name tests/data"
#endif

namespace quartet::test_util {

inline std::filesystem::path fixture_run() {
  return std::filesystem::path(QUARTET_TEST_DATA_DIR) / "gui" / "tiny-run";
}
inline std::filesystem::path fixture_spec() {
  return std::filesystem::path(QUARTET_TEST_DATA_DIR) / "gui" / "tiny-run.spec.json";
}

// A copy of the fixture run under `dir`, to corrupt or to report into.
inline std::filesystem::path copy_fixture(const std::filesystem::path& dir) {
  const std::filesystem::path to = dir / "tiny-run";
  std::filesystem::copy(fixture_run(), to, std::filesystem::copy_options::recursive);
  return to;
}

// Every file under `dir` except those under report/, with its size: what a report must
// leave as it was.
inline std::set<std::pair<std::string, uintmax_t>> files_outside_report(const std::filesystem::path& dir) {
  std::set<std::pair<std::string, uintmax_t>> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    const std::string rel = std::filesystem::relative(e.path(), dir).string();
    if (rel.rfind("report", 0) == 0) continue;
    out.insert({rel, e.is_regular_file() ? e.file_size() : 0});
  }
  return out;
}

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

}  // namespace quartet::test_util
