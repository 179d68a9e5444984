#include "engine/cuda/norm.h"

#include "engine/cuda/norm_index.h"
#include "engine/cuda/runtime.h"
#include "engine/cuda/segment_sum.cuh"

namespace quartet::engine::cuda {
namespace {

#define QUARTET_GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); i += int64_t{blockDim.x} * gridDim.x)

const float* data_or_null(const Tensor& t) { return t.defined() ? t.device_data() : nullptr; }
float* data_or_null(Tensor& t) { return t.defined() ? t.device_data() : nullptr; }

// Scratch double2 values, one per segment.
struct Totals {
  Workspace memory;
  Totals(const Device& device, int64_t n) : memory(device, static_cast<size_t>(n) * sizeof(double2)) {}
  double2* get() const { return static_cast<double2*>(memory.data()); }
};

// ---- batch norm: segments are channels, element j of channel s is x[channel_element] ----

struct ChannelValue {
  const float* x;
  Planes p;
  __device__ double2 operator()(int64_t s, int64_t j) const { return make_double2(x[channel_element(p, s, j)], 0.0); }
};

// (x - shift, (x - shift)^2), the difference taken in double as the CPU does.
struct ShiftedMoments {
  const float* x;
  const float* shift;
  Planes p;
  __device__ double2 operator()(int64_t s, int64_t j) const {
    const double d = static_cast<double>(x[channel_element(p, s, j)]) - static_cast<double>(shift[s]);
    return make_double2(d, d * d);
  }
};

// (dy, dy * (x - mean)), x - mean in float as the CPU has it.
struct GradMoments {
  const float* dy;
  const float* x;
  const float* mean;
  Planes p;
  __device__ double2 operator()(int64_t s, int64_t j) const {
    const int64_t i = channel_element(p, s, j);
    const float xmu = x[i] - mean[s];
    return make_double2(dy[i], static_cast<double>(dy[i]) * static_cast<double>(xmu));
  }
};

__global__ void set_shift(const double2* totals, Planes p, float* shift) {
  QUARTET_GRID_LOOP(c, p.c) shift[c] = static_cast<float>(totals[c].x / static_cast<double>(p.n * p.l));
}

__global__ void store_sums(const double2* totals, Planes p, float* sums) {
  QUARTET_GRID_LOOP(c, p.c) {
    sums[c] = static_cast<float>(totals[c].x);
    sums[p.c + c] = static_cast<float>(totals[c].y);
    sums[2 * p.c + c] = static_cast<float>(p.n * p.l);
  }
}

__global__ void batch_stats(const float* sums, const float* shift, int64_t channels, float momentum, float eps,
                            float* mean, float* invstd, float* running_mean, float* running_var) {
  QUARTET_GRID_LOOP(c, channels) {
    const double count = sums[2 * channels + c];
    const double m1 = sums[c] / count;  // mean of x - shift
    const double var = fmax(sums[channels + c] / count - m1 * m1, 0.0);
    const double mu = shift[c] + m1;
    mean[c] = static_cast<float>(mu);
    invstd[c] = static_cast<float>(1.0 / sqrt(var + eps));
    const double unbiased = var * count / fmax(count - 1.0, 1.0);
    running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] + momentum * mu);
    running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] + momentum * unbiased);
  }
}

__global__ void eval_stats(const float* running_mean, const float* running_var, int64_t channels, float eps,
                           float* mean, float* invstd) {
  QUARTET_GRID_LOOP(c, channels) {
    mean[c] = running_mean[c];
    invstd[c] = static_cast<float>(1.0 / sqrt(static_cast<double>(running_var[c]) + eps));
  }
}

__global__ void apply_kernel(const float* x, const float* mean, const float* invstd, const float* weight,
                             const float* bias, Planes p, float* y, int64_t total) {
  QUARTET_GRID_LOOP(i, total) {
    const int64_t c = channel_of(p, i);
    const float a = invstd[c] * (weight ? weight[c] : 1.0f);
    const float b = (bias ? bias[c] : 0.0f) - mean[c] * a;
    y[i] = x[i] * a + b;
  }
}

