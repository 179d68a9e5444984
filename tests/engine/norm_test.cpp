#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/autograd.h"
#include "engine/nn.h"
#include "engine/ops.h"
#include "tests/engine/gradcheck.h"

namespace quartet::engine {
namespace {

using testing::expect_near;
using testing::gradcheck;
using testing::param;
using testing::random_tensor;
using testing::throws_invalid_argument;

// Ranks as threads over an in-memory sum (Gloo's test style): each all_reduce_sum posts
// the rank's tensor, waits for all, and adds the posts in rank order, so every rank gets
// the same bits.
class ThreadGroup {
 public:
  explicit ThreadGroup(int ranks) : posts_(ranks), barrier_(ranks) {}

  class Reducer : public StatsReducer {
   public:
    Reducer(ThreadGroup& group, int rank) : group_(group), rank_(rank) {}
    void all_reduce_sum(Tensor& t) override {
      ++calls;
      group_.posts_[rank_] = t.to_vector();
      group_.barrier_.arrive_and_wait();  // every rank has posted
      std::vector<float> total(t.numel(), 0.0f);
      for (const auto& post : group_.posts_)
        for (size_t i = 0; i < total.size(); ++i) total[i] += post[i];
      group_.barrier_.arrive_and_wait();  // every rank has read: posts may be overwritten
      std::copy(total.begin(), total.end(), t.data());
    }
    int calls = 0;

   private:
    ThreadGroup& group_;
    int rank_;
  };

 private:
  std::vector<std::vector<float>> posts_;
  std::barrier<> barrier_;
};

// Samples [begin, end) of x, as a new leaf.
Tensor samples(const Tensor& x, int64_t begin, int64_t end) {
  const int64_t per = x.numel() / x.size(0);
  Shape shape = x.shape();
  shape[0] = end - begin;
  std::vector<float> v(x.data() + begin * per, x.data() + end * per);
  Tensor t = Tensor::from_vector(shape, v);
  t.set_requires_grad(true);
  return t;
}

// One rank's (or the whole batch's) forward and backward through batch_norm.
struct BatchNormRun {
  Tensor x, weight, bias, running_mean, running_var, y;

