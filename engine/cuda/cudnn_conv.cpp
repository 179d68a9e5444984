#include "engine/cuda/cudnn_conv.h"

#include <climits>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/cuda/runtime.h"

namespace quartet::engine::cuda {
namespace {

// Where an error names the conv: "x (2, 3, 1, 9), w (4, 3, 1, 3), stride (1, 2), ...".
std::string describe(const ConvGeometry& g) {
  auto list = [&](int64_t a, int64_t b, const int64_t* s) {
    std::string t = "(";
    if (a >= 0) t += std::to_string(a) + ", " + std::to_string(b) + ", ";
    for (int i = 0; i < g.spatial; ++i) t += std::to_string(s[i]) + (i + 1 < g.spatial ? ", " : "");
    return t + ")";
  };
  return "x " + list(g.n, g.c_in, g.in) + ", w " + list(g.c_out, g.c_in, g.k) + ", y " + list(g.n, g.c_out, g.out) +
         ", stride " + list(-1, 0, g.stride) + ", padding " + list(-1, 0, g.pad) + ", dilation " +
         list(-1, 0, g.dilation);
}

int cudnn_int(int64_t v, const ConvGeometry& g) {
  if (v < 0 || v > INT_MAX) throw std::runtime_error("conv: a size exceeds cuDNN's int range: " + describe(g));
  return static_cast<int>(v);
}

// A cuDNN descriptor, destroyed with its owner (also when a later setter throws).
template <class T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
struct Owned {
  T h = nullptr;
  Owned() { QUARTET_CUDA_CHECK(Create(&h)); }
  ~Owned() {
    if (h) Destroy(h);
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
};
using TensorDesc = Owned<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc = Owned<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc =
    Owned<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;

// Packed (n, c, *spatial) float tensor.
void set_tensor(cudnnTensorDescriptor_t d, const ConvGeometry& g, int64_t n, int64_t c, const int64_t* spatial) {
  const int rank = g.spatial + 2;
  int dims[5], strides[5];
  dims[0] = cudnn_int(n, g);
  dims[1] = cudnn_int(c, g);
  for (int i = 0; i < g.spatial; ++i) dims[2 + i] = cudnn_int(spatial[i], g);
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    strides[i] = cudnn_int(stride, g);
    stride *= dims[i];
  }
  QUARTET_CUDA_CHECK(cudnnSetTensorNdDescriptor(d, CUDNN_DATA_FLOAT, rank, dims, strides));
}

// The four descriptors of one conv: x, the filter w, the conv itself, y.
struct Descriptors {
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;

  explicit Descriptors(const ConvGeometry& g) {
    set_tensor(x.h, g, g.n, g.c_in, g.in);
    set_tensor(y.h, g, g.n, g.c_out, g.out);
    int dims[5] = {cudnn_int(g.c_out, g), cudnn_int(g.c_in, g), 1, 1, 1};
    int pad[3], stride[3], dilation[3];
    for (int i = 0; i < g.spatial; ++i) {
      dims[2 + i] = cudnn_int(g.k[i], g);
      pad[i] = cudnn_int(g.pad[i], g);
      stride[i] = cudnn_int(g.stride[i], g);
      dilation[i] = cudnn_int(g.dilation[i], g);
    }
    QUARTET_CUDA_CHECK(cudnnSetFilterNdDescriptor(w.h, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, g.spatial + 2, dims));
    // The engine's conv is PyTorch's: a cross-correlation, accumulated in fp32.
    QUARTET_CUDA_CHECK(cudnnSetConvolutionNdDescriptor(conv.h, g.spatial, pad, stride, dilation,
                                                       CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  }
};

// ---- the three passes, as the algorithm search sees them ----

struct Forward {
  using Perf = cudnnConvolutionFwdAlgoPerf_t;
  using Algo = cudnnConvolutionFwdAlgo_t;
  static constexpr int kPass = 0;
  static constexpr const char* kName = "forward";
  static constexpr bool kDeterministicFirst = false;  // every forward algorithm is
  static constexpr Algo kFallback = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  static int max_count(cudnnHandle_t h) {
    int n = 0;
    QUARTET_CUDA_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &n));
    return n;
  }
  static cudnnStatus_t rank(cudnnHandle_t h, const Descriptors& d, int requested, int* returned, Perf* perf) {
    return cudnnGetConvolutionForwardAlgorithm_v7(h, d.x.h, d.w.h, d.conv.h, d.y.h, requested, returned, perf);
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, const Descriptors& d, Algo a, size_t* bytes) {
    return cudnnGetConvolutionForwardWorkspaceSize(h, d.x.h, d.w.h, d.conv.h, d.y.h, a, bytes);
  }
};

struct BackwardData {
  using Perf = cudnnConvolutionBwdDataAlgoPerf_t;
  using Algo = cudnnConvolutionBwdDataAlgo_t;
  static constexpr int kPass = 1;
  static constexpr const char* kName = "backward data";
  static constexpr bool kDeterministicFirst = true;
  static constexpr Algo kFallback = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  static int max_count(cudnnHandle_t h) {
    int n = 0;
    QUARTET_CUDA_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &n));
    return n;
  }
  static cudnnStatus_t rank(cudnnHandle_t h, const Descriptors& d, int requested, int* returned, Perf* perf) {
    return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w.h, d.y.h, d.conv.h, d.x.h, requested, returned, perf);
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, const Descriptors& d, Algo a, size_t* bytes) {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w.h, d.y.h, d.conv.h, d.x.h, a, bytes);
  }
};

