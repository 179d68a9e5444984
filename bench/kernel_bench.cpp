// quartet_kernel_bench: the engine's matmul and convolution kernels (2D and 3D, forward
// and backward) beside OpenBLAS's cblas_sgemm on the same GEMM shapes, in GFLOP/s.
//
// A convolution is measured against the one GEMM an ideal im2col implementation would
// make for the whole batch (L = output positions per sample, K = Cin * kernel volume):
//   forward      y (Cout, N L)  = W (Cout, K)    col (K, N L)
//   bwd_data     col (K, N L)   = W^T (K, Cout)  dy (Cout, N L)
//   bwd_weight   dW (Cout, K)   = dy (Cout, N L) col^T (N L, K)
// and both count 2 Cout K N L flops, so the ratio of the two rates is the share of
// sgemm's speed the convolution reaches with its im2col, col2im and bias work included.
//
// Where oneDNN is built (QUARTET_DNNL), each convolution is also run by oneDNN on the same
// tensors: /dnnl on the engine's plain NCHW / NCDHW layouts, /dnnl_blocked in the layouts
// oneDNN picks, with its reorders in and out counted in the time.
//
// Pooling and ReLU have no GEMM to compare with; they report input elements per second.
//
// The trailing /1 or /2 of a name is the thread count (engine and OpenBLAS alike).
//
// /ours runs the kernel the engine picks; /im2col and /winograd force one
// (QUARTET_CONV_KERNEL). Winograd's rate counts the direct conv's flops too, so the rates
// compare.

#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "engine/cpu/conv.h"
#include "engine/cpu/dense.h"
#include "engine/cpu/dnnl_conv.h"
#include "engine/cpu/elementwise.h"
#include "engine/cpu/pool.h"
#include "engine/random.h"
#include "engine/threads.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace {

using quartet::engine::Generator;
using quartet::engine::Shape;
using quartet::engine::Tensor;
namespace cpu = quartet::engine::cpu;

Tensor random_tensor(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  Generator gen(seed);
  quartet::engine::uniform_(t, -1.0f, 1.0f, gen);
  return t;
}

void set_threads(int n) {
  quartet::engine::set_compute_threads(n);
  openblas_set_num_threads(n);
}

void set_rate(benchmark::State& state, double flops) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// ---- matmul: op(A) (M, K) x op(B) (K, N), row-major, as the engine's linear layers ----

struct GemmCase {
  std::string name;
  int64_t m, n, k;
  bool trans_a, trans_b;
};

std::vector<GemmCase> gemm_cases() {
  std::vector<GemmCase> out;
  // Linear layers of the model zoo: forward y = x W^T, backward dx = dy W, dW = dy^T x.
  struct Layer { const char* name; int64_t in, out; };
  for (const Layer& l : {Layer{"mlp.fc1", 784, 256}, Layer{"mlp.fc2", 256, 128}, Layer{"cnn.fc1", 3136, 128}}) {
    for (int64_t batch : {64, 256}) {
      const std::string base = std::string(l.name) + "/b" + std::to_string(batch);
      out.push_back({base + "/fwd", batch, l.out, l.in, false, true});
      out.push_back({base + "/bwd_data", batch, l.in, l.out, false, false});
      out.push_back({base + "/bwd_weight", l.out, l.in, batch, true, false});
    }
  }
  // gpt-mini's (width 128, MLP 512, 256 logits) at batch 16 x context 128 = 2048 rows.
  for (const Layer& l : {Layer{"gpt.qkv", 128, 384}, Layer{"gpt.proj", 128, 128}, Layer{"gpt.fc", 128, 512},
                         Layer{"gpt.fc2", 512, 128}, Layer{"gpt.head", 128, 256}}) {
    const std::string base = std::string(l.name) + "/b2048";
    out.push_back({base + "/fwd", 2048, l.out, l.in, false, true});
    out.push_back({base + "/bwd_data", 2048, l.in, l.out, false, false});
    out.push_back({base + "/bwd_weight", l.out, l.in, 2048, true, false});
  }
  out.push_back({"square512", 512, 512, 512, false, false});
  return out;
}