  BatchNormRun(Tensor x_in, const Tensor& w, const Tensor& b, const Tensor& probe, StatsReducer* reducer)
      : x(std::move(x_in)), weight(w.clone()), bias(b.clone()) {
    weight.set_requires_grad(true);
    bias.set_requires_grad(true);
    running_mean = Tensor::full({x.size(1)}, 0.5f);
    running_var = Tensor::full({x.size(1)}, 2.0f);
    y = batch_norm(x, weight, bias, running_mean, running_var, true, {.momentum = 0.3f, .reducer = reducer});
    sum(mul(y, probe)).backward();  // a loss that sums over samples: ranks' parts add up
  }
};

// SyncBatchNorm over two thread-ranks, each holding half the batch, against batch_norm
// on the whole batch: outputs, input gradients, summed parameter gradients and running
// statistics all agree.
// x uniform in [lo, hi]: away from zero, so that the variance is not the mean square.
void expect_two_ranks_match_whole_batch(const Shape& shape, float lo = 2.0f, float hi = 5.0f) {
  const int64_t n = shape[0], half = n / 2;
  Tensor x = random_tensor(shape, 1, lo, hi);
  Tensor w = random_tensor({shape[1]}, 2, 0.5f, 1.5f), b = random_tensor({shape[1]}, 3);
  Tensor probe = random_tensor(shape, 4);

  BatchNormRun whole(samples(x, 0, n), w, b, probe, nullptr);

  ThreadGroup group(2);
  ThreadGroup::Reducer r0(group, 0), r1(group, 1);
  std::unique_ptr<BatchNormRun> part0, part1;
  auto rank = [&](std::unique_ptr<BatchNormRun>& out, int64_t begin, int64_t end, StatsReducer* r) {
    return std::thread([&out, &x, &w, &b, &probe, begin, end, r] {
      out = std::make_unique<BatchNormRun>(samples(x, begin, end), w, b, samples(probe, begin, end), r);
    });
  };
  std::thread t0 = rank(part0, 0, half, &r0), t1 = rank(part1, half, n, &r1);
  t0.join();
  t1.join();

  const float tol = 1e-5f;
  expect_near(concat({part0->y, part1->y}, 0).to_vector(), whole.y.to_vector(), tol);
  expect_near(concat({part0->x.grad(), part1->x.grad()}, 0).to_vector(), whole.x.grad().to_vector(), tol);
  auto summed = [](const Tensor& a, const Tensor& b) { return add(a, b).to_vector(); };
  expect_near(summed(part0->weight.grad(), part1->weight.grad()), whole.weight.grad().to_vector(), tol);
  expect_near(summed(part0->bias.grad(), part1->bias.grad()), whole.bias.grad().to_vector(), tol);
  for (const BatchNormRun* part : {part0.get(), part1.get()}) {
    expect_near(part->running_mean.to_vector(), whole.running_mean.to_vector(), tol);
    expect_near(part->running_var.to_vector(), whole.running_var.to_vector(), tol);
  }
  // Two all-reduces of statistics forward (the mean, then sums around it), one of
  // gradient sums backward.
  EXPECT_EQ(r0.calls, 3);
  EXPECT_EQ(r1.calls, 3);
}

// ---- batch norm: forward by hand ----

TEST(BatchNorm, TrainingNormalisesWithBatchMeanAndBiasedVariance) {
  // One channel, values 1 3 | 5 7 over two samples: mean 4, biased variance 5.
  Tensor x = Tensor::from_vector({2, 1, 1, 2}, {1, 3, 5, 7});
  Tensor rm = Tensor::zeros({1}), rv = Tensor::full({1}, 1.0f);
  Tensor y = batch_norm(x, Tensor::from_vector({1}, {2}), Tensor::from_vector({1}, {1}), rm, rv, true);
  const float s = std::sqrt(5.0f + 1e-5f);
  expect_near(y.to_vector(), {1 - 6 / s, 1 - 2 / s, 1 + 2 / s, 1 + 6 / s}, 1e-6f);
}

TEST(BatchNorm, TrainingUpdatesRunningStatsWithMomentumAndUnbiasedVariance) {
  // Mean 4, unbiased variance 20 / 3.
  Tensor x = Tensor::from_vector({2, 1, 1, 2}, {1, 3, 5, 7});
  Tensor rm = Tensor::zeros({1}), rv = Tensor::full({1}, 1.0f);
  batch_norm(x, Tensor(), Tensor(), rm, rv, true, {.momentum = 0.1f});
  EXPECT_NEAR(rm.item(), 0.4f, 1e-6f);
  EXPECT_NEAR(rv.item(), 0.9f + 0.1f * 20.0f / 3.0f, 1e-6f);
  batch_norm(x, Tensor(), Tensor(), rm, rv, true, {.momentum = 0.5f});
  EXPECT_NEAR(rm.item(), 0.5f * 0.4f + 0.5f * 4.0f, 1e-6f);
}

TEST(BatchNorm, StatisticsAreTakenPerChannelOverSamplesAndPositions) {
  // Channel 0 holds 0 2 | 4 6 (mean 3, variance 5), channel 1 a constant 9.
  Tensor x = Tensor::from_vector({2, 2, 2}, {0, 2, 9, 9, 4, 6, 9, 9});
  Tensor rm = Tensor::zeros({2}), rv = Tensor::full({2}, 1.0f);
  Tensor y = batch_norm(x, Tensor(), Tensor(), rm, rv, true);
  const float s = std::sqrt(5.0f + 1e-5f);
  expect_near(y.to_vector(), {-3 / s, -1 / s, 0, 0, 1 / s, 3 / s, 0, 0}, 1e-6f);
  expect_near(rm.to_vector(), {0.3f, 0.9f}, 1e-6f);
}

TEST(BatchNorm, EvalModeUsesRunningStatsAndLeavesThemUnchanged) {
  Tensor x = Tensor::from_vector({1, 2, 2}, {1, 3, 5, 7});
  Tensor rm = Tensor::from_vector({2}, {1, 5}), rv = Tensor::from_vector({2}, {4, 16});
  Tensor y = batch_norm(x, Tensor(), Tensor::from_vector({2}, {0, 10}), rm, rv, false, {.eps = 0.0f});
  EXPECT_EQ(y.to_vector(), (std::vector<float>{0, 1, 10, 10.5f}));
  EXPECT_EQ(rm.to_vector(), (std::vector<float>{1, 5}));
  EXPECT_EQ(rv.to_vector(), (std::vector<float>{4, 16}));
}

TEST(BatchNorm, LargeMeanDoesNotCancelTheVariance) {
  // A mean 10^4 times the spread: E[x^2] - E[x]^2 in float would lose it entirely.
  std::vector<float> v;
  for (int i = 0; i < 64; ++i) v.push_back(1000.0f + (i % 2 == 0 ? 0.1f : -0.1f));
  Tensor x = Tensor::from_vector({64, 1}, v);
  Tensor rm = Tensor::zeros({1}), rv = Tensor::full({1}, 1.0f);
  Tensor y = batch_norm(x, Tensor(), Tensor(), rm, rv, true, {.eps = 0.0f});
  EXPECT_NEAR(y.to_vector()[0], 1.0f, 1e-2f);
  EXPECT_NEAR(y.to_vector()[1], -1.0f, 1e-2f);
}

// ---- batch norm: gradients ----

// batch_norm with fresh running statistics on every call, so each evaluation of a
// finite difference sees the same ones.
Tensor fresh_batch_norm(const TensorList& in, bool training) {
  Tensor rm = Tensor::full({in[0].size(1)}, 0.2f), rv = Tensor::full({in[0].size(1)}, 1.5f);
  const Tensor w = in.size() > 1 ? in[1] : Tensor(), b = in.size() > 2 ? in[2] : Tensor();
  return batch_norm(in[0], w, b, rm, rv, training);
}

TEST(BatchNorm, Training2dGradientsMatchFiniteDifferences) {
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return fresh_batch_norm(in, true); },
                        {param({3, 2, 3, 3}, 1), param({2}, 2, 0.5f, 1.5f), param({2}, 3)}));
}

