// A run folder on a full disk: every arm fails promptly, naming the cause, whatever its
// regime; nothing hangs. The disk is a tmpfs of 2 MiB in a mount namespace of the run's
// own (unshare -m), which needs root: the test says so and is skipped without it.

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/cli/cli_util.h"

namespace {

namespace fs = std::filesystem;
using cli_util::file_bytes;
using nlohmann::json;

class FullDisk : public quartet::test_util::TempFolderTest {
 protected:
  FullDisk() : TempFolderTest("full_disk") {}
};

// Whether this process may mount a tmpfs in a mount namespace of its own.
bool can_mount_tmpfs(const fs::path& at) {
  fs::create_directories(at);
  const std::string probe = "unshare -m sh -c 'mount -t tmpfs -o size=1m tmpfs \"" + at.string() + "\"' 2>/dev/null";
  return std::system(probe.c_str()) == 0;
}

TEST_F(FullDisk, EveryRegimeFailsPromptlyNamingTheCause) {
  const fs::path mnt = dir_ / "disk";
  if (!can_mount_tmpfs(mnt)) GTEST_SKIP() << "mounting a tmpfs (unshare -m, mount) needs root here";
  const json spec = {
      {"name", "full"},
      {"workload", {{"name", "synthetic"}, {"model", "mlp"}, {"train_samples", 512}, {"test_samples", 128}}},
      {"train", {{"epochs", 2}, {"batch", 32}}},
      {"arms",
       {{{"name", "single"}, {"regime", "single"}},
        {{"name", "ddp"}, {"regime", "data_parallel"}, {"ranks", 2}},
        {{"name", "sl"}, {"regime", "split"}, {"clients", 2}, {"cut", "fc1"}},
        {{"name", "fed"}, {"regime", "federated"}, {"clients", 4}, {"rounds", 5}}}}};
  const fs::path spec_file = dir_ / "spec.json";
  std::ofstream(spec_file) << spec.dump(2);
  // The run's initial weights (0.9 MB) fit; the first checkpoint or final weights do not.
  const std::vector<std::string> disk = {"unshare", "-m", "sh", "-c",
                                         "mount -t tmpfs -o size=2m tmpfs \"$0\" && exec \"$@\"", mnt.string()};
  const fs::path log = dir_ / "run.log";
  const pid_t pid = cli_util::start_quartet({"run", spec_file.string(), "--out", (mnt / "run").string(), "--progress",
                                             "none"},
                                            log, {}, disk);
  const int code = cli_util::wait_exit_within(pid, std::chrono::seconds(180));
  const std::string out = file_bytes(log);
  ASSERT_NE(code, -1) << "the run hung on the full disk:\n" << out;
  EXPECT_EQ(code, 1) << out;
  for (const char* arm : {"single", "ddp", "sl", "fed"})
    EXPECT_NE(out.find(std::string("quartet: ") + arm + ": role "), std::string::npos) << arm << " did not fail:\n" << out;
  EXPECT_NE(out.find("No space left on device"), std::string::npos) << out;
  EXPECT_EQ(out.find("no message"), std::string::npos) << out;
}

}  // namespace