void bm_gemm_ours(benchmark::State& state, GemmCase c) {
  set_threads(static_cast<int>(state.range(0)));
  Tensor a = random_tensor(c.trans_a ? Shape{c.k, c.m} : Shape{c.m, c.k}, 1);
  Tensor b = random_tensor(c.trans_b ? Shape{c.n, c.k} : Shape{c.k, c.n}, 2);
  Tensor out = Tensor::empty({c.m, c.n});
  for (auto _ : state) {
    cpu::gemm(a, c.trans_a, b, c.trans_b, out, 1.0f, 0.0f);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_rate(state, 2.0 * c.m * c.n * c.k);
}

void bm_gemm_sgemm(benchmark::State& state, GemmCase c) {
  set_threads(static_cast<int>(state.range(0)));
  Tensor a = random_tensor(c.trans_a ? Shape{c.k, c.m} : Shape{c.m, c.k}, 1);
  Tensor b = random_tensor(c.trans_b ? Shape{c.n, c.k} : Shape{c.k, c.n}, 2);
  Tensor out = Tensor::empty({c.m, c.n});
  const int lda = static_cast<int>(c.trans_a ? c.m : c.k), ldb = static_cast<int>(c.trans_b ? c.k : c.n);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, c.trans_a ? CblasTrans : CblasNoTrans, c.trans_b ? CblasTrans : CblasNoTrans,
                static_cast<int>(c.m), static_cast<int>(c.n), static_cast<int>(c.k), 1.0f, a.data(), lda,
                b.data(), ldb, 0.0f, out.data(), static_cast<int>(c.n));
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_rate(state, 2.0 * c.m * c.n * c.k);
}

// ---- convolution ----

struct ConvCase {
  std::string name;
  int64_t n, cin, cout, side, k, pad;
  int spatial;  // 2 or 3

  Shape x_shape() const { return with_spatial({n, cin}, side); }
  Shape w_shape() const { return with_spatial({cout, cin}, k); }
  Shape y_shape() const { return with_spatial({n, cout}, side + 2 * pad - k + 1); }
  int64_t out_positions() const {  // L
    int64_t l = 1;
    for (int i = 0; i < spatial; ++i) l *= side + 2 * pad - k + 1;
    return l;
  }
  int64_t kdim() const {  // K
    int64_t v = cin;
    for (int i = 0; i < spatial; ++i) v *= k;
    return v;
  }
  double flops() const { return 2.0 * cout * kdim() * n * out_positions(); }

 private:
  Shape with_spatial(Shape s, int64_t v) const {
    for (int i = 0; i < spatial; ++i) s.push_back(v);
    return s;
  }
};

std::vector<ConvCase> conv_cases() {
  return {
      {"lenet5.conv1/b64", 64, 1, 6, 28, 5, 2, 2},   {"lenet5.conv2/b64", 64, 6, 16, 14, 5, 0, 2},
      {"cnn.conv1/b64", 64, 1, 32, 28, 3, 1, 2},     {"cnn.conv2/b64", 64, 32, 64, 14, 3, 1, 2},
      {"cnn.conv2/b256", 256, 32, 64, 14, 3, 1, 2},  {"conv3d.conv1/32^3", 2, 1, 16, 32, 3, 1, 3},
      {"conv3d.conv2/32^3", 2, 16, 32, 32, 3, 1, 3}, {"conv3d.conv1/64^3", 2, 1, 16, 64, 3, 1, 3},
      {"conv3d.conv2/64^3", 2, 16, 32, 64, 3, 1, 3},
      // unet3d's convs at a 64^3 patch, batch 1: a level-1 block's second conv and the
      // first conv of the decoder level that takes the concatenated skip
      {"unet3d.enc1.conv2/64^3", 1, 16, 16, 64, 3, 1, 3}, {"unet3d.dec1.conv1/64^3", 1, 32, 16, 64, 3, 1, 3},
      {"unet3d.dec2.conv1/64^3", 1, 64, 32, 32, 3, 1, 3},
      // 3x3 stride-1 convs with few channels, where Winograd's transforms weigh most
      {"lenet3x3.conv2/b64", 64, 6, 16, 14, 3, 1, 2}, {"c8to16/28^2/b64", 64, 8, 16, 28, 3, 1, 2},
      {"c16to16/28^2/b64", 64, 16, 16, 28, 3, 1, 2}, {"c4to8/32^3", 2, 4, 8, 32, 3, 1, 3},
      {"c8to8/32^3", 2, 8, 8, 32, 3, 1, 3},
  };
}

