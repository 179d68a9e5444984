// cuBLAS is opened on first use, not at load: a process of a CUDA build that never uses
// a GPU does not carry the library (and its ~210 MB of resident memory). Needs no GPU.

#include "engine/cuda/cublas_loader.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace quartet::engine::cuda {
namespace {

bool mapped(const std::string& library) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(library) != std::string::npos) return true;
  return false;
}

TEST(CublasLoader, LibraryIsNotMappedUntilFirstUse) {
  EXPECT_FALSE(mapped("libcublas"));
  EXPECT_NE(cublas().create, nullptr);
  EXPECT_TRUE(mapped("libcublas"));
}

TEST(CublasLoader, ResolvesEveryEntryPointWithoutAGpu) {
  const Cublas& c = cublas();
  EXPECT_NE(c.create, nullptr);
  EXPECT_NE(c.set_stream, nullptr);
  EXPECT_NE(c.set_math_mode, nullptr);
  EXPECT_NE(c.gemm_ex, nullptr);
  EXPECT_NE(c.sscal, nullptr);
  EXPECT_STREQ(c.status_name(CUBLAS_STATUS_NOT_INITIALIZED), "CUBLAS_STATUS_NOT_INITIALIZED");
  EXPECT_NE(std::string(c.status_string(CUBLAS_STATUS_NOT_INITIALIZED)), "");
}

}  // namespace
}  // namespace quartet::engine::cuda