TEST(BatchNorm, Training3dGradientsMatchFiniteDifferences) {
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return fresh_batch_norm(in, true); },
                        {param({2, 2, 3, 2, 3}, 1), param({2}, 2, 0.5f, 1.5f), param({2}, 3)}));
}

TEST(BatchNorm, TrainingWithoutAffineGradientsMatchFiniteDifferences) {
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return fresh_batch_norm(in, true); }, {param({5, 3}, 1)}));
}

TEST(BatchNorm, EvalGradientsMatchFiniteDifferences) {
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return fresh_batch_norm(in, false); },
                        {param({2, 2, 3, 3}, 1), param({2}, 2), param({2}, 3)}));
}

// ---- SyncBatchNorm ----

TEST(SyncBatchNorm, TwoRanksWithHalfTheBatchEachEqualBatchNormOnTheWholeBatch2d) {
  expect_two_ranks_match_whole_batch({4, 3, 3, 5});
}

TEST(SyncBatchNorm, TwoRanksWithHalfTheBatchEachEqualBatchNormOnTheWholeBatch3d) {
  expect_two_ranks_match_whole_batch({4, 2, 3, 2, 3});
}

// The running mean (0) is far from the batch's (1000) and the spread small: sums around
// the running mean would lose the variance to float rounding, sums around the batch
// mean keep it.
TEST(SyncBatchNorm, AMeanFarFromTheRunningMeanDoesNotCancelTheVariance) {
  expect_two_ranks_match_whole_batch({4, 3, 3, 5}, 1000.0f, 1000.5f);
}

