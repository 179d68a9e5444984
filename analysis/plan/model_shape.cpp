#include "analysis/plan/model_shape.h"

#include <stdexcept>

namespace quartet::analysis::plan {

namespace {

// Builds a model's layers in order; each helper appends one layer to `stage_`.
class Builder {
 public:
  explicit Builder(std::string name) { m_.name = std::move(name); }

  void stage(const std::string& s) {
    stage_ = s;
    m_.stages.push_back(s);
  }
  // in -> out at `positions` positions (tokens) per sample.
  Layer& linear(const std::string& name, double in, double out, double positions = 1, bool bias = true) {
    Layer& l = add({name, stage_, OpClass::matmul, 2 * in * out * positions, (in + out) * positions,
                    in * out + (bias ? out : 0), in * positions, out * positions});
    l.in_features = in, l.out_features = out;
    if (bias) l.kernels = {{"bias", out * positions}};  // added to every row; summed over them backward
    return l;
  }
  // cin -> cout with a kernel of `kernel` taps at `positions` output positions (input
  // positions for a transposed convolution: `out_positions` is then its output's).
  Layer& conv(const std::string& name, double cin, double cout, double kernel, double positions, bool bias = true,
              double out_positions = 0) {
    if (out_positions == 0) out_positions = positions;
    return add({name, stage_, OpClass::conv, 2 * cin * cout * kernel * positions,
                cin * positions + cout * out_positions, cin * cout * kernel + (bias ? cout : 0), cin * positions,
                cout * out_positions});
  }
  // An elementwise layer over `elements` per sample: reads and writes them, keeps them.
  Layer& elementwise(const std::string& name, double elements, double parameters = 0, double saved = -1) {
    return add({name, stage_, OpClass::elementwise, 0, 2 * elements, parameters, saved < 0 ? elements : saved,
                elements});
  }
  // An activation over `elements` (read and written) then a pooling that reads them
  // and writes (and hands on) `out`.
  Layer& pool(const std::string& name, double elements, double out) {
    Layer& l = add({name, stage_, OpClass::elementwise, 0, 3 * elements + out, 0, elements, out});
    l.kernels = {{"relu", elements}, {"max_pool", elements}};
    return l;
  }
  // A ReLU, and the loss (cross-entropy over `classes` logits a position).
  Layer& relu(const std::string& name, double elements) {
    Layer& l = elementwise(name, elements);
    l.kernels = {{"relu", elements}};
    return l;
  }
  // A layer norm over `width`-wide rows (`elements` a sample), and a GELU.
  Layer& layer_norm(const std::string& name, double elements, double width) {
    Layer& l = elementwise(name, elements, 2 * width);
    l.kernels = {{"layer_norm", elements}};
    return l;
  }
  Layer& gelu(const std::string& name, double elements) {
    Layer& l = elementwise(name, elements);
    l.kernels = {{"gelu", elements}};
    return l;
  }
  Layer& loss(double classes, double positions = 1) {
    Layer& l = elementwise("loss", classes * positions);
    l.kernels = {{"cross_entropy", classes * positions}};
    return l;
  }
  Layer& add(Layer l) {
    m_.layers.push_back(std::move(l));
    return m_.layers.back();
  }
  ModelShape take() { return std::move(m_); }
  ModelShape& shape() { return m_; }

