#pragma once

// QUARTET_HD marks index arithmetic that runs on both sides: in device kernels, and in
// host unit tests that check it on machines without a GPU. The headers that use it hold
// no CUDA types, so plain C++ compilers read them too.
#if defined(__CUDACC__)
#define QUARTET_HD __host__ __device__ inline
#else
#define QUARTET_HD inline
#endif
