#pragma once

// A fresh folder per test, shared by the fixtures that write files: made before each
// test under GoogleTest's temporary folder, removed after it.

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace quartet::test_util {

// dir_ = <TempDir>/<prefix>_<pid>_<suite>_<test>: the pid keeps concurrent ctest
// processes apart, the names keep the tests of one binary apart.
class TempFolderTest : public ::testing::Test {
 protected:
  explicit TempFolderTest(std::string prefix) : prefix_(std::move(prefix)) {}

  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "_" + info->name();
    for (char& c : name)
      if (c == '/') c = '_';  // parameterised tests are named Prefix/Suite.Name/0
    dir_ = std::filesystem::path(::testing::TempDir()) / (prefix_ + "_" + std::to_string(::getpid()) + "_" + name);
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;

 private:
  std::string prefix_;
};

}  // namespace quartet::test_util
