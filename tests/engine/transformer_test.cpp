// The transformer ops (embedding, layer_norm, gelu, causal_attention) and their modules:
// hand-computed values, finite-difference gradients, PyTorch's float64 results, bad
// input messages, and the same bits on one and on two threads.
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "engine/autograd.h"
#include "engine/nn.h"
#include "engine/ops.h"
#include "tests/engine/gradcheck.h"

namespace quartet::engine {
namespace {

using testing::expect_near;
using testing::gradcheck;
using testing::param;
using testing::random_tensor;
using testing::ThreadsScope;
using testing::throws_invalid_argument;

// sin(a i + b) for i < n: the inputs of the PyTorch references below.
std::vector<float> sines(double a, double b, int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<float>(std::sin(a * i + b));
  return v;
}

// ---- embedding ----

TEST(Embedding, PicksRowsAndSumsGradientsPerRow) {
  Tensor w = testing::leaf({4, 2}, {0, 1, 10, 11, 20, 21, 30, 31});
  Tensor idx = Tensor::from_vector({2, 3}, {1, 0, 3, 1, 1, 2});
  Tensor y = embedding(idx, w);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 2}));
  expect_near(y.to_vector(), {10, 11, 0, 1, 30, 31, 10, 11, 10, 11, 20, 21}, 0.0f);
  y.backward(Tensor::from_vector({2, 3, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
  // Row 1 was picked at positions 0, 3 and 4; row 0 at 1; row 3 at 2; row 2 at 5.
  expect_near(w.grad().to_vector(), {3, 4, 1 + 7 + 9, 2 + 8 + 10, 11, 12, 5, 6}, 0.0f);
}

TEST(Embedding, GradientMatchesFiniteDifferences) {
  const Tensor idx = Tensor::from_vector({2, 3}, {4, 0, 2, 2, 4, 1});
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return embedding(idx, in[0]); }, {param({5, 4}, 1)}));
}

TEST(Embedding, RejectsIndicesThatAreNotWholeNumbersInRange) {
  const Tensor w = random_tensor({4, 3}, 1);
  EXPECT_TRUE(throws_invalid_argument([&] { embedding(Tensor::from_vector({3}, {0, 2.5f, 1}), w); },
                                      {"embedding", "index 2.5 at position 1", "whole number in [0, 4)"}));
  EXPECT_TRUE(throws_invalid_argument([&] { embedding(Tensor::from_vector({2}, {1, 4}), w); },
                                      {"embedding", "index 4 at position 1", "[0, 4)"}));
  EXPECT_TRUE(throws_invalid_argument([&] { embedding(Tensor::from_vector({1}, {-1}), w); },
                                      {"embedding", "index -1", "[0, 4)"}));
  EXPECT_TRUE(throws_invalid_argument([&] { embedding(Tensor::from_vector({1}, {0}), random_tensor({4}, 2)); },
                                      {"embedding", "weight (rows, F)", "[4]"}));
}

TEST(Embedding, ModuleHasWeightDrawnFromTheStandardNormal) {
  Generator gen(3);
  Embedding emb(200, 50, gen);
  const NamedTensors params = emb.named_parameters();
  ASSERT_EQ(params.size(), 1u);
  EXPECT_EQ(params[0].first, "weight");
  EXPECT_EQ(emb.weight.shape(), (Shape{200, 50}));
  const std::vector<float> w = emb.weight.to_vector();
  double s = 0.0, s2 = 0.0;
  for (float x : w) s += x, s2 += static_cast<double>(x) * x;
  const double mean = s / w.size(), var = s2 / w.size() - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.03);  // 10000 draws: the mean's sd is 0.01
  EXPECT_NEAR(var, 1.0, 0.05);
  const Tensor y = emb(Tensor::from_vector({1}, {7}));
  expect_near(y.to_vector(), std::vector<float>(w.begin() + 7 * 50, w.begin() + 8 * 50), 0.0f);
}

// ---- layer norm ----