TEST(SyncBatchNorm, EvalModeDoesNotCallTheReducer) {
  ThreadGroup group(1);
  ThreadGroup::Reducer r(group, 0);
  Tensor x = param({2, 2, 3}, 1), rm = Tensor::zeros({2}), rv = Tensor::full({2}, 1.0f);
  sum(batch_norm(x, Tensor(), Tensor(), rm, rv, false, {.reducer = &r})).backward();
  EXPECT_EQ(r.calls, 0);
}

TEST(SyncBatchNorm, OneSamplePerRankIsAllowed) {
  // Alone, one value per channel cannot be normalised; across ranks it can.
  ThreadGroup group(1);
  ThreadGroup::Reducer r(group, 0);
  Tensor rm = Tensor::zeros({2}), rv = Tensor::full({2}, 1.0f);
  EXPECT_NO_THROW(batch_norm(Tensor::zeros({1, 2}), Tensor(), Tensor(), rm, rv, true, {.reducer = &r}));
}

// data_parallel reaches a model's BatchNorm layers through the public module visitor.
TEST(SyncBatchNorm, VisitorReachesEveryNestedBatchNorm) {
  auto inner = std::make_shared<Sequential>();
  inner->emplace<BatchNorm>(2).emplace<ReLU>();
  Sequential outer;
  outer.emplace<BatchNorm>(2).add(inner);
  std::vector<std::string> seen;
  int norms = 0;
  outer.visit([&](Module& m) {
    seen.push_back(dynamic_cast<Sequential*>(&m) ? "seq" : dynamic_cast<BatchNorm*>(&m) ? "bn" : "other");
    if (dynamic_cast<BatchNorm*>(&m)) ++norms;
  });
  EXPECT_EQ(seen, (std::vector<std::string>{"seq", "bn", "seq", "bn", "other"}));
  EXPECT_EQ(norms, 2);
}

// ---- batch norm: bad input ----

TEST(BatchNorm, RejectsInputOfWrongRank) {
  Tensor rm = Tensor::zeros({3}), rv = Tensor::zeros({3});
  EXPECT_TRUE(throws_invalid_argument(
      [&] { batch_norm(Tensor::zeros({3}), Tensor(), Tensor(), rm, rv, true); },
      {"batch_norm: input (N, C, *spatial)", "[3]"}));
}

TEST(BatchNorm, RejectsWeightWithWrongChannelCount) {
  Tensor rm = Tensor::zeros({3}), rv = Tensor::zeros({3});
  EXPECT_TRUE(throws_invalid_argument(
      [&] { batch_norm(Tensor::zeros({2, 3, 4, 4}), Tensor::zeros({4}), Tensor(), rm, rv, true); },
      {"batch_norm: weight (C) = (3) expected, got [4] (input [2, 3, 4, 4])"}));
}

TEST(BatchNorm, RejectsRunningStatsWithWrongChannelCount) {
  Tensor rm = Tensor::zeros({3}), rv = Tensor::zeros({2});
  EXPECT_TRUE(throws_invalid_argument(
      [&] { batch_norm(Tensor::zeros({2, 3, 4, 4}), Tensor(), Tensor(), rm, rv, false); },
      {"batch_norm: running_var (C) = (3) expected, got [2] (input [2, 3, 4, 4])"}));
}

TEST(BatchNorm, RejectsMissingRunningStats) {
  Tensor rm, rv;
  EXPECT_TRUE(throws_invalid_argument(
      [&] { batch_norm(Tensor::zeros({2, 3}), Tensor(), Tensor(), rm, rv, true); },
      {"batch_norm", "running_mean and running_var", "[2, 3]"}));
}

TEST(BatchNorm, TrainingRejectsOneValuePerChannel) {
  Tensor rm = Tensor::zeros({3}), rv = Tensor::zeros({3});
  EXPECT_TRUE(throws_invalid_argument(
      [&] { batch_norm(Tensor::zeros({1, 3, 1, 1}), Tensor(), Tensor(), rm, rv, true); },
      {"batch_norm", "more than one value per channel", "[1, 3, 1, 1]"}));
}