struct BackwardFilter {
  using Perf = cudnnConvolutionBwdFilterAlgoPerf_t;
  using Algo = cudnnConvolutionBwdFilterAlgo_t;
  static constexpr int kPass = 2;
  static constexpr const char* kName = "backward filter";
  static constexpr bool kDeterministicFirst = true;
  static constexpr Algo kFallback = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  static int max_count(cudnnHandle_t h) {
    int n = 0;
    QUARTET_CUDA_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &n));
    return n;
  }
  static cudnnStatus_t rank(cudnnHandle_t h, const Descriptors& d, int requested, int* returned, Perf* perf) {
    return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x.h, d.y.h, d.conv.h, d.w.h, requested, returned, perf);
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, const Descriptors& d, Algo a, size_t* bytes) {
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x.h, d.y.h, d.conv.h, d.w.h, a, bytes);
  }
};

struct Candidate {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

bool tensor_op_math(cudnnMathType_t m) {
  return m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

// The algorithms to try, in order: cuDNN's heuristic ranking of those it reports as
// usable (deterministic ones first when the pass asks; without TF32 none that needs
// tensor-op math), then the pass's plain fallback.
template <class Pass>
std::vector<Candidate> rank_algorithms(cudnnHandle_t h, const Descriptors& d, bool tf32) {
  const int requested = Pass::max_count(h);
  std::vector<typename Pass::Perf> perf(static_cast<size_t>(requested > 0 ? requested : 1));
  int returned = 0;
  // A failed query leaves the fallback alone to try.
  if (Pass::rank(h, d, requested, &returned, perf.data()) != CUDNN_STATUS_SUCCESS) returned = 0;
  std::vector<Candidate> first, rest;
  bool has_fallback = false;
  for (int i = 0; i < returned; ++i) {
    const typename Pass::Perf& p = perf[static_cast<size_t>(i)];
    if (p.status != CUDNN_STATUS_SUCCESS || (!tf32 && tensor_op_math(p.mathType))) continue;
    const bool deterministic = p.determinism == CUDNN_DETERMINISTIC;
    (Pass::kDeterministicFirst && !deterministic ? rest : first).push_back({static_cast<int>(p.algo), p.mathType});
    has_fallback = has_fallback || p.algo == Pass::kFallback;
  }
  first.insert(first.end(), rest.begin(), rest.end());
  if (!has_fallback) first.push_back({static_cast<int>(Pass::kFallback), tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH});
  return first;
}

// Rankings by pass, device, math mode and geometry: the heuristic query costs more than
// a small conv, and a training step repeats the same shapes.
template <class Pass>
const std::vector<Candidate>& ranked(const DeviceContext& ctx, const Descriptors& d, const ConvGeometry& g,
                                     bool tf32) {
  static std::mutex mutex;
  static std::map<std::vector<int64_t>, std::vector<Candidate>> cache;
  std::vector<int64_t> key{ctx.index, tf32 ? 1 : 0, g.spatial, g.n, g.c_in, g.c_out};
  for (int i = 0; i < 3; ++i)
    key.insert(key.end(), {g.in[i], g.k[i], g.out[i], g.stride[i], g.pad[i], g.dilation[i]});
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, rank_algorithms<Pass>(ctx.cudnn, d, tf32)).first;
  return it->second;  // map nodes stay put; entries are never changed or erased
}

// Runs one pass with the first candidate whose workspace can be had and that cuDNN
// accepts. run(descriptors, algo, workspace, bytes) issues the cuDNN call and returns
// its status. Errors name the pass and the geometry.
template <class Pass, class Run>
void run_pass(const Device& device, const ConvGeometry& g, Run&& run) {
  const std::string where = std::string("conv ") + Pass::kName + " (" + describe(g) + ")";
  std::string tried;
  try {
    DeviceContext& ctx = context(device);
    const bool tf32 = allow_tf32();
    Descriptors d(g);
    // FMA math keeps fp32 exact: cuDNN's default lets Ampere and later round to TF32.
    const cudnnMathType_t base = tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    QUARTET_CUDA_CHECK(cudnnSetConvolutionMathType(d.conv.h, base));
    for (const Candidate& c : ranked<Pass>(ctx, d, g, tf32)) {
      QUARTET_CUDA_CHECK(cudnnSetConvolutionMathType(d.conv.h, tf32 ? c.math : base));
      const auto algo = static_cast<typename Pass::Algo>(c.algo);
      tried += " [algo " + std::to_string(c.algo) + ": ";
      size_t bytes = 0;
      cudnnStatus_t status = Pass::workspace(ctx.cudnn, d, algo, &bytes);
      if (status != CUDNN_STATUS_SUCCESS) {
        tried += std::string("workspace query ") + cudnnGetErrorString(status) + "]";
        continue;
      }
      std::optional<Workspace> workspace;
      try {
        workspace.emplace(device, bytes);
      } catch (const std::exception& e) {
        tried += std::to_string(bytes) + " bytes of workspace: " + e.what() + "]";
        continue;
      }
      status = run(d, algo, workspace->data(), bytes);
      if (status == CUDNN_STATUS_SUCCESS) return;
      tried += std::string(cudnnGetErrorString(status)) + "]";
      // An algorithm the heuristics offered may still refuse this case; anything else is
      // a real failure.
      if (CUDNN_STATUS_CATEGORY(status) != CUDNN_STATUS_NOT_SUPPORTED) break;
    }
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(where + ": " + e.what() + tried);
  }
  throw std::runtime_error(where + ": no cuDNN algorithm ran:" + tried);
}

}  // namespace