__global__ void store_grad_sums(const double2* totals, const float* invstd, int64_t channels, float* grad_sums,
                                float* grad_weight, float* grad_bias) {
  QUARTET_GRID_LOOP(c, channels) {
    const float sum_dy = static_cast<float>(totals[c].x);
    const float sum_dy_xhat = static_cast<float>(totals[c].y * invstd[c]);
    grad_sums[c] = sum_dy;
    grad_sums[channels + c] = sum_dy_xhat;
    if (grad_bias) grad_bias[c] = sum_dy;
    if (grad_weight) grad_weight[c] = sum_dy_xhat;
  }
}

// grad_sums and sums null: eval mode, dx = weight invstd dy.
__global__ void backward_input_kernel(const float* dy, const float* x, const float* mean, const float* invstd,
                                      const float* weight, const float* grad_sums, const float* sums, Planes p,
                                      float* dx, int64_t total) {
  QUARTET_GRID_LOOP(i, total) {
    const int64_t c = channel_of(p, i);
    const float a = (weight ? weight[c] : 1.0f) * invstd[c];
    if (!grad_sums) {
      dx[i] = a * dy[i];
      continue;
    }
    const float count = sums[2 * p.c + c];
    const float mean_dy = grad_sums[c] / count;
    const float mean_dy_xhat = grad_sums[p.c + c] / count;
    const float xhat = (x[i] - mean[c]) * invstd[c];
    dx[i] = a * (dy[i] - mean_dy - xhat * mean_dy_xhat);
  }
}

// ---- group norm: a group (n, g) is group_size contiguous elements ----

struct GroupValue {
  const float* x;
  int64_t size;
  __device__ double2 operator()(int64_t s, int64_t j) const { return make_double2(x[s * size + j], 0.0); }
};

// ((x - mu)^2, 0) with mu the group's mean from the first pass, in double.
struct GroupSquares {
  const float* x;
  const double2* sums;
  int64_t size;
  __device__ double2 operator()(int64_t s, int64_t j) const {
    const double mu = sums[s].x / static_cast<double>(size);
    const double d = x[s * size + j] - mu;
    return make_double2(d * d, 0.0);
  }
};

__global__ void group_stats(const double2* sums, const double2* squares, int64_t groups, int64_t size, float eps,
                            float* mean, float* invstd) {
  QUARTET_GRID_LOOP(s, groups) {
    const double mu = sums[s].x / static_cast<double>(size);
    const double var = squares[s].x / static_cast<double>(size);
    mean[s] = static_cast<float>(mu);
    invstd[s] = static_cast<float>(1.0 / sqrt(var + eps));
  }
}

// groups: per sample; size: cg * l elements of one group.
__global__ void group_apply(const float* x, const float* mean, const float* invstd, const float* weight,
                            const float* bias, Planes p, int64_t size, float* y, int64_t total) {
  QUARTET_GRID_LOOP(i, total) {
    const int64_t ng = i / size, c = channel_of(p, i);
    const float a = invstd[ng] * (weight ? weight[c] : 1.0f);
    const float b = (bias ? bias[c] : 0.0f) - mean[ng] * a;
    y[i] = x[i] * a + b;
  }
}

// Per plane (n, c): (dy, dy * xhat) with xhat in double from the group's float stats.
struct PlaneGradMoments {
  const float* dy;
  const float* x;
  const float* mean;
  const float* invstd;
  int64_t l, channels_per_group;
  __device__ double2 operator()(int64_t s, int64_t j) const {
    const int64_t ng = s / channels_per_group, i = s * l + j;
    const double mu = mean[ng], is = invstd[ng];
    return make_double2(dy[i], dy[i] * ((x[i] - mu) * is));
  }
};

// Per group: (sum over its channels of w * sum dy, of w * sum dy xhat) / size, in
// channel order.
__global__ void group_coefficients(const double2* planes, const float* weight, int64_t groups_total, int64_t groups,
                                   int64_t cg, int64_t size, double2* coef) {
  QUARTET_GRID_LOOP(ng, groups_total) {
    const int64_t c0 = ng % groups * cg;
    double a = 0.0, b = 0.0;
    for (int64_t k = 0; k < cg; ++k) {
      const double w = weight ? weight[c0 + k] : 1.0f;
      a += w * planes[ng * cg + k].x;
      b += w * planes[ng * cg + k].y;
    }
    coef[ng] = make_double2(a / static_cast<double>(size), b / static_cast<double>(size));
  }
}