enum class Pass { forward, bwd_data, bwd_weight };
constexpr const char* kPassNames[] = {"fwd", "bwd_data", "bwd_weight"};

quartet::engine::ConvOptions conv_options(const ConvCase& c) {
  quartet::engine::ConvOptions opt;
  opt.stride.assign(c.spatial, 1);
  opt.padding.assign(c.spatial, c.pad);
  opt.dilation.assign(c.spatial, 1);
  return opt;
}

// One conv's operands, and the gradients its pass writes (the others left undefined).
struct ConvArgs {
  Tensor x, w, bias, y, dx, dw, db;
  ConvArgs(const ConvCase& c, Pass pass)
      : x(random_tensor(c.x_shape(), 1)),
        w(random_tensor(c.w_shape(), 2)),
        bias(random_tensor({c.cout}, 3)),
        y(random_tensor(c.y_shape(), 4)),
        dx(pass == Pass::bwd_data ? Tensor::empty(c.x_shape()) : Tensor()),
        dw(pass == Pass::bwd_weight ? Tensor::empty(c.w_shape()) : Tensor()),
        db(pass == Pass::bwd_weight ? Tensor::empty({c.cout}) : Tensor()) {}
};

// kernel: the QUARTET_CONV_KERNEL value the engine runs under (engine/cpu/conv_kernel.h).
void bm_conv_ours(benchmark::State& state, ConvCase c, Pass pass, const char* kernel) {
  set_threads(static_cast<int>(state.range(0)));
  setenv("QUARTET_CONV_KERNEL", kernel, 1);
  const quartet::engine::ConvOptions opt = conv_options(c);
  ConvArgs a(c, pass);
  auto& [x, w, bias, y, dx, dw, db] = a;
  for (auto _ : state) {
    if (pass == Pass::forward) cpu::conv_forward(x, w, bias, opt, y);
    else cpu::conv_backward(x, w, y, opt, dx, dw, db);
    benchmark::ClobberMemory();
  }
  unsetenv("QUARTET_CONV_KERNEL");
  set_rate(state, c.flops());
}

void bm_conv_dnnl(benchmark::State& state, ConvCase c, Pass pass, cpu::DnnlLayout layout) {
  set_threads(static_cast<int>(state.range(0)));
  const quartet::engine::ConvOptions opt = conv_options(c);
  ConvArgs a(c, pass);
  auto& [x, w, bias, y, dx, dw, db] = a;
  auto run = [&] {
    if (pass == Pass::forward) cpu::dnnl_conv_forward(x, w, bias, opt, y, layout);
    else cpu::dnnl_conv_backward(x, w, y, opt, dx, dw, db, layout);
  };
  run();  // creates the primitives outside the timed loop
  for (auto _ : state) {
    run();
    benchmark::ClobberMemory();
  }
  set_rate(state, c.flops());
}

void bm_conv_sgemm(benchmark::State& state, ConvCase c, Pass pass) {
  set_threads(static_cast<int>(state.range(0)));
  const int cout = static_cast<int>(c.cout), k = static_cast<int>(c.kdim());
  const int cols = static_cast<int>(c.n * c.out_positions());
  Tensor w = random_tensor({c.cout, c.kdim()}, 2);
  Tensor col = random_tensor({c.kdim(), cols}, 1);
  Tensor y = random_tensor({c.cout, cols}, 4);
  for (auto _ : state) {
    switch (pass) {
      case Pass::forward:
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, cout, cols, k, 1.0f, w.data(), k, col.data(), cols,
                    0.0f, y.data(), cols);
        break;
      case Pass::bwd_data:
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k, cols, cout, 1.0f, w.data(), k, y.data(), cols,
                    0.0f, col.data(), cols);
        break;
      case Pass::bwd_weight:
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, cout, k, cols, 1.0f, y.data(), cols, col.data(), cols,
                    0.0f, w.data(), k);
        break;
    }
    benchmark::ClobberMemory();
  }
  set_rate(state, c.flops());
}

// ---- memory-bound kernels around the convolutions ----

struct PoolCase {
  std::string name;
  Shape x;  // (N, C, H, W), pooled 2x2 with stride 2
};

std::vector<PoolCase> pool_cases() {
  return {{"lenet5.pool1/b64", {64, 6, 28, 28}}, {"cnn.pool1/b64", {64, 32, 28, 28}}, {"cnn.pool2/b64", {64, 64, 14, 14}}};
}

