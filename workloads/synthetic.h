#pragma once

// A small, seeded image classification problem for fast tests: each class has a
// prototype (a few Gaussian blobs at class-specific places); a sample is its class's
// prototype shifted by up to two pixels, scaled in brightness and covered in Gaussian
// noise, stored as uint8 like idx data. 1x28x28 by default, so every 2D model runs on it.

#include <cstdint>

#include "workloads/dataset.h"

namespace quartet::workloads {

struct SyntheticOptions {
  int64_t train = 2048;
  int64_t test = 512;
  int num_classes = 10;
  int64_t height = 28;
  int64_t width = 28;
  float noise = 0.2f;  // standard deviation of the pixel noise, on the [0, 1] scale
  uint64_t seed = 1;
};

// Deterministic in the options. The random streams are platform independent
// (engine::Generator); pixel values also pass through libm's exp, so two platforms agree
// on every byte wherever their exp agrees to within uint8 rounding (in practice always).
// Sample i depends only on (seed, split, i), so a larger set extends a smaller one.
// requires train >= 1, test >= 1, num_classes in [1, 256], height, width >= 8.
DatasetSplits make_synthetic(const SyntheticOptions& opt);

}  // namespace quartet::workloads