TEST(LayerNorm, NormalisesARowOfKnownNumbers) {
  const Tensor y = layer_norm(Tensor::from_vector({1, 4}, {1, 2, 3, 4}), Tensor(), Tensor());
  const float s = 1.0f / std::sqrt(1.25f + 1e-5f);  // mean 2.5, biased variance 1.25
  expect_near(y.to_vector(), {-1.5f * s, -0.5f * s, 0.5f * s, 1.5f * s}, 1e-6f);
}

// PyTorch 1.13, float64:
//   t = lambda a, b, n: torch.tensor([math.sin(a*i+b) for i in range(n)], dtype=torch.float64)
//   x = t(0.9, 0, 10).reshape(2, 5); w = t(0.4, 1.6, 5); b = 0.1 * torch.arange(5.)
//   y = F.layer_norm(x, (5,), w, b, 1e-5); (y * t(0.3, 1.6, 10).reshape(2, 5)).sum().backward()
TEST(LayerNorm, MatchesPyTorch) {
  Tensor x = testing::leaf({2, 5}, sines(0.9, 0, 10)), w = testing::leaf({5}, sines(0.4, 1.6, 5));
  Tensor b = testing::leaf({5}, {0, 0.1f, 0.2f, 0.3f, 0.4f});
  Tensor y = layer_norm(x, w, b);
  y.backward(Tensor::from_vector({2, 5}, sines(0.3, 1.6, 10)));
  expect_near(y.to_vector(), {-0.6743389f, 0.8657593f, 1.018022f, 0.3512254f, 0.4893992f, -1.24387f, -0.7959557f,
                              0.2092285f, 0.6338335f, 0.328812f},
              1e-5f);
  expect_near(x.grad().to_vector(), {1.134789f, 0.4124683f, -0.3066019f, -0.6592714f, -0.5813839f, 0.2372968f,
                                     -0.1082906f, -0.2632906f, -0.1274947f, 0.261779f},
              1e-5f);
  expect_near(w.grad().to_vector(), {-0.7260819f, 1.048713f, 0.9718929f, -0.6626774f, -1.630306f}, 1e-5f);
  expect_near(b.grad().to_vector(), {1.041154f, 0.690759f, 0.2786603f, -0.1583304f, -0.5811778f}, 1e-5f);
}

TEST(LayerNorm, GradientsMatchFiniteDifferences) {
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return layer_norm(in[0], in[1], in[2]); },
                        {param({3, 2, 6}, 1), param({6}, 2), param({6}, 3)}));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return layer_norm(in[0], Tensor(), Tensor()); },
                        {param({4, 5}, 4)}));
}

TEST(LayerNorm, RejectsParametersOfAnotherSize) {
  const Tensor x = random_tensor({2, 4}, 1);
  EXPECT_TRUE(throws_invalid_argument([&] { layer_norm(x, random_tensor({5}, 2), Tensor()); },
                                      {"layer_norm", "weight (F) = (4) expected, got [5]", "[2, 4]"}));
  EXPECT_TRUE(throws_invalid_argument([&] { layer_norm(x, Tensor(), random_tensor({2, 2}, 3)); },
                                      {"layer_norm", "bias (F) = (4)", "[2, 2]"}));
  EXPECT_TRUE(throws_invalid_argument([&] { layer_norm(x, Tensor(), Tensor(), -1.0f); }, {"layer_norm", "eps"}));
}

TEST(LayerNorm, ModuleStartsAsTheIdentityAffine) {
  LayerNorm ln(3);
  const NamedTensors params = ln.named_parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].first, "weight");
  EXPECT_EQ(params[1].first, "bias");
  expect_near(ln.weight.to_vector(), {1, 1, 1}, 0.0f);
  expect_near(ln.bias.to_vector(), {0, 0, 0}, 0.0f);
  const Tensor x = random_tensor({2, 3}, 5);
  expect_near(ln(x).to_vector(), layer_norm(x, Tensor(), Tensor()).to_vector(), 0.0f);
}

// ---- GELU ----

