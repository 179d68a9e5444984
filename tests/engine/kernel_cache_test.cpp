// The per-machine kernel table: processes that share its file pick the same kernels, one
// measuring while the others wait; a corrupt or foreign file is set aside with a warning.
// Each scenario runs in child processes (fork), whose table starts empty, over a file of
// the test's own (QUARTET_KERNEL_CACHE).

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/cpu/conv.h"
#include "engine/cpu/conv_kernel.h"
#include "engine/cpu/kernel_cache.h"
#include "tests/engine/gradcheck.h"
#include "tests/temp_folder.h"

namespace quartet::engine {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class KernelCache : public test_util::TempFolderTest {
 protected:
  KernelCache() : TempFolderTest("kernel_cache") {}

  fs::path cache() const { return dir_ / "kernels.json"; }

  // Runs body in a child process with the test's table and its stderr to `log`; the
  // child writes what body returns to `out`. Returns the child's pid.
  pid_t start(const std::string& name, const std::function<std::string()>& body) {
    const pid_t pid = fork();
    if (pid == 0) {
      setenv("QUARTET_KERNEL_CACHE", cache().c_str(), 1);
      unsetenv("QUARTET_CONV_KERNEL");
      std::freopen((dir_ / (name + ".err")).c_str(), "w", stderr);
      std::string result;
      try {
        result = body();
      } catch (const std::exception& e) {
        result = std::string("error: ") + e.what();
      }
      std::ofstream(dir_ / (name + ".out")) << result;
      std::fflush(nullptr);
      _exit(0);
    }
    return pid;
  }
  std::string finish(pid_t pid, const std::string& name) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << name;
    return read(dir_ / (name + ".out"));
  }
  std::string run(const std::string& name, const std::function<std::string()>& body) {
    return finish(start(name, body), name);
  }
  static std::string read(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
};

// A choice among "slow" (the rule's) and "fast" whose timings say `fastest` is fastest;
// returns "kernel/times measured".
std::string choose(const std::string& fastest, std::chrono::milliseconds each = std::chrono::milliseconds(0)) {
  int calls = 0;
  const std::string k = cpu::cached_kernel("conv", "x (1, 2) test shape", {"slow", "fast"}, [&](const std::string& c) {
    ++calls;
    std::this_thread::sleep_for(each);
    return c == fastest ? 0.001 : 0.002;
  });
  return k + "/" + std::to_string(calls);
}

TEST_F(KernelCache, ALaterProcessReadsTheFirstOnesChoiceWithoutMeasuring) {
  EXPECT_EQ(run("first", [] { return choose("fast"); }), "fast/6");  // two kernels, a warm-up and two timed runs each
  // This process's timings would say "slow": it reads the table instead.
  EXPECT_EQ(run("second", [] { return choose("slow"); }), "fast/0");
  const json j = json::parse(read(cache()));
  EXPECT_EQ(j["kernels"]["conv|x (1, 2) test shape"]["kernel"], "fast");
  EXPECT_EQ(j["kernels"]["conv|x (1, 2) test shape"]["seconds"].size(), 2u);
}

// Two processes meeting a new shape at once: one measures while the other waits for it,
// and both take the same kernel, though their own timings disagree.
TEST_F(KernelCache, ProcessesMeetingAShapeAtOnceAgree) {
  const pid_t a = start("a", [] { return choose("fast", std::chrono::milliseconds(20)); });
  const pid_t b = start("b", [] { return choose("slow", std::chrono::milliseconds(20)); });
  const std::string ra = finish(a, "a"), rb = finish(b, "b");
  EXPECT_EQ(ra.substr(0, ra.find('/')), rb.substr(0, rb.find('/'))) << ra << " " << rb;
  EXPECT_TRUE((ra.substr(ra.find('/')) == "/0") != (rb.substr(rb.find('/')) == "/0")) << "one measures: " << ra << " " << rb;
}

TEST_F(KernelCache, ACorruptOrForeignFileIsSetAsideWithAWarning) {
  std::ofstream(cache()) << "{\"machine\": ";
  EXPECT_EQ(run("corrupt", [] { return choose("fast"); }), "fast/6");
  EXPECT_NE(read(dir_ / "corrupt.err").find("does not parse; it is set aside"), std::string::npos)
      << read(dir_ / "corrupt.err");
  EXPECT_EQ(json::parse(read(cache()))["kernels"].size(), 1u);  // written anew

  std::ofstream(cache()) << R"({"machine": "another cpu | avx2 | another build",
                               "kernels": {"conv|x (1, 2) test shape": {"kernel": "slow"}}})";
  EXPECT_EQ(run("foreign", [] { return choose("fast"); }), "fast/6");
  EXPECT_NE(read(dir_ / "foreign.err").find("is another machine's or build's"), std::string::npos)
      << read(dir_ / "foreign.err");
}

// No file can be kept: every process takes the rule's kernel (the first candidate), so
// they still agree, and says why.
TEST_F(KernelCache, WithoutAWritableFolderEveryProcessTakesTheRule) {
  std::ofstream(dir_ / "a-file") << "not a folder";
  const std::string result = run("nofolder", [this] {
    setenv("QUARTET_KERNEL_CACHE", (dir_ / "a-file" / "kernels.json").c_str(), 1);
    return choose("fast");
  });
  EXPECT_EQ(result, "slow/0");
  EXPECT_NE(read(dir_ / "nofolder.err").find("every process uses the fixed rule"), std::string::npos)
      << read(dir_ / "nofolder.err");
}

// A convolution under the default policy: the process that meets its shape first
// measures it (source "measured"), a later one reads the table ("cache"), and both
// compute bit for bit the same output.
TEST_F(KernelCache, TwoProcessesRunningAConvPickTheSameKernelAndTheSameBits) {
  const auto conv = [this](const std::string& name) {
    return [this, name] {
      const Tensor x = testing::random_tensor({2, 16, 6, 7, 5}, 1), w = testing::random_tensor({16, 16, 3, 3, 3}, 2);
      Tensor out = Tensor::empty({2, 16, 6, 7, 5});
      cpu::conv_forward(x, w, Tensor(), {.stride = {1, 1, 1}, .padding = {1, 1, 1}, .dilation = {1, 1, 1}}, out);
      const std::vector<float> v = out.to_vector();
      std::ofstream(dir_ / (name + ".bin"), std::ios::binary)
          .write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
      const std::vector<cpu::KernelChoice> c = cpu::conv_kernel_choices();
      return c.size() == 1 ? c[0].kernel + " " + c[0].source : "choices: " + std::to_string(c.size());
    };
  };
  const std::string first = run("first", conv("first")), second = run("second", conv("second"));
  const std::string kernel = first.substr(0, first.find(' '));
  EXPECT_EQ(first, kernel + " measured");
  EXPECT_EQ(second, kernel + " cache");
  EXPECT_EQ(read(dir_ / "first.bin"), read(dir_ / "second.bin"));
}

}  // namespace
}  // namespace quartet::engine