void cudnn_conv_forward(const Device& device, const ConvGeometry& g, const float* x, const float* w, float* y) {
  const float one = 1.0f, zero = 0.0f;
  run_pass<Forward>(device, g, [&](const Descriptors& d, Forward::Algo algo, void* ws, size_t bytes) {
    return cudnnConvolutionForward(context(device).cudnn, &one, d.x.h, x, d.w.h, w, d.conv.h, algo, ws, bytes,
                                   &zero, d.y.h, y);
  });
}

void cudnn_conv_backward_data(const Device& device, const ConvGeometry& g, const float* w, const float* dy,
                              float* dx) {
  const float one = 1.0f, zero = 0.0f;
  run_pass<BackwardData>(device, g, [&](const Descriptors& d, BackwardData::Algo algo, void* ws, size_t bytes) {
    return cudnnConvolutionBackwardData(context(device).cudnn, &one, d.w.h, w, d.y.h, dy, d.conv.h, algo, ws,
                                        bytes, &zero, d.x.h, dx);
  });
}

void cudnn_conv_backward_filter(const Device& device, const ConvGeometry& g, const float* x, const float* dy,
                                float* dw) {
  const float one = 1.0f, zero = 0.0f;
  run_pass<BackwardFilter>(device, g,
                           [&](const Descriptors& d, BackwardFilter::Algo algo, void* ws, size_t bytes) {
                             return cudnnConvolutionBackwardFilter(context(device).cudnn, &one, d.x.h, x, d.y.h, dy,
                                                                   d.conv.h, algo, ws, bytes, &zero, d.w.h, dw);
                           });
}

}  // namespace quartet::engine::cuda