// PyTorch 1.13, float64: g = torch.tensor([-3, -1, -0.5, 0, 0.5, 1, 3.]); F.gelu(g), and
// its gradient from F.gelu(g).sum().backward().
TEST(Gelu, MatchesPyTorch) {
  Tensor x = testing::leaf({7}, {-3, -1, -0.5f, 0, 0.5f, 1, 3});
  Tensor y = gelu(x);
  sum(y).backward();
  expect_near(y.to_vector(), {-0.004049694f, -0.1586553f, -0.1542688f, 0, 0.3457312f, 0.8413447f, 2.99595f}, 1e-6f);
  expect_near(x.grad().to_vector(),
              {-0.01194565f, -0.08331547f, 0.1325049f, 0.5f, 0.8674951f, 1.083315f, 1.011946f}, 1e-6f);
  GELU module;
  expect_near(module(x).to_vector(), y.to_vector(), 0.0f);
}

TEST(Gelu, GradientMatchesFiniteDifferences) {
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return gelu(in[0]); }, {param({3, 7}, 1, -3.0f, 3.0f)}));
}

// ---- causal attention ----

Tensor attention_of(const TensorList& in, int64_t heads) { return causal_attention(in[0], in[1], in[2], heads); }

TEST(CausalAttention, OnePositionReturnsV) {
  Tensor q = param({2, 1, 6}, 1), k = param({2, 1, 6}, 2), v = param({2, 1, 6}, 3);
  Tensor y = causal_attention(q, k, v, 3);
  EXPECT_EQ(y.to_vector(), v.to_vector());
  const Tensor g = random_tensor(y.shape(), 4);
  y.backward(g);
  EXPECT_EQ(v.grad().to_vector(), g.to_vector());
  expect_near(q.grad().to_vector(), std::vector<float>(12, 0.0f), 0.0f);
  expect_near(k.grad().to_vector(), std::vector<float>(12, 0.0f), 0.0f);
}

TEST(CausalAttention, FirstPositionAttendsOnlyToItself) {
  const Tensor q = random_tensor({2, 5, 6}, 1), k = random_tensor({2, 5, 6}, 2), v = random_tensor({2, 5, 6}, 3);
  const std::vector<float> y = causal_attention(q, k, v, 2).to_vector(), vv = v.to_vector();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t j = 0; j < 6; ++j) EXPECT_EQ(y[b * 30 + j], vv[b * 30 + j]) << b << " " << j;
}

TEST(CausalAttention, GradientsMatchFiniteDifferences) {
  auto fn = [](const TensorList& in) { return attention_of(in, 2); };
  EXPECT_TRUE(gradcheck(fn, {param({2, 5, 6}, 1), param({2, 5, 6}, 2), param({2, 5, 6}, 3)}));
  EXPECT_TRUE(gradcheck(fn, {param({2, 1, 6}, 4), param({2, 1, 6}, 5), param({2, 1, 6}, 6)}));
}

