#pragma once

// cuBLAS, opened on first use instead of linked. Loading libcublas (and the libcublasLt
// it needs) costs a process about 210 MB of resident memory before main() runs (CUDA 13:
// an empty program linked to it peaks at 212 MB, against 3 MB unlinked), which every
// CPU-only process of a CUDA build would pay and show in its rss figures. cuDNN, the CUDA
// runtime and NCCL cost a few MB and stay linked.

#include <cublas_v2.h>

namespace quartet::engine::cuda {

// The few cuBLAS entry points the backend calls (cublas_v2.h's names map to these).
struct Cublas {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  // cublasGemmEx is overloaded in C++ (an inline cudaDataType_t form); this is the exported one.
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  decltype(&cublasSscal_v2) sscal = nullptr;
  decltype(&cublasGetStatusName) status_name = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

// Opens the library once (by its soname, then by the path it was built against) and
// resolves every entry point; thread-safe. Throws std::runtime_error naming the library
// and the loader's reason when it cannot be opened or lacks a symbol.
const Cublas& cublas();

}  // namespace quartet::engine::cuda
