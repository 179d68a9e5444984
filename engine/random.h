#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "engine/tensor.h"

namespace quartet::engine {

// A seeded generator whose streams are the same on every platform (mt19937_64 is fully
// specified; the distributions below are ours, not the library's).
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : engine_(seed) {}
  uint64_t next_u64() { return engine_(); }
  float uniform(float lo, float hi);  // [lo, hi)
  float normal(float mean, float stddev);
  uint64_t below(uint64_t n);  // uniform in [0, n), unbiased; requires n > 0

  std::string state() const;            // textual engine state, for checkpoints
  void set_state(const std::string& s);  // throws std::invalid_argument when malformed

 private:
  std::mt19937_64 engine_;
};

void uniform_(Tensor& t, float lo, float hi, Generator& gen);
void normal_(Tensor& t, float mean, float stddev, Generator& gen);

}  // namespace quartet::engine