TEST(BatchNorm, RejectsMomentumOutOfRange) {
  Tensor rm = Tensor::zeros({3}), rv = Tensor::zeros({3});
  EXPECT_TRUE(throws_invalid_argument(
      [&] { batch_norm(Tensor::zeros({2, 3}), Tensor(), Tensor(), rm, rv, true, {.momentum = 1.5f}); },
      {"batch_norm", "momentum", "[2, 3]"}));
}

// ---- the BatchNorm module ----

TEST(BatchNormModule, HasPyTorchNamedParametersAndBuffers) {
  BatchNorm bn(3);
  const NamedTensors state = bn.state_dict();
  ASSERT_EQ(state.size(), 4u);
  EXPECT_EQ(state[0].first, "weight");
  EXPECT_EQ(state[1].first, "bias");
  EXPECT_EQ(state[2].first, "running_mean");
  EXPECT_EQ(state[3].first, "running_var");
  EXPECT_EQ(state[0].second.to_vector(), (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(state[1].second.to_vector(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(state[2].second.to_vector(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(state[3].second.to_vector(), (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(bn.parameters().size(), 2u);
}

TEST(BatchNormModule, TrainingUpdatesRunningStatsAndEvalUsesThem) {
  BatchNorm bn(1);
  Tensor x = Tensor::from_vector({2, 1, 1, 2}, {1, 3, 5, 7});
  bn(x);
  EXPECT_NEAR(bn.running_mean.item(), 0.4f, 1e-6f);
  bn.eval();
  Tensor y = bn(x);
  const float s = std::sqrt(bn.running_var.item() + 1e-5f);
  expect_near(y.to_vector(), {0.6f / s, 2.6f / s, 4.6f / s, 6.6f / s}, 1e-5f);
  EXPECT_NEAR(bn.running_mean.item(), 0.4f, 1e-6f);
}

TEST(BatchNormModule, NormalisesVolumes) {
  BatchNorm bn(2);
  Tensor y = bn(random_tensor({2, 2, 3, 2, 3}, 1, 3.0f, 4.0f));
  double s = 0.0;
  for (float v : y.to_vector()) s += v;
  EXPECT_NEAR(s / static_cast<double>(y.numel()), 0.0, 1e-5);
}

TEST(BatchNormModule, SetReducerMakesItSync) {
  ThreadGroup group(1);
  ThreadGroup::Reducer r(group, 0);
  BatchNorm bn(2);
  bn.set_reducer(&r);
  Tensor x = param({2, 2, 3}, 1);
  sum(mul(bn(x), random_tensor({2, 2, 3}, 2))).backward();
  EXPECT_EQ(r.calls, 3);  // the mean and the sums forward, gradient sums backward
}

// ---- group norm ----

TEST(GroupNorm, ForwardMatchesHandComputedValues) {
  // Groups {1 2 3 4} (mean 2.5, variance 1.25) and {10 10 10 14} (mean 11, variance 3).
  Tensor x = Tensor::from_vector({1, 4, 1, 2}, {1, 2, 3, 4, 10, 10, 10, 14});
  Tensor y = group_norm(x, 2, Tensor(), Tensor(), 0.0f);
  const float a = std::sqrt(1.25f), b = std::sqrt(3.0f);
  expect_near(y.to_vector(), {-1.5f / a, -0.5f / a, 0.5f / a, 1.5f / a,  //
                              -1 / b, -1 / b, -1 / b, 3 / b},
              1e-6f);
}

TEST(GroupNorm, ScalesAndShiftsPerChannel) {
  Tensor x = Tensor::from_vector({1, 2, 2}, {0, 2, 5, 9});  // instance norm: each channel -> -1, 1
  Tensor y = group_norm(x, 2, Tensor::from_vector({2}, {2, 3}), Tensor::from_vector({2}, {1, -1}), 0.0f);
  expect_near(y.to_vector(), {-1, 3, -4, 2}, 1e-6f);
}

TEST(GroupNorm, StatisticsArePerSample) {
  // The same values in two samples, one shifted by 100: identical outputs.
  Tensor x = Tensor::from_vector({2, 2, 2}, {1, 2, 4, 8, 101, 102, 104, 108});
  const std::vector<float> y = group_norm(x, 1, Tensor(), Tensor()).to_vector();
  expect_near({y.begin() + 4, y.end()}, {y.begin(), y.begin() + 4}, 1e-5f);
}

TEST(GroupNorm, Gradients2dMatchFiniteDifferences) {
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return group_norm(in[0], 2, in[1], in[2]); },
                        {param({2, 4, 3, 3}, 1), param({4}, 2, 0.5f, 1.5f), param({4}, 3)}));
}

TEST(GroupNorm, Gradients3dMatchFiniteDifferences) {
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return group_norm(in[0], 3, in[1], in[2]); },
                        {param({2, 6, 2, 3, 3}, 1), param({6}, 2, 0.5f, 1.5f), param({6}, 3)}));
}

TEST(GroupNorm, InstanceNormGradientsMatchFiniteDifferences) {
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return group_norm(in[0], 3, Tensor(), Tensor()); },
                        {param({2, 3, 3, 5}, 1)}));
}

