#include <gtest/gtest.h>

#include "tests/cli/cli_util.h"
#include "tests/temp_folder.h"

namespace {

using namespace cli_util;

class CalibrateCommand : public quartet::test_util::TempFolderTest {
 protected:
  CalibrateCommand() : TempFolderTest("quartet_calibrate") {}
};

// Timings are not checked (the machine is shared): the file is a profile plan reads.
TEST_F(CalibrateCommand, WritesAProfileThatPlanReads) {
  const fs::path out = dir_ / "here.json";
  const Result r = cli_util::quartet({"calibrate", "--quick", "--out", out.string()}, dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(file_bytes(out));
  EXPECT_EQ(j["name"], "this-machine");
  EXPECT_EQ(j["device"]["kind"], "cpu");
  EXPECT_GT(j["device"]["peak_tflops"]["fp32"].get<double>(), 0.0);
  EXPECT_GT(j["inter_link"]["bandwidth_gbit_s"].get<double>(), 0.0);
  for (const char* op : {"relu", "max_pool", "gelu", "layer_norm", "cross_entropy"})
    EXPECT_GT(j["device"]["elementwise_ops"][op]["ns"].get<double>(), 0.0) << op;
  const fs::path spec = fs::path(QUARTET_TEST_DATA_DIR).parent_path().parent_path() / "experiments/quickstart.json";
  const Result plan = cli_util::quartet({"plan", spec.string(), "--cluster", out.string()}, dir_);
  EXPECT_EQ(plan.code, 0) << plan.out;
}

TEST_F(CalibrateCommand, AnUnwritableOutputIsRefused) {
  expect_exit2_with(cli_util::quartet({"calibrate", "--quick", "--out", (dir_ / "missing/x.json").string()}, dir_),
                    "--out: " + (dir_ / "missing/x.json").string() + " cannot be written");
}

}  // namespace