 private:
  ModelShape m_;
  std::string stage_;
};

ModelShape mlp() {
  Builder b("mlp");
  b.stage("fc1"), b.linear("fc1", 784, 256), b.relu("relu1", 256);
  b.stage("fc2"), b.linear("fc2", 256, 128), b.relu("relu2", 128);
  b.stage("fc3"), b.linear("fc3", 128, 10), b.loss(10);
  return b.take();
}

ModelShape lenet5() {
  Builder b("lenet5");
  b.stage("conv1"), b.conv("conv1", 1, 6, 25, 28 * 28), b.pool("relu_pool1", 6 * 28 * 28, 6 * 14 * 14);
  b.stage("conv2"), b.conv("conv2", 6, 16, 25, 10 * 10), b.pool("relu_pool2", 16 * 10 * 10, 16 * 5 * 5);
  b.stage("fc1"), b.linear("fc1", 400, 120), b.relu("relu3", 120);
  b.stage("fc2"), b.linear("fc2", 120, 84), b.relu("relu4", 84);
  b.stage("fc3"), b.linear("fc3", 84, 10), b.loss(10);
  return b.take();
}

ModelShape cnn() {
  Builder b("cnn");
  b.stage("conv1"), b.conv("conv1", 1, 32, 9, 28 * 28), b.pool("relu_pool1", 32 * 28 * 28, 32 * 14 * 14);
  b.stage("conv2"), b.conv("conv2", 32, 64, 9, 14 * 14), b.pool("relu_pool2", 64 * 14 * 14, 64 * 7 * 7);
  b.stage("fc1"), b.linear("fc1", 3136, 128), b.relu("relu3", 128);
  b.stage("fc2"), b.linear("fc2", 128, 10), b.loss(10);
  return b.take();
}

ModelShape conv3d(int64_t side) {
  const double v = static_cast<double>(side * side * side);
  Builder b("conv3d-" + std::to_string(side));
  b.stage("conv1"), b.conv("conv1", 1, 16, 27, v), b.elementwise("relu1", 16 * v);
  b.stage("conv2"), b.conv("conv2", 16, 32, 27, v), b.pool("relu_pool2", 32 * v, 32);
  b.stage("head"), b.linear("head", 32, 2), b.elementwise("loss", 2);
  return b.take();
}

// The registered unet3d: depth 3 (16, 32, 64 channels), 3^3 convolutions without bias
// each followed by an affine InstanceNorm and LeakyReLU, 2^3 stride-2 transposed
// convolutions up, skips concatenated, a 1^3 head.
ModelShape unet3d(int64_t side) {
  const double v0 = static_cast<double>(side * side * side), v1 = v0 / 8, v2 = v0 / 64;
  Builder b("unet3d-" + std::to_string(side));
  auto conv_norm = [&](const std::string& name, double cin, double cout, double v) {
    b.conv(name, cin, cout, 27, v, /*bias=*/false);
    b.elementwise(name + ".norm_act", 2 * cout * v, 2 * cout);  // norm and activation outputs
  };
  b.stage("enc1"), conv_norm("enc1.conv1", 1, 16, v0), conv_norm("enc1.conv2", 16, 16, v0);
  b.stage("enc2"), b.elementwise("enc2.pool", 16 * v1), conv_norm("enc2.conv1", 16, 32, v1),
      conv_norm("enc2.conv2", 32, 32, v1);
  b.stage("bottleneck"), b.elementwise("bottleneck.pool", 32 * v2), conv_norm("bottleneck.conv1", 32, 64, v2),
      conv_norm("bottleneck.conv2", 64, 64, v2);
  b.stage("dec2"), b.conv("dec2.up", 64, 32, 8, v2, true, v1), b.elementwise("dec2.concat", 64 * v1),
      conv_norm("dec2.conv1", 64, 32, v1), conv_norm("dec2.conv2", 32, 32, v1);
  b.stage("dec1"), b.conv("dec1.up", 32, 16, 8, v1, true, v0), b.elementwise("dec1.concat", 32 * v0),
      conv_norm("dec1.conv1", 32, 16, v0), conv_norm("dec1.conv2", 16, 16, v0);
  b.stage("head"), b.conv("head", 16, 3, 1, v0), b.elementwise("loss", 3 * v0);
  return b.take();
}

struct FamilyRow {
  const char* name;
  GptDims dims;
};

// Narayanan et al. (SC'21), Table 1: layers, attention heads, hidden size; sequence
// length 2048 and vocabulary 51,200 (§5.1).
const std::vector<FamilyRow>& family() {
  static const std::vector<FamilyRow> rows = {
      {"gpt-1.7b", {24, 24, 2304, 2048, 51200, true, true, std::nullopt}},   {"gpt-3.6b", {30, 32, 3072, 2048, 51200, true, true, std::nullopt}},
      {"gpt-7.5b", {36, 32, 4096, 2048, 51200, true, true, std::nullopt}},   {"gpt-18b", {40, 48, 6144, 2048, 51200, true, true, std::nullopt}},
      {"gpt-39b", {48, 64, 8192, 2048, 51200, true, true, std::nullopt}},    {"gpt-76b", {60, 80, 10240, 2048, 51200, true, true, std::nullopt}},
      {"gpt-145b", {80, 96, 12288, 2048, 51200, true, true, std::nullopt}},  {"gpt-310b", {96, 128, 16384, 2048, 51200, true, true, std::nullopt}},
      {"gpt-530b", {105, 128, 20480, 2048, 51200, true, true, std::nullopt}}, {"gpt-1t", {128, 160, 25600, 2048, 51200, true, true, std::nullopt}},
  };
  return rows;
}

}  // namespace

const char* op_class_name(OpClass op) {
  switch (op) {
    case OpClass::matmul: return "matmul";
    case OpClass::conv: return "conv";
    case OpClass::attention: return "attention";
    case OpClass::elementwise: return "elementwise";
  }
  return "?";
}

ModelShape gpt_shape(const std::string& name, const GptDims& d) {
  const double T = static_cast<double>(d.context), w = static_cast<double>(d.width);
  const double H = static_cast<double>(d.heads), V = static_cast<double>(d.vocab);
  const double pairs = T * (T + 1) / 2;  // the causal (t, s ≤ t) pairs of one sequence
  Builder b(name);
  b.shape().tokens_per_sample = d.context;
  b.shape().gpt = d;
  b.stage("embed");
  // Lookups: no FLOPs, counted first so every block's input gradient counts in train.
  b.add({"embed", "embed", OpClass::elementwise, 0, 2 * T * w, V * w + T * w, 0, T * w, d.vocab_parallel});
  for (int64_t i = 0; i < d.layers; ++i) {
    const std::string p = "block" + std::to_string(i);
    b.stage(p);
    b.layer_norm(p + ".ln1", T * w, w);
    b.linear(p + ".qkv", w, 3 * w, T).tensor_parallel = true;
    // q k^T and p v over the causal pairs (Megatron's kernels: the whole square). Saved
    // (Korthikanti et al. 2022): q, k and v, and the heads' T×T scores, softmax and mask,
    // 5 a s^2 bytes at 16 bits (2.5 H T^2 elements, the 8-bit mask counted as half an
    // element).
    const double scored = d.scores_in_memory ? T * T : pairs;
    b.add({p + ".attention", p, OpClass::attention, 2 * 2 * w * scored, 4 * T * w + 2 * H * scored, 0,
           3 * T * w + 2.5 * H * T * T, T * w, true});
    if (d.scores_in_memory) {
      // The fused scale-mask-softmax reads the scores and writes the probabilities;
      // dropout reads them and writes its output and its 8-bit mask (half an element).
      Layer& softmax = b.elementwise(p + ".softmax_dropout", H * T * T, 0, 0);
      softmax.moved_elements = 4.5 * H * T * T;
      softmax.output_elements = T * w;
      softmax.tensor_parallel = true;
    }
    Layer& proj = b.linear(p + ".proj", w, w, T);
    proj.tensor_parallel = proj.row_parallel = true;
    b.elementwise(p + ".residual1", T * w, 0, 0);
    if (d.scores_in_memory) b.elementwise(p + ".dropout1", T * w, 0, 0).moved_elements = 2.5 * T * w;  // and its mask
    b.layer_norm(p + ".ln2", T * w, w);
    if (d.moe && i % d.moe->every == d.moe->every - 1) {
      // Mixture of experts: a router (no bias), then each token's top-k choices through
      // an expert MLP (the tokens' rows k times; what capacity drops is not subtracted),
      // combined by their gates. E experts' parameters; the FLOPs of k.
      const double E = static_cast<double>(d.moe->experts), k = static_cast<double>(d.moe->top_k);
      b.linear(p + ".moe.router", w, E, T, /*bias=*/false);
      Layer& up = b.linear(p + ".moe.up", w, 4 * w, k * T);
      up.parameters *= E, up.expert = true;
      b.gelu(p + ".moe.gelu", 4 * k * T * w);
      Layer& down = b.linear(p + ".moe.down", 4 * w, w, k * T);
      down.parameters *= E, down.expert = true;
      // The rows' way there and back: gathered in expert order, split among the
      // experts, put back together and combined by the gates.
      b.elementwise(p + ".moe.combine", k * T * w).kernels = {{"moe_dispatch", k * T * w}};
    } else {
      b.linear(p + ".fc1", w, 4 * w, T).tensor_parallel = true;
      b.gelu(p + ".gelu", 4 * T * w).tensor_parallel = true;
      Layer& fc2 = b.linear(p + ".fc2", 4 * w, w, T);
      fc2.tensor_parallel = fc2.row_parallel = true;
    }
    b.elementwise(p + ".residual2", T * w, 0, 0);
    if (d.scores_in_memory) b.elementwise(p + ".dropout2", T * w, 0, 0).moved_elements = 2.5 * T * w;  // and its mask
  }
  b.stage("head");
  b.layer_norm("ln_f", T * w, w);
  Layer& head = b.linear("head", w, V, T, /*bias=*/!d.vocab_parallel);
  head.tensor_parallel = d.vocab_parallel;
  if (d.vocab_parallel) head.parameters = 0;  // Megatron ties the head to the embedding
  b.loss(V, T).tensor_parallel = d.vocab_parallel;
  return b.take();
}

std::vector<std::string> gpt_family_names() {
  std::vector<std::string> out;
  for (const FamilyRow& r : family()) out.emplace_back(r.name);
  return out;
}

ModelShape model_shape(const std::string& name) {
  if (name == "mlp") return mlp();
  if (name == "lenet5") return lenet5();
  if (name == "cnn") return cnn();
  if (name == "conv3d-32") return conv3d(32);
  if (name == "conv3d-64") return conv3d(64);
  if (name == "unet3d" || name == "unet3d-32") return unet3d(32);
  if (name == "unet3d-64") return unet3d(64);
  if (name == "unet3d-128") return unet3d(128);
  if (name == "gpt-mini") return gpt_shape(name, GptDims{});
  if (name == "gpt-moe" || name == "gpt-moe-dropless") return gpt_shape(name, GptDims{.moe = MoeDims{}});
  for (const FamilyRow& r : family())
    if (name == r.name) return gpt_shape(name, r.dims);
  const std::vector<std::string> family = gpt_family_names();
  throw std::invalid_argument("model " + name + ": the planner has no shape for it; it describes mlp, lenet5, cnn, " +
                              "conv3d-32/64, unet3d-32/64/128, gpt-mini, gpt-moe, gpt-moe-dropless and " + family.front() + " .. " + family.back());
}

double forward_flops(const ModelShape& m) {
  double sum = 0;
  for (const Layer& l : m.layers) sum += l.forward_flops;
  return sum;
}

double train_flops(const ModelShape& m) {
  // The first layer's input is the data: no gradient is computed for it (a transformer's
  // first layer is the embedding lookup, of no FLOPs, so every block's counts).
  return m.layers.empty() ? 0 : 3 * forward_flops(m) - m.layers.front().forward_flops;
}

double parameter_count(const ModelShape& m) {
  double sum = 0;
  for (const Layer& l : m.layers) sum += l.parameters;
  return sum;
}

}  // namespace quartet::analysis::plan
