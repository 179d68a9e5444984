// `quartet phantom` through the `quartet` binary: the Decathlon folder it writes, and its
// bad arguments. Real processes, so labelled multirank and run serially.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/cli/cli_util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using cli_util::expect_exit2_with;
using cli_util::file_bytes;
using cli_util::quartet;
using cli_util::Result;

class PhantomCli : public cli_util::FolderTest {
 protected:
  PhantomCli() : FolderTest("cli_phantom") {}
};

TEST_F(PhantomCli, WritesTheDecathlonLayout) {
  const fs::path out = dir_ / "ct";
  const Result r = quartet({"phantom", "--kind", "ct", "--count", "2", "--size", "32", "--out", out.string(),
                            "--seed", "7"}, dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("wrote 2 ct phantoms of 32^3 voxels (seed 7)"), std::string::npos) << r.out;
  const json ds = json::parse(file_bytes(out / "dataset.json"));
  EXPECT_EQ(ds["numTraining"], 2);
  EXPECT_EQ(ds["modality"]["0"], "CT");
  for (const json& c : ds["training"]) {
    EXPECT_TRUE(fs::exists(out / c["image"].get<std::string>())) << c.dump();
    EXPECT_TRUE(fs::exists(out / c["label"].get<std::string>())) << c.dump();
  }
}

TEST_F(PhantomCli, BadArgumentsExitWith2AndOneMessage) {
  const std::string out = (dir_ / "x").string();
  expect_exit2_with(quartet({"phantom", "--kind", "pet", "--count", "2", "--size", "32", "--out", out}, dir_),
                    "--kind: ");
  expect_exit2_with(quartet({"phantom", "--kind", "ct", "--count", "0", "--size", "32", "--out", out}, dir_),
                    "--count: expected 1 to 100000 phantoms, got 0");
  expect_exit2_with(quartet({"phantom", "--kind", "mri", "--count", "1", "--size", "16", "--out", out}, dir_),
                    "--size: expected 32 to 256 voxels per side, got 16");
  expect_exit2_with(quartet({"phantom", "--kind", "ct", "--count", "1", "--size", "32"}, dir_), "--out");
  fs::create_directories(dir_ / "full");
  std::ofstream(dir_ / "full" / "keep.txt") << "mine";
  expect_exit2_with(
      quartet({"phantom", "--kind", "ct", "--count", "1", "--size", "32", "--out", (dir_ / "full").string()}, dir_),
      "--out: ");
  EXPECT_EQ(file_bytes(dir_ / "full" / "keep.txt"), "mine") << "a non-empty folder is never touched";
}

}  // namespace