__global__ void group_backward_input(const float* dy, const float* x, const float* mean, const float* invstd,
                                     const float* weight, const double2* coef, Planes p, int64_t size, float* dx,
                                     int64_t total) {
  QUARTET_GRID_LOOP(i, total) {
    const int64_t ng = i / size, c = channel_of(p, i);
    const double mu = mean[ng], is = invstd[ng];
    const float w = weight ? weight[c] : 1.0f;
    const float wdy = w * dy[i];
    const double xhat = (x[i] - mu) * is;
    dx[i] = static_cast<float>(is * (wdy - coef[ng].x - xhat * coef[ng].y));
  }
}

// Per channel: the plane sums added in sample order.
__global__ void group_param_grads(const double2* planes, Planes p, float* grad_weight, float* grad_bias) {
  QUARTET_GRID_LOOP(c, p.c) {
    double sdy = 0.0, sdy_xhat = 0.0;
    for (int64_t n = 0; n < p.n; ++n) {
      sdy += planes[n * p.c + c].x;
      sdy_xhat += planes[n * p.c + c].y;
    }
    if (grad_bias) grad_bias[c] = static_cast<float>(sdy);
    if (grad_weight) grad_weight[c] = static_cast<float>(sdy_xhat);
  }
}

}  // namespace

// ---- batch norm ----

void batch_norm_sums(const Tensor& x, bool shift_by_mean, Tensor& shift, Tensor& sums) {
  const Planes p = planes_of(x.shape());
  const Device device = x.device();
  const cudaStream_t stream = stream_of(x);
  const Totals totals(device, p.c);
  if (shift_by_mean) {
    segment_sums(device, stream, ChannelValue{x.device_data(), p}, p.c, p.n * p.l, totals.get());
    set_shift<<<blocks_for(p.c), kThreads, 0, stream>>>(totals.get(), p, shift.device_data());
    QUARTET_CUDA_LAUNCHED("batch_norm_sums set_shift");
  }
  segment_sums(device, stream, ShiftedMoments{x.device_data(), shift.device_data(), p}, p.c, p.n * p.l,
               totals.get());
  store_sums<<<blocks_for(p.c), kThreads, 0, stream>>>(totals.get(), p, sums.device_data());
  QUARTET_CUDA_LAUNCHED("batch_norm_sums");
}

void batch_norm_batch_stats(const Tensor& sums, const Tensor& shift, float momentum, float eps, Tensor& mean,
                            Tensor& invstd, Tensor& running_mean, Tensor& running_var) {
  const int64_t channels = mean.numel();
  batch_stats<<<blocks_for(channels), kThreads, 0, stream_of(mean)>>>(
      sums.device_data(), shift.device_data(), channels, momentum, eps, mean.device_data(), invstd.device_data(),
      running_mean.device_data(), running_var.device_data());
  QUARTET_CUDA_LAUNCHED("batch_norm_batch_stats");
}

void batch_norm_eval_stats(const Tensor& running_mean, const Tensor& running_var, float eps, Tensor& mean,
                           Tensor& invstd) {
  const int64_t channels = mean.numel();
  eval_stats<<<blocks_for(channels), kThreads, 0, stream_of(mean)>>>(
      running_mean.device_data(), running_var.device_data(), channels, eps, mean.device_data(), invstd.device_data());
  QUARTET_CUDA_LAUNCHED("batch_norm_eval_stats");
}

void batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                      const Tensor& bias, Tensor& y) {
  const int64_t total = x.numel();
  if (total == 0) return;
  apply_kernel<<<blocks_for(total), kThreads, 0, stream_of(x)>>>(x.device_data(), mean.device_data(),
                                                                 invstd.device_data(), data_or_null(weight),
                                                                 data_or_null(bias), planes_of(x.shape()),
                                                                 y.device_data(), total);
  QUARTET_CUDA_LAUNCHED("batch_norm_apply");
}

