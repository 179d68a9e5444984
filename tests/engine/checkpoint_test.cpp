#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/memory.h"
#include "engine/model.h"
#include "engine/nn.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "tests/engine/stage_net.h"

namespace quartet::engine {
namespace {

using namespace test_net;

TEST(Checkpoint, StagesGiveTheSameGradientsAsWithoutCheckpointing) {
  auto plain = make_net(), ckpt = make_net();
  ckpt->set_checkpointing(true);
  Tensor x1 = input(), x2 = input();
  x1.set_requires_grad(true);
  x2.set_requires_grad(true);
  Tensor l1 = loss_of(*plain, x1), l2 = loss_of(*ckpt, x2);
  EXPECT_EQ(l1.item(), l2.item());
  l1.backward();
  l2.backward();
  const NamedTensors p1 = plain->named_parameters(), p2 = ckpt->named_parameters();
  ASSERT_EQ(p1.size(), p2.size());
  // The recompute runs the same kernels on the same values: equal to float rounding.
  for (size_t i = 0; i < p1.size(); ++i) {
    ASSERT_TRUE(p2[i].second.grad().defined()) << p2[i].first;
    EXPECT_LE(max_abs_diff(p1[i].second.grad(), p2[i].second.grad()), 1e-6f) << p1[i].first;
  }
  EXPECT_LE(max_abs_diff(x1.grad(), x2.grad()), 1e-6f);
}

TEST(Checkpoint, RunningStatisticsAndDropoutDrawsMoveOncePerForward) {
  auto plain = make_net(), ckpt = make_net();
  ckpt->set_checkpointing(true);
  for (int step = 0; step < 2; ++step) {
    loss_of(*plain, input()).backward();
    loss_of(*ckpt, input()).backward();
  }
  const NamedTensors b1 = plain->named_buffers(), b2 = ckpt->named_buffers();
  ASSERT_EQ(b1.size(), 2u);
  for (size_t i = 0; i < b1.size(); ++i) EXPECT_EQ(b1[i].second.to_vector(), b2[i].second.to_vector()) << b1[i].first;
  ASSERT_EQ(plain->generators().size(), 1u);
  EXPECT_EQ(plain->generators()[0]->state(), ckpt->generators()[0]->state());
}

TEST(Checkpoint, APassedThroughInputIsReturnedItselfAndTheRestRequireGrad) {
  auto m = make_net();
  m->set_checkpointing(true);
  Tensor x = input();
  const TensorList stem = m->forward_stages({x}, 0, 1);
  const TensorList fork = m->forward_stages(stem, 1, 2);
  ASSERT_EQ(fork.size(), 2u);
  EXPECT_TRUE(fork[0].same(stem[0]));
  EXPECT_TRUE(fork[1].requires_grad());
  EXPECT_NE(fork[1].grad_fn(), nullptr);
}

TEST(Checkpoint, EachParameterHookFiresOncePerBackward) {
  auto m = make_net();
  m->set_checkpointing(true);
  std::vector<int> calls;
  std::vector<Tensor> params = m->parameters();
  calls.assign(params.size(), 0);
  for (size_t i = 0; i < params.size(); ++i) params[i].add_grad_ready_hook([&calls, i](const Tensor&) { ++calls[i]; });
  loss_of(*m, input()).backward();
  for (size_t i = 0; i < calls.size(); ++i) EXPECT_EQ(calls[i], 1) << "parameter " << i;
}

TEST(Checkpoint, WithoutGradModeNothingIsRecorded) {
  auto m = make_net();
  m->set_checkpointing(true);
  NoGradScope no_grad;
  Tensor y = m->forward(input());
  EXPECT_FALSE(y.requires_grad());
}

TEST(Checkpoint, BackwardFromSeveralCutTensorsMatchesTheUncheckpointedLowerHalf) {
  // The lower half of a model cut after "fork": backward starts from both of its tensors,
  // as a split client's does when the gradients at the cut come back.
  auto plain = make_net(), ckpt = make_net();
  ckpt->set_checkpointing(true);
  const TensorList a = plain->forward_stages({input()}, 0, 2), b = ckpt->forward_stages({input()}, 0, 2);
  TensorList grads;
  for (const Tensor& t : a) {
    Tensor g = Tensor::empty(t.shape());
    Generator gen(9);
    normal_(g, 0.0f, 1.0f, gen);
    grads.push_back(g);
  }
  run_backward(a, grads);
  run_backward(b, grads);
  const NamedTensors p1 = plain->named_parameters(), p2 = ckpt->named_parameters();
  for (size_t i = 0; i < p1.size(); ++i) {
    if (!p1[i].second.grad().defined()) continue;  // the upper half's
    EXPECT_LE(max_abs_diff(p1[i].second.grad(), p2[i].second.grad()), 1e-6f) << p1[i].first;
  }
}

TEST(Checkpoint, ASecondBackwardThroughTheSameForwardThrows) {
  auto m = make_net();
  m->set_checkpointing(true);
  Tensor loss = loss_of(*m, input());
  loss.backward();
  EXPECT_THROW(loss.backward(), std::logic_error);
}

// The gradients a recompute hands back to the stage before are in flight, like any
// gradient between ops: the gradients tag holds the parameters' alone, as without it.
TEST(Checkpoint, InputGradientsAreWorkspaceNotGradients) {
  constexpr int kGradients = static_cast<int>(MemTag::gradients);
  auto peak_of = [](bool checkpointing) {
    auto m = make_net(256);
    m->set_checkpointing(checkpointing);
    Tensor x = input(64, 8);
    reset_memory_peaks();
    const int64_t base = memory_stats().current[kGradients];
    loss_of(*m, x).backward();
    return memory_stats().peak[kGradients] - base;
  };
  EXPECT_EQ(peak_of(true), peak_of(false));
}

// A deep stack of wide stages: without checkpointing backward needs every stage's saved
// tensors at once, with it only the stage boundaries and one stage's at a time.
int64_t activation_peak(bool checkpointing) {
  Generator gen(1);
  auto m = std::make_shared<Model>();
  for (int i = 0; i < 8; ++i) {
    auto s = std::make_shared<Sequential>();
    s->emplace<Linear>(64, 256, gen).emplace<ReLU>().emplace<Linear>(256, 64, gen).emplace<Tanh>();
    // append: GCC 12 at -O3 takes "s" + std::to_string(i) here for an overlapping memcpy
    // (-Wrestrict, a false positive).
    m->add_stage(std::string("s").append(std::to_string(i)), s);
  }
  m->set_checkpointing(checkpointing);
  Tensor x = input(128, 64);
  reset_memory_peaks();
  const int64_t base = memory_stats().current[static_cast<int>(MemTag::activations)];
  mean(m->forward(x)).backward();
  return memory_stats().peak[static_cast<int>(MemTag::activations)] - base;
}

TEST(Checkpoint, TheActivationPeakFalls) {
  const int64_t plain = activation_peak(false), ckpt = activation_peak(true);
  // Plain keeps 8 stages x (256 + 256 + 64 + 64) floats per sample; checkpointed, the 8
  // boundaries of 64 and one stage's saved tensors: well under half.
  EXPECT_LT(ckpt * 2, plain) << "checkpointed " << ckpt << " bytes, plain " << plain;
}

}  // namespace
}  // namespace quartet::engine
