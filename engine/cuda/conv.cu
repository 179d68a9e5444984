#include "engine/cuda/conv.h"

#include <optional>

#include "engine/cuda/conv_geometry.h"
#include "engine/cuda/cudnn_conv.h"
#include "engine/cuda/runtime.h"
#include "engine/cuda/segment_sum.cuh"

namespace quartet::engine::cuda {
namespace {

// y (N, C, L) += bias[c].
__global__ void add_channel_bias(float* y, const float* bias, int64_t channels, int64_t cells, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{blockDim.x} * gridDim.x)
    y[i] += bias[i / cells % channels];
}

// dst (planes, *dst_box) = src (planes, *src_box) at the same positions, zeros where dst
// reaches past src: zero-extends, or crops when dst is the smaller box.
__global__ void copy_box_kernel(const float* src, Box src_box, float* dst, Box dst_box, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{blockDim.x} * gridDim.x) {
    const int64_t k = box_index(i, dst_box, src_box);
    dst[i] = k >= 0 ? src[k] : 0.0f;
  }
}

void add_bias(Tensor& y, const Tensor& bias) {
  const Planes p = planes_of(y.shape());
  const int64_t total = y.numel();
  if (total == 0) return;
  add_channel_bias<<<blocks_for(total), kThreads, 0, stream_of(y)>>>(y.device_data(), bias.device_data(), p.c, p.l,
                                                                     total);
  QUARTET_CUDA_LAUNCHED("conv add_channel_bias");
}

void copy_box(cudaStream_t stream, const float* src, const Box& src_box, float* dst, const Box& dst_box,
              int64_t planes) {
  const int64_t total = planes * dst_box.d[0] * dst_box.d[1] * dst_box.d[2];
  if (total == 0) return;
  copy_box_kernel<<<blocks_for(total), kThreads, 0, stream>>>(src, src_box, dst, dst_box, total);
  QUARTET_CUDA_LAUNCHED("conv copy_box");
}

void zero(Tensor& t) {
  if (t.defined() && t.numel() > 0)
    QUARTET_CUDA_CHECK(
        cudaMemsetAsync(t.device_data(), 0, static_cast<size_t>(t.numel()) * sizeof(float), stream_of(t)));
}

void bias_grad(const Tensor& grad_out, Tensor& grad_bias) {
  if (grad_bias.defined())
    channel_sums(grad_out.device(), stream_of(grad_out), grad_out.device_data(), planes_of(grad_out.shape()),
                 grad_bias.device_data());
}

}  // namespace

void conv_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvOptions& opt, Tensor& out) {
  if (out.numel() == 0) return;
  if (x.numel() == 0) {  // an empty input padded to a non-empty one: out is the bias alone
    zero(out);
  } else {
    const ConvGeometry g = conv_geometry(x.shape(), weight.shape(), out.shape(), opt.stride, opt.padding, opt.dilation);
    cudnn_conv_forward(x.device(), g, x.device_data(), weight.device_data(), out.device_data());
  }
  if (bias.defined()) add_bias(out, bias);
}

void conv_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_out, const ConvOptions& opt,
                   Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias) {
  if (grad_out.numel() == 0 || x.numel() == 0) {  // nothing reaches the input or the weight
    zero(grad_x);
    zero(grad_weight);
    if (grad_out.numel() == 0) zero(grad_bias);
    else bias_grad(grad_out, grad_bias);
    return;
  }
  const ConvGeometry g =
      conv_geometry(x.shape(), weight.shape(), grad_out.shape(), opt.stride, opt.padding, opt.dilation);
  if (grad_x.defined())
    cudnn_conv_backward_data(x.device(), g, weight.device_data(), grad_out.device_data(), grad_x.device_data());
  if (grad_weight.defined())
    cudnn_conv_backward_filter(x.device(), g, x.device_data(), grad_out.device_data(), grad_weight.device_data());
  bias_grad(grad_out, grad_bias);
}

// The conv of t.conv runs from out's shape to x's (zero-extended when output_padding
// reaches past the stride): its input gradient is the transposed conv, its forward pass
// the transposed conv's input gradient, and its filter gradient at (grad_out, x) the
// transposed conv's weight gradient. The weight (Cin, Cout, *k) is that conv's filter as
// it lies in memory.
void conv_transpose_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                            const ConvTransposeOptions& opt, Tensor& out) {
  if (out.numel() == 0) return;
  if (x.numel() == 0) {
    zero(out);
  } else {
    const TransposedConv t =
        transposed_conv_geometry(x.shape(), weight.shape(), out.shape(), opt.stride, opt.padding, opt.dilation);
    const float* dy = x.device_data();
    std::optional<Workspace> extended;
    if (t.extended) {
      const Box box = out_box(t.conv);
      extended.emplace(x.device(), static_cast<size_t>(t.conv.n * t.conv.c_out * t.conv.out_cells()) * sizeof(float));
      copy_box(stream_of(x), x.device_data(), t.x, static_cast<float*>(extended->data()), box, t.conv.n * t.conv.c_out);
      dy = static_cast<const float*>(extended->data());
    }
    cudnn_conv_backward_data(x.device(), t.conv, weight.device_data(), dy, out.device_data());
  }
  if (bias.defined()) add_bias(out, bias);
}

void conv_transpose_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_out,
                             const ConvTransposeOptions& opt, Tensor& grad_x, Tensor& grad_weight,
                             Tensor& grad_bias) {
  if (grad_out.numel() == 0 || x.numel() == 0) {
    zero(grad_x);
    zero(grad_weight);
    if (grad_out.numel() == 0) zero(grad_bias);
    else bias_grad(grad_out, grad_bias);
    return;
  }
  const TransposedConv t =
      transposed_conv_geometry(x.shape(), weight.shape(), grad_out.shape(), opt.stride, opt.padding, opt.dilation);
  const Device device = x.device();
  const cudaStream_t stream = stream_of(x);
  const int64_t planes = t.conv.n * t.conv.c_out;
  // x's extent as the conv's output: first the zero-extended x for the weight gradient,
  // then the conv's output before its crop to grad_x.
  std::optional<Workspace> extended;
  float* ext = nullptr;
  if (t.extended) {
    extended.emplace(device, static_cast<size_t>(planes * t.conv.out_cells()) * sizeof(float));
    ext = static_cast<float*>(extended->data());
  }
  if (grad_weight.defined()) {
    const float* dy = x.device_data();
    if (ext) {
      copy_box(stream, x.device_data(), t.x, ext, out_box(t.conv), planes);
      dy = ext;
    }
    cudnn_conv_backward_filter(device, t.conv, grad_out.device_data(), dy, grad_weight.device_data());
  }
  if (grad_x.defined()) {
    cudnn_conv_forward(device, t.conv, grad_out.device_data(), weight.device_data(), ext ? ext : grad_x.device_data());
    if (ext) copy_box(stream, ext, out_box(t.conv), grad_x.device_data(), t.x, planes);
  }
  bias_grad(grad_out, grad_bias);
}

}  // namespace quartet::engine::cuda
