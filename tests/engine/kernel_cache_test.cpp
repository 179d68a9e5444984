// The per-machine kernel table: processes that share its file pick the same kernels, one
// measuring while the others wait; a corrupt or foreign file is set aside with a warning.
// Each process is quartet_kernel_cache_helper, started afresh (its table empty) over a
// file of the test's own (QUARTET_KERNEL_CACHE).

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/temp_folder.h"

#ifndef QUARTET_KERNEL_CACHE_HELPER
#error "QUARTET_KERNEL_CACHE_HELPER must name the helper binary"
#endif

namespace quartet::engine {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class KernelCache : public test_util::TempFolderTest {
 protected:
  KernelCache() : TempFolderTest("kernel_cache") {}

  fs::path cache() const { return dir_ / "kernels.json"; }

  // Starts the helper with `args`, the test's table (or `table`), its output to
  // name.out and its stderr to name.err.
  pid_t start(const std::string& name, std::vector<std::string> args, const fs::path& table = {}) {
    const std::string path = (table.empty() ? cache() : table).string();
    const pid_t pid = fork();
    if (pid == 0) {
      setenv("QUARTET_KERNEL_CACHE", path.c_str(), 1);
      unsetenv("QUARTET_CONV_KERNEL");
      if (!std::freopen((dir_ / (name + ".out")).c_str(), "w", stdout) ||
          !std::freopen((dir_ / (name + ".err")).c_str(), "w", stderr))
        _exit(3);
      args.insert(args.begin(), QUARTET_KERNEL_CACHE_HELPER);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    return pid;
  }
  std::string finish(pid_t pid, const std::string& name) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << name << ": " << read(dir_ / (name + ".err"));
    return read(dir_ / (name + ".out"));
  }
  std::string run(const std::string& name, const std::vector<std::string>& args, const fs::path& table = {}) {
    return finish(start(name, args, table), name);
  }
  std::string err(const std::string& name) const { return read(dir_ / (name + ".err")); }
};

// The helper chooses between "slow" (the rule's) and "fast"; its own timings say which
// is faster. It prints the kernel and how many times it ran a candidate.

TEST_F(KernelCache, ALaterProcessReadsTheFirstOnesChoiceWithoutMeasuring) {
  // Two kernels, each a warm-up run and three timed ones.
  EXPECT_EQ(run("first", {"choose", "fast", "0"}), "fast/8");
  // This process's timings would say "slow": it reads the table instead.
  EXPECT_EQ(run("second", {"choose", "slow", "0"}), "fast/0");
  const json j = json::parse(read(cache()));
  EXPECT_EQ(j["kernels"]["conv|x (1, 2) test shape"]["kernel"], "fast");
  EXPECT_EQ(j["kernels"]["conv|x (1, 2) test shape"]["seconds"].size(), 2u);
}

// Two processes meeting a new shape at once: one measures while the other waits for it,
// and both take the same kernel, though their own timings disagree.
TEST_F(KernelCache, ProcessesMeetingAShapeAtOnceAgree) {
  const pid_t a = start("a", {"choose", "fast", "20"});
  const pid_t b = start("b", {"choose", "slow", "20"});
  const std::string ra = finish(a, "a"), rb = finish(b, "b");
  ASSERT_NE(ra.find('/'), std::string::npos) << ra;
  ASSERT_NE(rb.find('/'), std::string::npos) << rb;
  EXPECT_EQ(ra.substr(0, ra.find('/')), rb.substr(0, rb.find('/'))) << ra << " " << rb;
  EXPECT_TRUE((ra.substr(ra.find('/')) == "/0") != (rb.substr(rb.find('/')) == "/0")) << "one measures: " << ra << " " << rb;
}

TEST_F(KernelCache, ACorruptOrForeignFileIsSetAsideWithAWarning) {
  std::ofstream(cache()) << "{\"machine\": ";
  EXPECT_EQ(run("corrupt", {"choose", "fast", "0"}), "fast/8");
  EXPECT_NE(err("corrupt").find("does not parse; it is set aside"), std::string::npos) << err("corrupt");
  EXPECT_EQ(json::parse(read(cache()))["kernels"].size(), 1u);  // written anew

  std::ofstream(cache()) << R"({"machine": "another cpu | avx2 | another build",
                               "kernels": {"conv|x (1, 2) test shape": {"kernel": "slow"}}})";
  EXPECT_EQ(run("foreign", {"choose", "fast", "0"}), "fast/8");
  EXPECT_NE(err("foreign").find("is another machine's or build's"), std::string::npos) << err("foreign");
}

// No file can be kept: every process takes the rule's kernel (the first candidate), so
// they still agree, and says why.
TEST_F(KernelCache, WithoutAWritableFolderEveryProcessTakesTheRule) {
  std::ofstream(dir_ / "a-file") << "not a folder";
  EXPECT_EQ(run("nofolder", {"choose", "fast", "0"}, dir_ / "a-file" / "kernels.json"), "slow/0");
  EXPECT_NE(err("nofolder").find("every process uses the fixed rule"), std::string::npos) << err("nofolder");
}

// A convolution under the default policy: the process that meets its shape first
// measures it (source "measured"), a later one reads the table ("cache"), and both
// compute bit for bit the same output.
TEST_F(KernelCache, TwoProcessesRunningAConvPickTheSameKernelAndTheSameBits) {
  const std::string first = run("first", {"conv", (dir_ / "first.bin").string()});
  const std::string second = run("second", {"conv", (dir_ / "second.bin").string()});
  const std::string kernel = first.substr(0, first.find(' '));
  EXPECT_EQ(first, kernel + " measured");
  EXPECT_EQ(second, kernel + " cache");
  EXPECT_EQ(read(dir_ / "first.bin"), read(dir_ / "second.bin"));
}

}  // namespace
}  // namespace quartet::engine
