// The CUDA transformer kernels against the CPU's, forward and backward: embedding
// (row sums in index order on both sides), layer norm (double sums), exact GELU (erff
// against the host's erf) and causal attention (float dot products in another order:
// 2e-5 relative), which also repeats bit for bit and takes sequences past 48 KB of
// shared memory per block.
#include <array>
#include <string>
#include <vector>

#include "tests/engine/cuda/op_check.h"

namespace quartet::engine::cuda_test {
namespace {

using Inputs = std::vector<Tensor>;

// n whole numbers in [0, rows), each row picked several times when n > rows.
Tensor indices(int64_t n, int64_t rows) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i * 7 % rows);
  return Tensor::from_vector({n}, v);
}

TEST(CudaTransformer, EmbeddingMatchesCpu) {
  QUARTET_NEED_GPU(1);
  for (const auto& [n, rows, f] : std::vector<std::array<int64_t, 3>>{{5, 9, 4}, {300, 50, 33}, {4096, 1000, 64}})
    expect_same_on_gpu("embedding " + std::to_string(n) + " of " + shape_str({rows, f}),
                       {indices(n, rows), random_tensor({rows, f}, 1 + n)},
                       [](const Inputs& v) { return embedding(v[0], v[1]); }, 1e-6);
}

TEST(CudaTransformer, LayerNormMatchesCpu) {
  QUARTET_NEED_GPU(1);
  uint64_t seed = 10;
  for (const Shape& s : std::vector<Shape>{{4, 7}, {2, 3, 300}, {64, 1024}}) {
    const int64_t f = s.back();
    const Inputs in = {random_tensor(s, seed++, -2.0f, 3.0f), random_tensor({f}, seed++), random_tensor({f}, seed++)};
    expect_same_on_gpu("layer_norm " + shape_str(s), in,
                       [](const Inputs& v) { return layer_norm(v[0], v[1], v[2]); }, 1e-5);
    expect_same_on_gpu("layer_norm without affine " + shape_str(s), {in[0]},
                       [](const Inputs& v) { return layer_norm(v[0], Tensor(), Tensor()); }, 1e-5);
  }
}

TEST(CudaTransformer, GeluMatchesCpu) {
  QUARTET_NEED_GPU(1);
  uint64_t seed = 20;
  for (const Shape& s : std::vector<Shape>{{7}, {4, 9}, {3, 1000, 7}})
    expect_same_on_gpu("gelu " + shape_str(s), {random_tensor(s, seed++, -6.0f, 6.0f)},
                       [](const Inputs& v) { return gelu(v[0]); }, 2e-6);
}

// {B, T, H, Dh}.
const std::vector<std::array<int64_t, 4>> kAttentionShapes = {
    {2, 5, 2, 3}, {2, 1, 2, 3}, {2, 70, 4, 16}, {1, 300, 2, 64}};

TEST(CudaTransformer, CausalAttentionMatchesCpu) {
  QUARTET_NEED_GPU(1);
  uint64_t seed = 30;
  for (const auto& [b, t, h, dh] : kAttentionShapes) {
    const Shape s{b, t, h * dh};
    const Inputs in = {random_tensor(s, seed++, -2.0f, 2.0f), random_tensor(s, seed++, -2.0f, 2.0f),
                       random_tensor(s, seed++)};
    const int64_t heads = h;
    expect_same_on_gpu("causal_attention " + shape_str(s) + " heads " + std::to_string(h), in,
                       [heads](const Inputs& v) { return causal_attention(v[0], v[1], v[2], heads); }, 2e-5);
  }
}

// Key rows of 6200 positions need 49.6 KB of shared memory: past the default limit.
TEST(CudaTransformer, CausalAttentionTakesLongSequences) {
  QUARTET_NEED_GPU(1);
  const Shape s{1, 6200, 2};
  const Inputs in = {random_tensor(s, 40), random_tensor(s, 41), random_tensor(s, 42)};
  expect_same_on_gpu("causal_attention " + shape_str(s), in,
                     [](const Inputs& v) { return causal_attention(v[0], v[1], v[2], 1); }, 2e-5);
}

TEST(CudaTransformer, CausalAttentionRepeatsBitForBit) {
  QUARTET_NEED_GPU(1);
  const Shape s{2, 70, 64};
  auto run = [&] {
    std::vector<Tensor> in;
    for (uint64_t i = 0; i < 3; ++i) in.push_back(random_tensor(s, 50 + i).to(kGpu).set_requires_grad(true));
    Tensor y = causal_attention(in[0], in[1], in[2], 4);
    y.backward(random_tensor(s, 60).to(kGpu));
    return std::vector<std::vector<float>>{y.to_vector(), in[0].grad().to_vector(), in[1].grad().to_vector(),
                                           in[2].grad().to_vector()};
  };
  EXPECT_TRUE(run() == run());
}

}  // namespace
}  // namespace quartet::engine::cuda_test