// PyTorch 1.13 (no scaled_dot_product_attention yet), float64, B=1, T=4, H=2, Dh=2:
//   f = lambda a, b: torch.tensor([math.sin(a*i+b) for i in range(16)]).reshape(1, 4, 4)
//   q, k, v = f(0.7, 0.1), f(0.3, 1.6), f(0.5, 1.0); sp = lambda x: x.view(1, 4, 2, 2).transpose(1, 2)
//   s = (sp(q) @ sp(k).transpose(-1, -2) / math.sqrt(2)).masked_fill(torch.ones(4, 4).triu(1).bool(), -inf)
//   o = (s.softmax(-1) @ sp(v)).transpose(1, 2).reshape(1, 4, 4)
//   (o * torch.tensor([math.cos(0.2*i) for i in range(16)]).reshape(1, 4, 4)).sum().backward()
TEST(CausalAttention, MatchesPyTorch) {
  Tensor q = testing::leaf({1, 4, 4}, sines(0.7, 0.1, 16)), k = testing::leaf({1, 4, 4}, sines(0.3, 1.6, 16));
  Tensor v = testing::leaf({1, 4, 4}, sines(0.5, 1.0, 16));
  Tensor y = causal_attention(q, k, v, 2);
  y.backward(Tensor::from_vector({1, 4, 4}, sines(0.2, M_PI / 2, 16)));
  const float tol = 2e-6f;
  expect_near(y.to_vector(), {0.841471f, 0.997495f, 0.9092974f, 0.5984721f, 0.4614867f, 0.2659695f, -0.4413612f,
                              -0.679147f, -0.1585646f, -0.1597735f, 0.4863844f, 0.2674009f, 0.3905398f, 0.3942005f,
                              -0.02080416f, 0.07017588f},
              tol);
  expect_near(q.grad().to_vector(), {0, 0, 0, 0, 0.141873f, 0.1931359f, 0.1006509f, 0.1067305f, -0.08474126f,
                                     -0.09136956f, -0.2177214f, -0.2232805f, -0.3090664f, -0.3802428f,
                                     -0.06046142f, -0.2012152f},
              tol);
  expect_near(k.grad().to_vector(), {-0.1440427f, -0.1632404f, -0.1847719f, -0.1995902f, 0.07411676f, 0.1314535f,
                                     0.06379322f, -0.03355697f, 0.116482f, 0.04478266f, 0.002581051f,
                                     -0.005641642f, -0.04655608f, -0.01299568f, 0.1183977f, 0.2387888f},
              tol);
  expect_near(v.grad().to_vector(), {0.9664143f, 0.7683158f, 0.6082051f, 0.3478863f, 0.1635718f, -0.01558814f,
                                     -0.02595128f, -0.2264757f, -0.1080883f, -0.2097915f, -0.4510762f,
                                     -0.4880228f, -0.09178434f, -0.106658f, -0.2061281f, -0.2165786f},
              tol);
}

// The textbook form in double: P materialised per (b, h), forward and backward.
struct NaiveAttention {
  std::vector<double> out, dq, dk, dv;

  NaiveAttention(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                 const std::vector<float>& g, int64_t B, int64_t T, int64_t H, int64_t D)
      : out(q.size()), dq(q.size()), dk(q.size()), dv(q.size()) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    auto at = [&](int64_t b, int64_t t, int64_t h, int64_t d) { return (b * T + t) * H * D + h * D + d; };
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        std::vector<double> p(T * T, 0.0), dp(T * T, 0.0);
        for (int64_t t = 0; t < T; ++t) {
          double m = -INFINITY, z = 0.0;
          for (int64_t s = 0; s <= t; ++s) {
            double x = 0.0;
            for (int64_t d = 0; d < D; ++d) x += static_cast<double>(q[at(b, t, h, d)]) * k[at(b, s, h, d)];
            p[t * T + s] = x * scale;
            m = std::max(m, p[t * T + s]);
          }
          for (int64_t s = 0; s <= t; ++s) z += p[t * T + s] = std::exp(p[t * T + s] - m);
          for (int64_t s = 0; s <= t; ++s) p[t * T + s] /= z;
          for (int64_t d = 0; d < D; ++d)
            for (int64_t s = 0; s <= t; ++s) out[at(b, t, h, d)] += p[t * T + s] * v[at(b, s, h, d)];
        }
        for (int64_t t = 0; t < T; ++t) {
          double row = 0.0;  // sum_s P dP: the softmax's Jacobian term
          for (int64_t s = 0; s <= t; ++s) {
            for (int64_t d = 0; d < D; ++d) {
              dp[t * T + s] += g[at(b, t, h, d)] * static_cast<double>(v[at(b, s, h, d)]);
              dv[at(b, s, h, d)] += p[t * T + s] * g[at(b, t, h, d)];
            }
            row += p[t * T + s] * dp[t * T + s];
          }
          for (int64_t s = 0; s <= t; ++s) {
            const double ds = p[t * T + s] * (dp[t * T + s] - row) * scale;
            for (int64_t d = 0; d < D; ++d) {
              dq[at(b, t, h, d)] += ds * k[at(b, s, h, d)];
              dk[at(b, s, h, d)] += ds * q[at(b, t, h, d)];
            }
          }
        }
      }
  }
};

