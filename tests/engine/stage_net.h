#pragma once

// A small model of four stages for the tests of what runs per stage (activation
// checkpointing, stage hooks): a stem, a stage whose input passes through beside its
// output (a skip connection), a stage with BatchNorm and Dropout, and a head.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <vector>

#include "engine/model.h"
#include "engine/nn.h"
#include "engine/ops.h"
#include "engine/random.h"

namespace quartet::engine::test_net {

// {x} -> {x, relu(linear(x))}: the input passes through as a second tensor, as a skip
// connection does.
class ForkStage : public Module {
 public:
  ForkStage(int64_t features, Generator& gen) : fc_(std::make_shared<Linear>(features, features, gen)) {
    register_module("fc", fc_);
  }
  TensorList forward_list(const TensorList& xs) override { return {xs[0], relu(fc_->forward(xs[0]))}; }
  Tensor forward(const Tensor&) override { throw std::logic_error("call forward_list"); }

 private:
  std::shared_ptr<Linear> fc_;
};

// {skip, h} -> {dropout(bn(linear(h))) + skip}: BatchNorm running statistics and a
// dropout mask, the two things a recompute must not disturb.
class JoinStage : public Module {
 public:
  JoinStage(int64_t features, Generator& gen)
      : fc_(std::make_shared<Linear>(features, features, gen)),
        bn_(std::make_shared<BatchNorm>(features)),
        drop_(std::make_shared<Dropout>(0.3f, 7)) {
    register_module("fc", fc_);
    register_module("bn", bn_);
    register_module("drop", drop_);
  }
  TensorList forward_list(const TensorList& xs) override {
    return {add(drop_->forward(bn_->forward(fc_->forward(xs[1]))), xs[0])};
  }
  Tensor forward(const Tensor&) override { throw std::logic_error("call forward_list"); }

 private:
  std::shared_ptr<Linear> fc_;
  std::shared_ptr<BatchNorm> bn_;
  std::shared_ptr<Dropout> drop_;
};

inline std::shared_ptr<Model> make_net(int64_t features = 16) {
  Generator gen(3);
  auto m = std::make_shared<Model>();
  auto stem = std::make_shared<Sequential>();
  stem->emplace<Linear>(8, features, gen).emplace<ReLU>();
  m->add_stage("stem", stem);
  m->add_stage("fork", std::make_shared<ForkStage>(features, gen));
  m->add_stage("join", std::make_shared<JoinStage>(features, gen));
  auto head = std::make_shared<Sequential>();
  head->emplace<Linear>(features, 4, gen);
  m->add_stage("head", head);
  return m;
}

inline Tensor input(int64_t n = 6, int64_t features = 8) {
  Tensor x = Tensor::empty({n, features});
  Generator gen(11);
  normal_(x, 0.0f, 1.0f, gen);
  return x;
}

inline float max_abs_diff(const Tensor& a, const Tensor& b) {
  const std::vector<float> va = a.to_vector(), vb = b.to_vector();
  EXPECT_EQ(va.size(), vb.size());
  float worst = 0.0f;
  for (size_t i = 0; i < va.size() && i < vb.size(); ++i) worst = std::max(worst, std::fabs(va[i] - vb[i]));
  return worst;
}

// One forward and backward of the mean of the logits times fixed weights.
inline Tensor loss_of(Model& m, const Tensor& x) {
  Tensor y = m.forward(x);
  Tensor w = Tensor::empty(y.shape());
  Generator gen(5);
  uniform_(w, -1.0f, 1.0f, gen);
  return mean(mul(y, w));
}

}  // namespace quartet::engine::test_net
