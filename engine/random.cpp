#include "engine/random.h"

#include <cmath>
#include <numbers>
#include <sstream>
#include <stdexcept>

namespace quartet::engine {

float Generator::uniform(float lo, float hi) {
  // 24 random bits give every float in [0, 1) with spacing 2^-24.
  const float u = static_cast<float>(engine_() >> 40) * (1.0f / 16777216.0f);
  return lo + (hi - lo) * u;
}

float Generator::normal(float mean, float stddev) {
  // Box-Muller on doubles in (0, 1].
  const double u1 = (static_cast<double>(engine_() >> 11) + 1.0) / 9007199254740992.0;
  const double u2 = static_cast<double>(engine_() >> 11) / 9007199254740992.0;
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  return mean + stddev * static_cast<float>(z);
}

uint64_t Generator::below(uint64_t n) {
  if (n == 0) throw std::invalid_argument("Generator::below: n must be > 0");
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do x = engine_(); while (x >= limit);
  return x % n;
}

std::string Generator::state() const {
  std::ostringstream out;
  out << engine_;
  return out.str();
}

void Generator::set_state(const std::string& s) {
  std::istringstream in(s);
  std::mt19937_64 e;
  in >> e;
  if (in.fail()) throw std::invalid_argument("random generator state is malformed");
  engine_ = e;
}

void uniform_(Tensor& t, float lo, float hi, Generator& gen) {
  float* p = t.data();
  for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = gen.uniform(lo, hi);
}

void normal_(Tensor& t, float mean, float stddev, Generator& gen) {
  float* p = t.data();
  for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = gen.normal(mean, stddev);
}

}  // namespace quartet::engine
