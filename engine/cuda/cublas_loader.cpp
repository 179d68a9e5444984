#include "engine/cuda/cublas_loader.h"

#include <dlfcn.h>

#include <stdexcept>
#include <string>

namespace quartet::engine::cuda {
namespace {

void* open_library() {
  std::string reasons;
  for (const char* name : {QUARTET_CUBLAS_SONAME, QUARTET_CUBLAS_PATH}) {
    if (void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return handle;
    const char* why = dlerror();
    reasons += std::string(reasons.empty() ? "" : "; ") + (why ? why : name);
  }
  throw std::runtime_error("cuBLAS: cannot open " QUARTET_CUBLAS_SONAME ": " + reasons);
}

template <class Fn>
void resolve(void* handle, Fn& fn, const char* symbol) {
  fn = reinterpret_cast<Fn>(dlsym(handle, symbol));
  if (!fn) throw std::runtime_error(std::string("cuBLAS: " QUARTET_CUBLAS_SONAME " lacks ") + symbol);
}

Cublas load() {
  void* handle = open_library();  // kept open for the process's life
  Cublas c;
  resolve(handle, c.create, "cublasCreate_v2");
  resolve(handle, c.set_stream, "cublasSetStream_v2");
  resolve(handle, c.set_math_mode, "cublasSetMathMode");
  resolve(handle, c.gemm_ex, "cublasGemmEx");
  resolve(handle, c.sscal, "cublasSscal_v2");
  resolve(handle, c.status_name, "cublasGetStatusName");
  resolve(handle, c.status_string, "cublasGetStatusString");
  return c;
}

}  // namespace

const Cublas& cublas() {
  static const Cublas c = load();
  return c;
}

}  // namespace quartet::engine::cuda
