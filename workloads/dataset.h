#pragma once

// Image classification data held compactly: pixels as uint8 (what idx files store), so
// a process holding Fashion-MNIST's 70k images needs about 55 MB, not 220 MB. Batches
// become float tensors only when gathered.

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/tensor.h"

namespace quartet::workloads {

// Per-channel normalisation applied by gather(): x = (v / 255 - mean) / std.
struct Normalization {
  float mean = 0.0f;
  float std = 1.0f;
};

// Fashion-MNIST's training-set pixel mean and standard deviation on the [0, 1] scale
// (computed over all 60,000 training images: 0.2860, 0.3530). Every workload here uses
// them, so an arm's inputs do not depend on which client or rank computed statistics.
inline constexpr Normalization kFashionMnistNormalization{0.2860f, 0.3530f};

class ImageDataset {
 public:
  ImageDataset() = default;
  // requires: pixels.size() == labels.size() * channels * height * width, every label in
  // [0, num_classes), sizes >= 1.
  ImageDataset(int64_t channels, int64_t height, int64_t width, int num_classes,
               std::vector<uint8_t> pixels, std::vector<int32_t> labels,
               Normalization norm = kFashionMnistNormalization);

  int64_t size() const { return static_cast<int64_t>(labels_.size()); }
  bool empty() const { return labels_.empty(); }
  int64_t channels() const { return channels_; }
  int64_t height() const { return height_; }
  int64_t width() const { return width_; }
  int num_classes() const { return num_classes_; }
  int64_t sample_numel() const { return channels_ * height_ * width_; }
  // (C, H, W) of one sample.
  engine::Shape sample_shape() const { return {channels_, height_, width_}; }
  const Normalization& normalization() const { return norm_; }

  const std::vector<int32_t>& labels() const { return labels_; }
  int32_t label(int64_t i) const { return labels_[static_cast<size_t>(i)]; }
  // Raw pixels of sample i (sample_numel() bytes, CHW); requires 0 <= i < size().
  const uint8_t* pixels(int64_t i) const;
  // Samples per class, num_classes() entries.
  std::vector<int64_t> label_histogram() const;

  // The first n samples; shares the pixel buffer (no copy). requires 0 <= n <= size().
  ImageDataset take_first(int64_t n) const;

 private:
  int64_t channels_ = 0, height_ = 0, width_ = 0;
  int num_classes_ = 0;
  // Shared and immutable: slices and copies of a dataset cost only their labels.
  std::shared_ptr<const std::vector<uint8_t>> pixels_;
  int64_t first_ = 0;  // index of sample 0 in pixels_
  std::vector<int32_t> labels_;
  Normalization norm_;
};

// Train and test split of one dataset.
struct DatasetSplits {
  ImageDataset train;
  ImageDataset test;
};

struct Batch {
  engine::Tensor x;            // (N, C, H, W), normalised floats
  std::vector<int32_t> y;      // N labels
};

// Builds the batch of the given samples, in the given order; x is allocated under the
// current memory tag. Throws std::out_of_range naming an index outside [0, size()).
Batch gather(const ImageDataset& data, const std::vector<int64_t>& indices);
// Samples [begin, end) in order (evaluation).
Batch gather_range(const ImageDataset& data, int64_t begin, int64_t end);

// Samples per class over `indices`.
std::vector<int64_t> label_histogram(const ImageDataset& data, const std::vector<int64_t>& indices);

}  // namespace quartet::workloads