void batch_norm_grad_sums(const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                          Tensor& grad_sums, Tensor& grad_weight, Tensor& grad_bias) {
  const Planes p = planes_of(x.shape());
  const Device device = x.device();
  const cudaStream_t stream = stream_of(x);
  const Totals totals(device, p.c);
  segment_sums(device, stream, GradMoments{grad_out.device_data(), x.device_data(), mean.device_data(), p}, p.c,
               p.n * p.l, totals.get());
  store_grad_sums<<<blocks_for(p.c), kThreads, 0, stream>>>(totals.get(), invstd.device_data(), p.c,
                                                             grad_sums.device_data(), data_or_null(grad_weight),
                                                             data_or_null(grad_bias));
  QUARTET_CUDA_LAUNCHED("batch_norm_grad_sums");
}

void batch_norm_backward_input(const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                               const Tensor& invstd, const Tensor& weight, const Tensor& grad_sums,
                               const Tensor& sums, Tensor& grad_x) {
  const int64_t total = x.numel();
  if (total == 0) return;
  const bool centred = grad_sums.defined();
  backward_input_kernel<<<blocks_for(total), kThreads, 0, stream_of(x)>>>(
      grad_out.device_data(), x.device_data(), mean.device_data(), invstd.device_data(), data_or_null(weight),
      centred ? grad_sums.device_data() : nullptr, centred ? sums.device_data() : nullptr, planes_of(x.shape()),
      grad_x.device_data(), total);
  QUARTET_CUDA_LAUNCHED("batch_norm_backward_input");
}

// ---- group norm ----

void group_norm_forward(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias, float eps,
                        Tensor& y, Tensor& mean, Tensor& invstd) {
  const Planes p = planes_of(x.shape());
  const int64_t size = p.c / groups * p.l, segments = p.n * groups;
  const Device device = x.device();
  const cudaStream_t stream = stream_of(x);
  const Totals sums(device, segments), squares(device, segments);
  segment_sums(device, stream, GroupValue{x.device_data(), size}, segments, size, sums.get());
  segment_sums(device, stream, GroupSquares{x.device_data(), sums.get(), size}, segments, size, squares.get());
  group_stats<<<blocks_for(segments), kThreads, 0, stream>>>(sums.get(), squares.get(), segments, size, eps,
                                                             mean.device_data(), invstd.device_data());
  QUARTET_CUDA_LAUNCHED("group_norm_forward stats");
  const int64_t total = x.numel();
  group_apply<<<blocks_for(total), kThreads, 0, stream>>>(x.device_data(), mean.device_data(), invstd.device_data(),
                                                          data_or_null(weight), data_or_null(bias), p, size,
                                                          y.device_data(), total);
  QUARTET_CUDA_LAUNCHED("group_norm_forward");
}

void group_norm_backward(const Tensor& grad_out, const Tensor& x, int64_t groups, const Tensor& mean,
                         const Tensor& invstd, const Tensor& weight, Tensor& grad_x, Tensor& grad_weight,
                         Tensor& grad_bias) {
  const Planes p = planes_of(x.shape());
  const int64_t cg = p.c / groups, size = cg * p.l, segments = p.n * groups, total = x.numel();
  const Device device = x.device();
  const cudaStream_t stream = stream_of(x);
  const Totals planes(device, p.n * p.c);
  segment_sums(device, stream,
               PlaneGradMoments{grad_out.device_data(), x.device_data(), mean.device_data(), invstd.device_data(), p.l,
                                cg},
               p.n * p.c, p.l, planes.get());
  if (grad_x.defined()) {
    const Totals coef(device, segments);
    group_coefficients<<<blocks_for(segments), kThreads, 0, stream>>>(planes.get(), data_or_null(weight), segments,
                                                                      groups, cg, size, coef.get());
    QUARTET_CUDA_LAUNCHED("group_norm_backward coefficients");
    group_backward_input<<<blocks_for(total), kThreads, 0, stream>>>(
        grad_out.device_data(), x.device_data(), mean.device_data(), invstd.device_data(), data_or_null(weight),
        coef.get(), p, size, grad_x.device_data(), total);
    QUARTET_CUDA_LAUNCHED("group_norm_backward input");
  }
  if (grad_weight.defined() || grad_bias.defined()) {
    group_param_grads<<<blocks_for(p.c), kThreads, 0, stream>>>(planes.get(), p, data_or_null(grad_weight),
                                                                data_or_null(grad_bias));
    QUARTET_CUDA_LAUNCHED("group_norm_backward parameters");
  }
}

}  // namespace quartet::engine::cuda
