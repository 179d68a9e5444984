#include "workloads/synthetic.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/random.h"
#include "workloads/sampler.h"

namespace quartet::workloads {
namespace {

constexpr uint64_t kPrototypeStream = 0x70726f746fULL;  // "proto"
constexpr uint64_t kTrainStream = 0x747261696eULL;      // "train"
constexpr uint64_t kTestStream = 0x74657374ULL;         // "test"
constexpr int kBlobsPerClass = 3;
constexpr int kMaxShift = 2;

// prototypes[c]: (H, W) values in [0, 1].
std::vector<std::vector<float>> make_prototypes(const SyntheticOptions& opt) {
  const int64_t h = opt.height, w = opt.width;
  std::vector<std::vector<float>> protos;
  for (int c = 0; c < opt.num_classes; ++c) {
    engine::Generator gen(mix_seed(mix_seed(opt.seed ^ kPrototypeStream) + static_cast<uint64_t>(c)));
    std::vector<float> p(static_cast<size_t>(h * w), 0.0f);
    for (int b = 0; b < kBlobsPerClass; ++b) {
      const float cy = gen.uniform(0.2f, 0.8f) * static_cast<float>(h);
      const float cx = gen.uniform(0.2f, 0.8f) * static_cast<float>(w);
      const float sigma = gen.uniform(0.07f, 0.14f) * static_cast<float>(std::min(h, w));
      const float amp = gen.uniform(0.5f, 1.0f);
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) {
          const float dy = static_cast<float>(y) - cy, dx = static_cast<float>(x) - cx;
          p[y * w + x] += amp * std::exp(-(dx * dx + dy * dy) / (2 * sigma * sigma));
        }
    }
    for (float& v : p) v = std::min(v, 1.0f);
    protos.push_back(std::move(p));
  }
  return protos;
}

ImageDataset make_split(const SyntheticOptions& opt, const std::vector<std::vector<float>>& protos,
                        int64_t count, uint64_t stream) {
  const int64_t h = opt.height, w = opt.width;
  std::vector<uint8_t> pixels(static_cast<size_t>(count * h * w));
  std::vector<int32_t> labels(static_cast<size_t>(count));
  const uint64_t base = mix_seed(opt.seed ^ stream);
  for (int64_t i = 0; i < count; ++i) {
    engine::Generator gen(mix_seed(base + static_cast<uint64_t>(i)));
    const auto label = static_cast<int32_t>(gen.below(static_cast<uint64_t>(opt.num_classes)));
    const auto sy = static_cast<int64_t>(gen.below(2 * kMaxShift + 1)) - kMaxShift;
    const auto sx = static_cast<int64_t>(gen.below(2 * kMaxShift + 1)) - kMaxShift;
    const float brightness = gen.uniform(0.7f, 1.0f);
    const std::vector<float>& p = protos[static_cast<size_t>(label)];
    uint8_t* out = pixels.data() + i * h * w;
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) {
        const int64_t py = y - sy, px = x - sx;
        const float base_v = (py >= 0 && py < h && px >= 0 && px < w) ? p[py * w + px] : 0.0f;
        const float v = base_v * brightness + gen.normal(0.0f, opt.noise);
        out[y * w + x] = static_cast<uint8_t>(std::lround(std::clamp(v, 0.0f, 1.0f) * 255.0f));
      }
    labels[static_cast<size_t>(i)] = label;
  }
  return ImageDataset(1, h, w, opt.num_classes, std::move(pixels), std::move(labels), kFashionMnistNormalization);
}

}  // namespace

DatasetSplits make_synthetic(const SyntheticOptions& opt) {
  if (opt.train < 1) throw std::invalid_argument("synthetic_train: expected >= 1 samples, got " + std::to_string(opt.train));
  if (opt.test < 1) throw std::invalid_argument("synthetic_test: expected >= 1 samples, got " + std::to_string(opt.test));
  if (opt.num_classes < 1 || opt.num_classes > 256)
    throw std::invalid_argument("synthetic num_classes: expected 1..256, got " + std::to_string(opt.num_classes));
  if (opt.height < 8 || opt.width < 8)
    throw std::invalid_argument("synthetic image size: expected at least 8x8, got " + std::to_string(opt.height) +
                                "x" + std::to_string(opt.width));
  if (!(opt.noise >= 0.0f)) throw std::invalid_argument("synthetic noise: expected >= 0");
  const auto protos = make_prototypes(opt);
  DatasetSplits out;
  out.train = make_split(opt, protos, opt.train, kTrainStream);
  out.test = make_split(opt, protos, opt.test, kTestStream);
  return out;
}

}  // namespace quartet::workloads
