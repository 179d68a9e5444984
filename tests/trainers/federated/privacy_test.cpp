#include "trainers/federated/privacy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace quartet::trainers::federated {
namespace {

// The orders of TensorFlow Privacy's compute_dp_sgd_privacy_lib.compute_dp_sgd_privacy,
// which its published values below were computed over.
std::vector<double> tf_privacy_orders() {
  std::vector<double> o = {1.25, 1.5, 1.75, 2., 2.25, 2.5, 3., 3.5, 4., 4.5};
  for (int a = 5; a < 64; ++a) o.push_back(a);
  for (double a : {128., 256., 512.}) o.push_back(a);
  return o;
}

// ||(3, 0, 4)|| = 5 across two tensors: clipped to 1 it is (0.6, 0, 0.8).
TEST(FlPrivacy, ClipScalesAnUpdateAboveTheBoundToIt) {
  const Params global = {{1.0f, 1.0f}, {1.0f}};
  Params w = {{4.0f, 1.0f}, {5.0f}};
  EXPECT_DOUBLE_EQ(clip_update(w, global, 1.0), 5.0);
  EXPECT_FLOAT_EQ(w[0][0], 1.6f);
  EXPECT_FLOAT_EQ(w[0][1], 1.0f);
  EXPECT_FLOAT_EQ(w[1][0], 1.8f);
}

TEST(FlPrivacy, ClipLeavesAnUpdateWithinTheBoundUnchanged) {
  const Params global = {{1.0f, 1.0f}, {1.0f}};
  Params w = {{4.0f, 1.0f}, {5.0f}};
  const Params before = w;
  EXPECT_DOUBLE_EQ(clip_update(w, global, 5.0), 5.0);  // on the bound: not scaled
  EXPECT_EQ(w, before);
  EXPECT_THROW(clip_update(w, {{1.0f}}, 1.0), std::invalid_argument);
}

// 10^6 draws: the sample standard deviation of N(0, 0.5^2) is within 0.5 % of 0.5 with
// overwhelming probability (its own sd is 0.5 / sqrt(2 * 10^6) = 0.07 %); the seed is
// fixed, so the check is deterministic.
TEST(FlPrivacy, NoiseIsSeededByRoundAndHasTheAskedStd) {
  Params a = {std::vector<float>(1000000, 0.0f)};
  add_gaussian_noise(a, 0.5, 7, 3);
  double sum = 0.0, sq = 0.0;
  for (float v : a[0]) {
    sum += v;
    sq += static_cast<double>(v) * v;
  }
  const double n = static_cast<double>(a[0].size());
  const double mean = sum / n;
  EXPECT_NEAR(mean, 0.0, 0.0025);  // 5 standard errors
  EXPECT_NEAR(std::sqrt(sq / n - mean * mean), 0.5, 0.0025);

  Params b = {std::vector<float>(1000000, 0.0f)};
  add_gaussian_noise(b, 0.5, 7, 3);
  EXPECT_EQ(a, b);
  Params c = {std::vector<float>(1000000, 0.0f)};
  add_gaussian_noise(c, 0.5, 7, 4);
  EXPECT_NE(a, c);
}

// With DP each clipped update counts once, whatever its client's samples, and the mean
// of n gets noise of std z S / n.
TEST(FlPrivacy, DpFedAvgAveragesClippedUpdatesUnweightedAndScalesTheNoise) {
  DpFedAvg dp({.clip = 1.0, .noise_multiplier = 2.0, .delta = 1e-5}, 10, 4, 1);
  const Params global = {{0.0f}};
  Params small = {{0.5f}}, big = {{3.0f}};
  EXPECT_EQ(dp.admit(small, global, 100), 1);
  EXPECT_EQ(dp.admit(big, global, 7), 1);
  EXPECT_EQ(big[0][0], 1.0f);
  Params mean = weighted_average(std::vector<ClientResult>{{0, 1, small}, {1, 1, big}});
  EXPECT_EQ(mean[0][0], 0.75f);
  dp.release(mean, 1, 2);
  const nlohmann::json r = dp.record();
  EXPECT_DOUBLE_EQ(r["noise_std"].get<double>(), 1.0);  // 2 * 1 / 2
  EXPECT_EQ(r["clipped"], 1);
  EXPECT_DOUBLE_EQ(r["sampling_rate"].get<double>(), 0.4);
  EXPECT_EQ(r["rounds"], 1);
  EXPECT_NE(mean[0][0], 0.75f);

  DpFedAvg off({}, 10, 4, 1);
  EXPECT_EQ(off.admit(big, global, 7), 7);  // FedAvg's weight
}

// Without sampling the Gaussian mechanism's RDP is order / (2 z^2) (Mironov 2017).
TEST(FlPrivacy, FullParticipationRdpIsTheGaussianClosedForm) {
  EXPECT_DOUBLE_EQ(rdp_sampled_gaussian(1.0, 10.0, 20.0), 0.1);
  EXPECT_DOUBLE_EQ(rdp_sampled_gaussian(1.0, 0.5, 2.5), 5.0);
  EXPECT_EQ(rdp_sampled_gaussian(0.0, 1.0, 8.0), 0.0);
  EXPECT_TRUE(std::isinf(rdp_sampled_gaussian(0.3, 0.0, 8.0)));
}

// TensorFlow Privacy's rdp_accountant_test.py: compute_rdp(0.1, 2, 10, 5) = 0.07737, and
// at q = 0.01, z = 2.5, 50 steps the orders 1.5, 2.5 (fractional), 5, 50, 100.
TEST(FlPrivacy, RdpMatchesTensorFlowPrivacysPublishedValues) {
  const std::vector<double> five = {5.0};
  EXPECT_NEAR(compute_rdp(0.1, 2.0, 10, five)[0], 0.07737, 1e-5);
  const std::vector<double> orders = {1.5, 2.5, 5, 50, 100};
  const std::vector<double> expected = {0.00065, 0.001085, 0.00218075, 0.023846, 167.416307};
  const std::vector<double> rdp = compute_rdp(0.01, 2.5, 50, orders);
  for (size_t i = 0; i < orders.size(); ++i) EXPECT_NEAR(rdp[i], expected[i], 1e-5) << "order " << orders[i];
}

// TensorFlow Privacy's compute_dp_sgd_privacy_test.py: 60,000 examples, batch 150
// (q = 0.0025), z = 1.3, 15 epochs (6,000 steps), delta = 1e-5 gives eps 0.941870567 at
// order 19 with the classic conversion (before its commit be8175b of 2020-12-30,
// "Improved conversion from Renyi DP to approx DP") and 0.7242234026109595 at order 19
// with the improved one; 100,000 examples, batch 100, z = 1.0, 30 epochs, delta = 1e-7:
// 1.70928734 and 1.4154988495444845, order 13.
TEST(FlPrivacy, EpsilonMatchesTensorFlowPrivacysDpSgdExamples) {
  const std::vector<double> orders = tf_privacy_orders();
  const std::vector<double> rdp0 = compute_rdp(0.0025, 1.3, 6000, orders);
  const PrivacySpent classic0 = privacy_spent(orders, rdp0, 1e-5, RdpConversion::classic);
  EXPECT_NEAR(classic0.epsilon, 0.941870567, 1e-6);
  EXPECT_EQ(classic0.order, 19.0);
  const PrivacySpent improved0 = privacy_spent(orders, rdp0, 1e-5);
  EXPECT_NEAR(improved0.epsilon, 0.7242234026109595, 1e-6);
  EXPECT_EQ(improved0.order, 19.0);

  const std::vector<double> rdp1 = compute_rdp(0.001, 1.0, 30000, orders);
  EXPECT_NEAR(privacy_spent(orders, rdp1, 1e-7, RdpConversion::classic).epsilon, 1.70928734, 1e-6);
  const PrivacySpent improved1 = privacy_spent(orders, rdp1, 1e-7);
  EXPECT_NEAR(improved1.epsilon, 1.4154988495444845, 1e-6);
  EXPECT_EQ(improved1.order, 13.0);
}

// The same file's third case needs the fractional order 1.25: 10^8 examples, batch 1024,
// z = 0.1, 10 epochs (976,563 steps), delta = 1e-7: 5907984.81339406 (classic) and
// 5907982.31138195 (improved), both at order 1.25.
TEST(FlPrivacy, EpsilonAtAFractionalOrderMatchesTensorFlowPrivacy) {
  const std::vector<double> orders = tf_privacy_orders();
  const std::vector<double> rdp = compute_rdp(1024.0 / 1e8, 0.1, 976563, orders);
  const PrivacySpent classic = privacy_spent(orders, rdp, 1e-7, RdpConversion::classic);
  EXPECT_NEAR(classic.epsilon / 5907984.81339406, 1.0, 1e-8);
  EXPECT_EQ(classic.order, 1.25);
  EXPECT_NEAR(privacy_spent(orders, rdp, 1e-7).epsilon / 5907982.31138195, 1.0, 1e-8);
}

// TensorFlow Privacy's tutorials/README.md (2019, the classic conversion): its MNIST
// tutorial, `compute_dp_sgd_privacy.py --N=60000 --batch_size=256 --noise_multiplier=1.1
// --epochs=60 --delta=1e-5` (14,063 steps), "satisfies differential privacy with eps =
// 3.01"; its table gives 1.19 for z = 1.3 over 15 epochs (3,516 steps).
TEST(FlPrivacy, EpsilonMatchesTensorFlowPrivacysMnistTutorial) {
  const std::vector<double> orders = tf_privacy_orders();
  const double q = 256.0 / 60000.0;
  EXPECT_NEAR(privacy_spent(orders, compute_rdp(q, 1.1, 14063, orders), 1e-5, RdpConversion::classic).epsilon, 3.01,
              0.005);
  EXPECT_NEAR(privacy_spent(orders, compute_rdp(q, 1.3, 3516, orders), 1e-5, RdpConversion::classic).epsilon, 1.19,
              0.005);
}

// A constant RDP curve is pure DP: the largest order wins, eps = 1.1 - (log 1e-5 + log 32)
// / 31 + log(31 / 32) = 1.32783806176 (TensorFlow Privacy's rdp_accountant_test.py).
TEST(FlPrivacy, ImprovedConversionOfAConstantCurveMatchesTheHandValue) {
  std::vector<double> orders;
  for (int a = 2; a <= 32; ++a) orders.push_back(a);
  const std::vector<double> rdp(orders.size(), 1.1);
  const PrivacySpent p = privacy_spent(orders, rdp, 1e-5);
  EXPECT_NEAR(p.epsilon, 1.32783806176, 1e-10);
  EXPECT_EQ(p.order, 32.0);
}

TEST(FlPrivacy, EpsilonGrowsWithRoundsAndFallsWithNoise) {
  const DpFedAvg low({.clip = 1.0, .noise_multiplier = 0.8, .delta = 1e-5}, 50, 5, 0);
  const DpFedAvg high({.clip = 1.0, .noise_multiplier = 1.6, .delta = 1e-5}, 50, 5, 0);
  EXPECT_EQ(low.epsilon(0), 0.0);
  double last = 0.0;
  for (int64_t rounds : {1, 2, 5, 10, 50, 200}) {
    const double eps = low.epsilon(rounds);
    EXPECT_GT(eps, last) << rounds << " rounds";
    EXPECT_LT(high.epsilon(rounds), eps) << rounds << " rounds";
    last = eps;
  }
  const DpFedAvg clip_only({.clip = 1.0, .noise_multiplier = 0.0, .delta = 1e-5}, 50, 5, 0);
  EXPECT_TRUE(std::isinf(clip_only.epsilon(3)));
}

}  // namespace
}  // namespace quartet::trainers::federated