void set_elements(benchmark::State& state, double n) {
  state.counters["Gelem/s"] = benchmark::Counter(n / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void bm_max_pool(benchmark::State& state, PoolCase c, bool backward) {
  set_threads(static_cast<int>(state.range(0)));
  quartet::engine::PoolOptions opt;
  opt.kernel = {2, 2};
  opt.stride = {2, 2};
  opt.padding = {0, 0};
  Shape y_shape{c.x[0], c.x[1], c.x[2] / 2, c.x[3] / 2};
  Tensor x = random_tensor(c.x, 1), dx = Tensor::empty(c.x);
  Tensor y = Tensor::empty(y_shape), argmax = Tensor::empty(y_shape), dy = random_tensor(y_shape, 2);
  cpu::max_pool_forward(x, opt, y, argmax);
  for (auto _ : state) {
    if (backward) cpu::max_pool_backward(dy, argmax, opt, dx);
    else cpu::max_pool_forward(x, opt, y, argmax);
    benchmark::ClobberMemory();
  }
  set_elements(state, static_cast<double>(x.numel()));
}

void bm_relu(benchmark::State& state, PoolCase c, bool backward) {
  set_threads(static_cast<int>(state.range(0)));
  Tensor x = random_tensor(c.x, 1), y = Tensor::empty(c.x), dy = random_tensor(c.x, 2), dx = Tensor::empty(c.x);
  Tensor mask = Tensor::empty({cpu::relu_mask_words(x.numel())});
  cpu::relu(x, y, mask);
  for (auto _ : state) {
    if (backward) cpu::relu_backward(dy, mask, dx);
    else cpu::relu(x, y, mask);
    benchmark::ClobberMemory();
  }
  set_elements(state, static_cast<double>(x.numel()));
}

void register_all() {
  auto threads = [](benchmark::internal::Benchmark* b) {
    b->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMicrosecond);
  };
  for (const GemmCase& c : gemm_cases()) {
    threads(benchmark::RegisterBenchmark(("matmul/" + c.name + "/ours").c_str(), bm_gemm_ours, c));
    threads(benchmark::RegisterBenchmark(("matmul/" + c.name + "/sgemm").c_str(), bm_gemm_sgemm, c));
  }
  for (const ConvCase& c : conv_cases()) {
    for (Pass p : {Pass::forward, Pass::bwd_data, Pass::bwd_weight}) {
      const std::string base = "conv/" + c.name + "/" + kPassNames[static_cast<int>(p)];
      threads(benchmark::RegisterBenchmark((base + "/ours").c_str(), bm_conv_ours, c, p, "auto"));
      // Winograd beside im2col where it can run: forward and input gradient, 3x3(x3), stride 1.
      if (c.k == 3 && p != Pass::bwd_weight) {
        threads(benchmark::RegisterBenchmark((base + "/im2col").c_str(), bm_conv_ours, c, p, "im2col"));
        threads(benchmark::RegisterBenchmark((base + "/winograd").c_str(), bm_conv_ours, c, p, "winograd"));
      }
      threads(benchmark::RegisterBenchmark((base + "/sgemm").c_str(), bm_conv_sgemm, c, p));
      if (!cpu::dnnl_available()) continue;
      threads(benchmark::RegisterBenchmark((base + "/dnnl").c_str(), bm_conv_dnnl, c, p, cpu::DnnlLayout::plain));
      threads(benchmark::RegisterBenchmark((base + "/dnnl_blocked").c_str(), bm_conv_dnnl, c, p,
                                           cpu::DnnlLayout::blocked));
    }
  }
  for (const PoolCase& c : pool_cases()) {
    threads(benchmark::RegisterBenchmark(("max_pool/" + c.name + "/fwd").c_str(), bm_max_pool, c, false));
    threads(benchmark::RegisterBenchmark(("max_pool/" + c.name + "/bwd").c_str(), bm_max_pool, c, true));
    threads(benchmark::RegisterBenchmark(("relu/" + c.name + "/fwd").c_str(), bm_relu, c, false));
    threads(benchmark::RegisterBenchmark(("relu/" + c.name + "/bwd").c_str(), bm_relu, c, true));
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::AddCustomContext("onednn", cpu::dnnl_version());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
