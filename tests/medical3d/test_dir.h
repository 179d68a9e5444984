#pragma once

// Shared by the medical3d tests: a fresh folder per test, and exception messages.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/temp_folder.h"

namespace quartet::medical3d::testing {

namespace fs = std::filesystem;

// A fresh folder per test (tests/temp_folder.h), with a path helper.
class TestDir : public test_util::TempFolderTest {
 protected:
  TestDir() : TempFolderTest("quartet_medical3d") {}
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
};

// The message of the exception of type E that fn throws ("" and a failure otherwise).
template <class E = std::exception, class Fn>
std::string thrown_message(Fn fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw the wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace quartet::medical3d::testing