TEST(GroupNorm, RejectsGroupsThatDoNotDivideTheChannels) {
  EXPECT_TRUE(throws_invalid_argument([] { group_norm(Tensor::zeros({2, 4, 3, 3}), 3, Tensor(), Tensor()); },
                                      {"group_norm", "[2, 4, 3, 3]", "4 channels", "groups 3"}));
}

TEST(GroupNorm, RejectsBiasWithWrongChannelCount) {
  EXPECT_TRUE(throws_invalid_argument(
      [] { group_norm(Tensor::zeros({2, 4, 3}), 2, Tensor(), Tensor::zeros({2})); },
      {"group_norm: bias (C) = (4) expected, got [2] (input [2, 4, 3])"}));
}

TEST(GroupNorm, RejectsInputOfWrongRank) {
  EXPECT_TRUE(throws_invalid_argument([] { group_norm(Tensor::zeros({4}), 1, Tensor(), Tensor()); },
                                      {"group_norm: input (N, C, *spatial)", "[4]"}));
}

// ---- the GroupNorm and InstanceNorm modules ----

TEST(GroupNormModule, HasUnitWeightAndZeroBias) {
  GroupNorm gn(2, 4);
  EXPECT_EQ(gn.weight.to_vector(), (std::vector<float>{1, 1, 1, 1}));
  EXPECT_EQ(gn.bias.to_vector(), (std::vector<float>{0, 0, 0, 0}));
  EXPECT_EQ(gn.named_parameters().size(), 2u);
}

TEST(GroupNormModule, RejectsGroupsThatDoNotDivideTheChannels) {
  EXPECT_TRUE(throws_invalid_argument([] { GroupNorm gn(3, 4); }, {"GroupNorm", "3 groups for 4 channels"}));
}

TEST(InstanceNormModule, HasNoParametersByDefaultAndNormalisesEachChannelOfEachSample) {
  InstanceNorm in(3);
  EXPECT_TRUE(in.named_parameters().empty());
  Tensor y = in(random_tensor({2, 3, 2, 3, 2}, 1, 0.0f, 5.0f));
  const std::vector<float> v = y.to_vector();
  for (int plane = 0; plane < 6; ++plane) {
    double s = 0.0, s2 = 0.0;
    for (int i = 0; i < 12; ++i) {
      s += v[plane * 12 + i];
      s2 += v[plane * 12 + i] * v[plane * 12 + i];
    }
    EXPECT_NEAR(s / 12, 0.0, 1e-5) << "plane " << plane;
    EXPECT_NEAR(s2 / 12, 1.0, 1e-3) << "plane " << plane;
  }
}

TEST(InstanceNormModule, AffineAddsWeightAndBias) {
  InstanceNorm in(3, 1e-5f, true);
  EXPECT_EQ(in.named_parameters().size(), 2u);
}

}  // namespace
}  // namespace quartet::engine
