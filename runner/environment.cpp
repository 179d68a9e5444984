#include "runner/environment.h"

#include <sys/utsname.h>

#include <CLI/Version.hpp>
#include <Eigen/Core>
#include <fstream>
#include <string>
#include <thread>

#include "engine/cpu/conv_kernel.h"
#include "engine/threads.h"
#include "runner/build_info.h"

namespace quartet::runner {

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown";
}

}  // namespace

nlohmann::json environment() {
  utsname u{};
  uname(&u);
  return {
      {"quartet_commit", kGitCommit},
      {"build_type", kBuildType},
      {"compiler", kCompiler},
      {"cxx_flags", kCxxFlags},
      {"host", u.nodename},
      {"os", std::string(u.sysname) + " " + u.release},
      {"cpu", cpu_model()},
      {"cores", std::thread::hardware_concurrency()},
      {"compute_threads_default", engine::compute_threads()},
      // How CPU convolutions pick their kernel (QUARTET_CONV_KERNEL); under "measure" each
      // process's choices are in its evaluation records ("conv_kernels").
      {"conv_kernel", engine::cpu::conv_kernel_policy()},
      {"libraries",
       {{"eigen", std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) + "." +
                      std::to_string(EIGEN_MINOR_VERSION)},
        {"nlohmann_json", std::to_string(NLOHMANN_JSON_VERSION_MAJOR) + "." +
                              std::to_string(NLOHMANN_JSON_VERSION_MINOR) + "." +
                              std::to_string(NLOHMANN_JSON_VERSION_PATCH)},
        {"cli11", CLI11_VERSION}}},
  };
}

}  // namespace quartet::runner
