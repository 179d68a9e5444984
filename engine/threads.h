#pragma once

namespace quartet::engine {

// The process-wide number of compute threads, honoured by Eigen, OpenMP loops and any
// BLAS. Default: QUARTET_THREADS if set, else the machine's cores. Set it once, early:
// N ranks on N cores should each ask for one.
// More compute threads than this are refused: OpenMP cannot start tens of thousands.
inline constexpr int kMaxComputeThreads = 1024;

void set_compute_threads(int n);  // requires 1 <= n <= kMaxComputeThreads
int compute_threads();

}  // namespace quartet::engine