void expect_close(const std::vector<float>& actual, const std::vector<double>& expected, double tol) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) EXPECT_NEAR(actual[i], expected[i], tol) << "element " << i;
}

TEST(CausalAttention, MatchesANaiveDoublePrecisionReference) {
  const int64_t B = 2, T = 9, H = 3, D = 4;
  const Shape s{B, T, H * D};
  Tensor q = param(s, 1, -2.0f, 2.0f), k = param(s, 2, -2.0f, 2.0f), v = param(s, 3);
  const Tensor g = random_tensor(s, 4);
  Tensor y = causal_attention(q, k, v, H);
  y.backward(g);
  const NaiveAttention ref(q.to_vector(), k.to_vector(), v.to_vector(), g.to_vector(), B, T, H, D);
  expect_close(y.to_vector(), ref.out, 1e-5);
  expect_close(q.grad().to_vector(), ref.dq, 1e-5);
  expect_close(k.grad().to_vector(), ref.dk, 1e-5);
  expect_close(v.grad().to_vector(), ref.dv, 1e-5);
}

TEST(CausalAttention, RejectsBadShapesAndHeads) {
  const Tensor q = random_tensor({2, 3, 6}, 1), other = random_tensor({2, 4, 6}, 2);
  EXPECT_TRUE(throws_invalid_argument([&] { causal_attention(q, q, q, 4); },
                                      {"causal_attention", "heads", "divide the last dim 6", "heads 4"}));
  EXPECT_TRUE(throws_invalid_argument([&] { causal_attention(q, q, q, 0); }, {"causal_attention", "heads 0"}));
  EXPECT_TRUE(throws_invalid_argument([&] { causal_attention(q, other, q, 2); },
                                      {"causal_attention", "one shape", "k [2, 4, 6]", "q [2, 3, 6]"}));
  EXPECT_TRUE(throws_invalid_argument([&] { causal_attention(q, q, other, 2); }, {"v [2, 4, 6]"}));
  EXPECT_TRUE(throws_invalid_argument([&] { causal_attention(random_tensor({3, 6}, 3), q, q, 2); },
                                      {"causal_attention", "(B, T, H * Dh)", "[3, 6]"}));
}

// ---- threads ----

// Forward output and every input gradient of fn on `threads` threads.
std::vector<std::vector<float>> run_on(int threads, const std::vector<Shape>& shapes,
                                       const std::function<Tensor(const TensorList&)>& fn) {
  ThreadsScope scope(threads);
  TensorList in;
  for (size_t i = 0; i < shapes.size(); ++i) in.push_back(param(shapes[i], 10 + i));
  Tensor y = fn(in);
  y.backward(random_tensor(y.shape(), 99));
  std::vector<std::vector<float>> out{y.to_vector()};
  for (const Tensor& t : in) out.push_back(t.grad().to_vector());
  return out;
}

void expect_same_bits_on_one_and_two_threads(const std::vector<Shape>& shapes,
                                             const std::function<Tensor(const TensorList&)>& fn) {
  const auto one = run_on(1, shapes, fn), two = run_on(2, shapes, fn);
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(one[i] == two[i]) << "result " << i << " differs";
}

TEST(TransformerOps, SameBitsOnOneAndTwoThreads) {
  // Past the sizes at which the loops go to the threads.
  expect_same_bits_on_one_and_two_threads({{256, 512}, {512}, {512}},
                                          [](const TensorList& in) { return layer_norm(in[0], in[1], in[2]); });
  expect_same_bits_on_one_and_two_threads({{3, 100, 300}}, [](const TensorList& in) { return gelu(in[0]); });
  expect_same_bits_on_one_and_two_threads({{2, 33, 32}, {2, 33, 32}, {2, 33, 32}},
                                          [](const TensorList& in) { return attention_of(in, 4); });
  expect_same_bits_on_one_and_two_threads({{300, 256}}, [](const TensorList& in) {
    std::vector<float> idx(600);
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<float>(i * 7 % 300);
    return embedding(Tensor::from_vector({600}, idx), in[0]);
  });
}

}  // namespace
}  // namespace quartet::engine
