#pragma once

// Finite-difference gradient check for any op (ggml's test-backend-ops idea): the op's
// output is reduced with fixed random weights, so every output element matters, and
// each input element is nudged by ±eps to compare the analytic gradient with the
// central difference.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "engine/threads.h"

namespace quartet::engine::testing {

struct GradcheckOptions {
  float eps = 1e-2f;
  float atol = 2e-3f;
  float rtol = 2e-2f;
  uint64_t seed = 7;
};

inline Tensor random_tensor(const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Generator gen(seed);
  Tensor t = Tensor::empty(shape);
  uniform_(t, lo, hi, gen);
  return t;
}

// A random tensor marked requires_grad: a parameter for gradcheck.
inline Tensor param(const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = random_tensor(shape, seed, lo, hi);
  t.set_requires_grad(true);
  return t;
}

// A tensor with the given values, marked requires_grad.
inline Tensor leaf(const Shape& shape, const std::vector<float>& values) {
  Tensor t = Tensor::from_vector(shape, values);
  t.set_requires_grad(true);
  return t;
}

inline void expect_near(const std::vector<float>& actual, const std::vector<float>& expected, float tol) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) EXPECT_NEAR(actual[i], expected[i], tol) << "element " << i;
}

// Passes when fn throws std::invalid_argument whose message contains every part.
template <class Fn>
::testing::AssertionResult throws_invalid_argument(Fn&& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    for (const std::string& part : parts)
      if (what.find(part) == std::string::npos)
        return ::testing::AssertionFailure() << "message \"" << what << "\" lacks \"" << part << "\"";
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "no std::invalid_argument thrown";
}

// Sets the compute threads for one test, whatever the machine has.
class ThreadsScope {
 public:
  explicit ThreadsScope(int n) : saved_(compute_threads()) { set_compute_threads(n); }
  ~ThreadsScope() { set_compute_threads(saved_); }
  ThreadsScope(const ThreadsScope&) = delete;
  ThreadsScope& operator=(const ThreadsScope&) = delete;

 private:
  int saved_;
};

// fn maps the inputs to one output tensor. Every input marked requires_grad is checked.
inline ::testing::AssertionResult gradcheck(const std::function<Tensor(const TensorList&)>& fn,
                                            TensorList inputs, GradcheckOptions opt = {}) {
  Tensor probe;
  {
    NoGradScope no_grad;
    probe = fn(inputs);
  }
  Tensor weights = random_tensor(probe.shape(), opt.seed);
  auto objective = [&](const TensorList& in) {
    NoGradScope no_grad;
    Tensor y = fn(in);
    double s = 0.0;
    const float* py = y.data();
    const float* pw = weights.data();
    for (int64_t i = 0; i < y.numel(); ++i) s += static_cast<double>(py[i]) * pw[i];
    return s;
  };
  for (Tensor& t : inputs) t.zero_grad();
  Tensor y = fn(inputs);
  sum(mul(y, weights)).backward();

  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& x = inputs[k];
    if (!x.requires_grad()) continue;
    Tensor g = x.grad();
    if (!g.defined()) return ::testing::AssertionFailure() << "input " << k << " got no gradient";
    float* px = x.data();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const float saved = px[i];
      px[i] = saved + opt.eps;
      const double up = objective(inputs);
      px[i] = saved - opt.eps;
      const double down = objective(inputs);
      px[i] = saved;
      const double numeric = (up - down) / (2.0 * opt.eps);
      const double analytic = g.data()[i];
      if (std::abs(numeric - analytic) > opt.atol + opt.rtol * std::abs(numeric))
        return ::testing::AssertionFailure()
               << "input " << k << " element " << i << ": analytic " << analytic << ", numeric " << numeric;
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace quartet::engine::testing
