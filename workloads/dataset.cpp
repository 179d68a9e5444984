#include "workloads/dataset.h"

#include <stdexcept>
#include <string>

namespace quartet::workloads {

ImageDataset::ImageDataset(int64_t channels, int64_t height, int64_t width, int num_classes,
                           std::vector<uint8_t> pixels, std::vector<int32_t> labels, Normalization norm)
    : channels_(channels), height_(height), width_(width), num_classes_(num_classes),
      labels_(std::move(labels)), norm_(norm) {
  if (channels < 1 || height < 1 || width < 1)
    throw std::invalid_argument("ImageDataset: channels, height and width must be >= 1, got " +
                                std::to_string(channels) + "x" + std::to_string(height) + "x" +
                                std::to_string(width));
  if (num_classes < 1)
    throw std::invalid_argument("ImageDataset: num_classes must be >= 1, got " + std::to_string(num_classes));
  if (!(norm.std > 0.0f))
    throw std::invalid_argument("ImageDataset: normalisation std must be > 0");
  const auto expected = static_cast<size_t>(labels_.size()) * static_cast<size_t>(sample_numel());
  if (pixels.size() != expected)
    throw std::invalid_argument("ImageDataset: " + std::to_string(pixels.size()) + " pixel bytes for " +
                                std::to_string(labels_.size()) + " samples of " +
                                std::to_string(sample_numel()) + ", expected " + std::to_string(expected));
  for (size_t i = 0; i < labels_.size(); ++i)
    if (labels_[i] < 0 || labels_[i] >= num_classes)
      throw std::invalid_argument("ImageDataset: label " + std::to_string(labels_[i]) + " of sample " +
                                  std::to_string(i) + " is outside [0, " + std::to_string(num_classes) + ")");
  pixels_ = std::make_shared<const std::vector<uint8_t>>(std::move(pixels));
}

const uint8_t* ImageDataset::pixels(int64_t i) const {
  if (i < 0 || i >= size())
    throw std::out_of_range("sample index " + std::to_string(i) + " outside [0, " + std::to_string(size()) + ")");
  return pixels_->data() + (first_ + i) * sample_numel();
}

std::vector<int64_t> ImageDataset::label_histogram() const {
  std::vector<int64_t> h(static_cast<size_t>(num_classes_), 0);
  for (int32_t y : labels_) ++h[static_cast<size_t>(y)];
  return h;
}

ImageDataset ImageDataset::take_first(int64_t n) const {
  if (n < 0 || n > size())
    throw std::out_of_range("take_first: n = " + std::to_string(n) + " outside [0, " + std::to_string(size()) +
                            "]");
  ImageDataset out = *this;
  out.labels_.resize(static_cast<size_t>(n));
  out.labels_.shrink_to_fit();
  return out;
}

namespace {

// Fills x[row] (sample_numel floats) from sample i.
void normalize_into(const ImageDataset& data, int64_t i, float* out) {
  const uint8_t* p = data.pixels(i);
  // (v / 255 - mean) / std = v * a + b
  const float a = 1.0f / (255.0f * data.normalization().std);
  const float b = -data.normalization().mean / data.normalization().std;
  for (int64_t k = 0, n = data.sample_numel(); k < n; ++k) out[k] = static_cast<float>(p[k]) * a + b;
}

engine::Shape batch_shape(const ImageDataset& data, int64_t n) {
  return {n, data.channels(), data.height(), data.width()};
}

}  // namespace

Batch gather(const ImageDataset& data, const std::vector<int64_t>& indices) {
  const auto n = static_cast<int64_t>(indices.size());
  for (int64_t i : indices)
    if (i < 0 || i >= data.size())
      throw std::out_of_range("gather: sample index " + std::to_string(i) + " outside [0, " +
                              std::to_string(data.size()) + ")");
  Batch b;
  b.x = engine::Tensor::empty(batch_shape(data, n));
  b.y.resize(indices.size());
  float* x = b.x.data();
  for (int64_t r = 0; r < n; ++r) {
    normalize_into(data, indices[r], x + r * data.sample_numel());
    b.y[r] = data.label(indices[r]);
  }
  return b;
}

Batch gather_range(const ImageDataset& data, int64_t begin, int64_t end) {
  if (begin < 0 || end > data.size() || begin > end)
    throw std::out_of_range("gather_range: [" + std::to_string(begin) + ", " + std::to_string(end) +
                            ") outside [0, " + std::to_string(data.size()) + ")");
  std::vector<int64_t> idx(static_cast<size_t>(end - begin));
  for (int64_t i = begin; i < end; ++i) idx[i - begin] = i;
  return gather(data, idx);
}

std::vector<int64_t> label_histogram(const ImageDataset& data, const std::vector<int64_t>& indices) {
  std::vector<int64_t> h(static_cast<size_t>(data.num_classes()), 0);
  for (int64_t i : indices) {
    if (i < 0 || i >= data.size())
      throw std::out_of_range("label_histogram: sample index " + std::to_string(i) + " outside [0, " +
                              std::to_string(data.size()) + ")");
    ++h[static_cast<size_t>(data.label(i))];
  }
  return h;
}

}  // namespace quartet::workloads
