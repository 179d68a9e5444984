#include "analysis/repeats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "analysis/report.h"
#include "tests/temp_folder.h"

namespace quartet::analysis {
namespace {

using nlohmann::json;

// Quantiles by their closed forms: df 1 is Cauchy, tan(pi (p - 1/2)); df 2 is
// (2p - 1) sqrt(2 / (4p(1 - p))); df 4 is 2 sqrt(q - 1), q = cos(acos(sqrt(a)) / 3) / sqrt(a),
// a = 4p(1 - p).
TEST(StudentT, QuantilesMatchTheClosedForms) {
  EXPECT_NEAR(student_t_quantile(0.975, 1), 12.706204736174696, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.975, 2), 4.302652729749464, 1e-11);
  EXPECT_NEAR(student_t_quantile(0.975, 4), 2.776445105197794, 1e-11);
  EXPECT_NEAR(student_t_quantile(0.025, 4), -2.776445105197794, 1e-11);
  EXPECT_NEAR(student_t_quantile(0.975, 1e6), 1.959966, 1e-5);  // the normal's, far out
}

// The CDF at a non-integer df, against Simpson's rule on the density (2 * 10^5 panels).
TEST(StudentT, CdfAtFractionalDegreesOfFreedomMatchesTheIntegratedDensity) {
  EXPECT_NEAR(student_t_cdf(1.5, 2.5), 0.876081773456854, 1e-10);
  EXPECT_NEAR(student_t_cdf(-1.5, 2.5), 1.0 - 0.876081773456854, 1e-10);
  EXPECT_DOUBLE_EQ(student_t_cdf(0.0, 3.0), 0.5);
}

// Worked by hand: half-width = t(0.975, n - 1) * s / sqrt(n).
// {1, 3}: s^2 = 2, s / sqrt(2) = 1, so 12.7062 * 1.
// {1, 2, 3}: s = 1, so 4.30265 / sqrt(3) = 2.48414.
// {1, 2, 3, 4, 5}: s^2 = 2.5, s / sqrt(5) = sqrt(0.5), so 2.77645 * 0.707107 = 1.96324.
TEST(MeanInterval, MatchesHandWorkedExamplesForTwoThreeAndFiveValues) {
  const Interval two = mean_interval({1.0, 3.0});
  EXPECT_EQ(two.n, 2);
  EXPECT_DOUBLE_EQ(two.mean, 2.0);
  EXPECT_NEAR(two.half_width, 12.706204736174696, 1e-9);
  const Interval three = mean_interval({3.0, 1.0, 2.0});
  EXPECT_DOUBLE_EQ(three.mean, 2.0);
  EXPECT_NEAR(three.half_width, 2.484137711750331, 1e-10);
  const Interval five = mean_interval({5.0, 1.0, 4.0, 2.0, 3.0});
  EXPECT_DOUBLE_EQ(five.mean, 3.0);
  EXPECT_NEAR(five.half_width, 1.9632431614775578, 1e-10);
  EXPECT_FALSE(five.identical);
}

TEST(MeanInterval, OneValueHasNoIntervalAndEqualValuesAreIdentical) {
  EXPECT_EQ(mean_interval({7.0}).half_width, 0.0);
  EXPECT_FALSE(mean_interval({7.0}).identical);
  const Interval same = mean_interval({0.5, 0.5, 0.5});
  EXPECT_TRUE(same.identical);
  EXPECT_EQ(same.half_width, 0.0);
  // 0.1 + 0.1 + 0.1 is not 0.3: a computed mean would be off in the last bit, and the
  // spread around it not quite zero.
  const Interval rounded = mean_interval({0.1, 0.1, 0.1});
  EXPECT_EQ(rounded.mean, 0.1);
  EXPECT_EQ(rounded.half_width, 0.0);
}

// {1, 2, 3} against {4, 5, 6}: variances 1, t = -3 / sqrt(2/3) = -3.67423, df = 4, and
// p = 2 (1 - F4(3.67423)) = 0.021312 (Simpson's rule on the density).
TEST(WelchTest, MatchesAHandWorkedExample) {
  const WelchTest w = welch_test({1, 2, 3}, {4, 5, 6});
  EXPECT_NEAR(w.t, -3.6742346141747673, 1e-12);
  EXPECT_NEAR(w.df, 4.0, 1e-12);
  EXPECT_NEAR(w.p, 0.021311641128766823, 1e-9);
  EXPECT_TRUE(w.significant());
  EXPECT_FALSE(welch_test({1, 2, 3}, {1.5, 2.5, 2}).significant());
}

TEST(WelchTest, WithoutSpreadDifferentMeansAreSignificantAndEqualOnesAreNot) {
  EXPECT_TRUE(welch_test({2, 2}, {3, 3}).significant());
  EXPECT_FALSE(welch_test({2, 2}, {2, 2}).significant());
  EXPECT_THROW(welch_test({1}, {2, 3}), std::invalid_argument);
}

TEST(Repeats, FirstRepeatKeepsTheSeedAndTheRunFolder) {
  EXPECT_EQ(repeat_seed(42, 1), 42u);
  EXPECT_EQ(repeat_seed(42, 3), 44u);
  EXPECT_EQ(repeat_dir("run", 1), std::filesystem::path("run"));
  EXPECT_EQ(repeat_dir("run", 2), std::filesystem::path("run/repeats/2"));
}

json arm_summary(double rate, std::vector<double> evals) {
  json e = json::array();
  for (double v : evals) e.push_back({{"value", v}});
  return {{"arm", "a"},
          {"status", "finished"},
          {"samples_per_second", rate},
          {"memory_peak_bytes", {{"total", 1048576}, {"rss", 2097152}}},
          {"bytes", {{"per_process_per_epoch", 0.0}}},
          {"evaluations", e},
          {"final_quality", evals.back()},
          {"to_target", nullptr}};
}

class RepeatFiles : public test_util::TempFolderTest {
 protected:
  RepeatFiles() : TempFolderTest("repeats") {}
  std::filesystem::path write(const std::string& name, const std::string& bytes) {
    std::ofstream(dir_ / name, std::ios::binary) << bytes;
    return dir_ / name;
  }
};

// A workload or regime that ignores the seed: the same evaluations and the same weights.
TEST_F(RepeatFiles, SameSeedRepeatsAreFlaggedIdentical) {
  const std::vector<json> same{arm_summary(100, {0.5, 0.75}), arm_summary(90, {0.5, 0.75})};
  EXPECT_TRUE(identical_repeats(same, {write("w1", "weights"), write("w2", "weights")}));
  EXPECT_FALSE(identical_repeats(same, {write("w3", "weights"), write("w4", "other")}));
  EXPECT_FALSE(identical_repeats({arm_summary(100, {0.5, 0.75}), arm_summary(90, {0.5, 0.8})}, {}));
  EXPECT_FALSE(identical_repeats({same.front()}, {}));
}

TEST(Repeats, BestQualityOfALowerIsBetterMetricIsTheLowest) {
  std::vector<json> ran{arm_summary(100, {3.0, 2.0, 2.5}), arm_summary(100, {2.8, 2.2})};
  for (json& s : ran) s["metric"] = "bpc";
  const json stats = repeat_statistics(ran, {1, 2}, false);
  EXPECT_DOUBLE_EQ(stats["metrics"]["best_quality"]["mean"].get<double>(), 2.1);
}

TEST(Repeats, StatisticsGiveEachMetricsIntervalAndTheTableShowsIt) {
  const std::vector<json> ran{arm_summary(100, {0.5, 0.7}), arm_summary(110, {0.6, 0.8}),
                              arm_summary(120, {0.4, 0.9})};
  const json stats = repeat_statistics(ran, {3, 4, 5}, false);
  EXPECT_EQ(stats["n"], 3);
  EXPECT_EQ(stats["seeds"], json({3, 4, 5}));
  const json& rate = stats["metrics"]["samples_per_second"];
  EXPECT_DOUBLE_EQ(rate["mean"].get<double>(), 110.0);
  EXPECT_NEAR(rate["half_width"].get<double>(), 10.0 * 2.484137711750331, 1e-9);  // {100, 110, 120}: s = 10
  EXPECT_DOUBLE_EQ(stats["metrics"]["best_quality"]["mean"].get<double>(), 0.8);
  EXPECT_EQ(stats["metrics"]["time_to_target"]["n"], 0);

  ArmResults a, b;
  a.name = "a";
  a.summary = ran.front();
  a.summary["repeats"] = stats;
  b.name = "b";
  b.summary = arm_summary(200, {0.5, 0.5});
  b.summary["repeats"] = repeat_statistics({b.summary, arm_summary(210, {0.5, 0.5})}, {3, 4}, true);
  const std::string md = repeats_markdown({a, b});
  EXPECT_NE(md.find("| a | 3 | 110 ± 24.84 |"), std::string::npos) << md;
  EXPECT_NE(md.find("0.5000 (identical)"), std::string::npos) << md;
  EXPECT_EQ(md.find("0.5000 ± 0.0000"), std::string::npos) << md;
  EXPECT_NE(md.find("| a vs b | samples/s |"), std::string::npos) << md;
  EXPECT_NE(md.find("Welch's two-sided t-test"), std::string::npos) << md;
}

TEST(Repeats, ChartsDrawErrorBarsOnlyWhereThereIsAnInterval) {
  ArmResults varied, same;
  varied.name = "varied";
  varied.summary = arm_summary(100, {0.5});
  varied.summary["repeats"] = repeat_statistics({arm_summary(100, {0.5}), arm_summary(120, {0.7})}, {1, 2}, false);
  same.name = "same";
  same.summary = arm_summary(100, {0.5});
  same.summary["repeats"] = repeat_statistics({arm_summary(100, {0.5}), arm_summary(100, {0.5})}, {1, 2}, true);
  const std::vector<RepeatChart> charts = repeat_charts({varied, same});
  ASSERT_EQ(charts.size(), 2u);
  EXPECT_EQ(charts[0].image.file, "repeats-samples_per_second.svg");
  EXPECT_EQ(charts[1].image.file, "repeats-final_quality.svg");
  auto count = [](const std::string& svg, const std::string& what) {
    size_t n = 0;
    for (size_t at = svg.find(what); at != std::string::npos; at = svg.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count(charts[1].svg, "<rect x="), 2u);
  EXPECT_EQ(count(charts[1].svg, "<line"), 3u) << "one error bar (stem and two caps), for the varied arm only";
  EXPECT_TRUE(repeat_charts({}).empty());
}

TEST(Repeats, AnArmsIntervalIsTheSummarysAndItsTextSaysIdenticalInsteadOfZeroWidth) {
  ArmResults a;
  a.summary = arm_summary(100, {0.5});
  EXPECT_FALSE(repeat_interval(a, "samples_per_second")) << "no repeats";
  a.summary["repeats"] = repeat_statistics({arm_summary(100, {0.5}), arm_summary(110, {0.5}), arm_summary(120, {0.5})},
                                           {1, 2, 3}, false);
  const std::optional<Interval> rate = repeat_interval(a, "samples_per_second");
  ASSERT_TRUE(rate);
  EXPECT_DOUBLE_EQ(rate->mean, a.summary["repeats"]["metrics"]["samples_per_second"]["mean"].get<double>());
  EXPECT_DOUBLE_EQ(rate->half_width, a.summary["repeats"]["metrics"]["samples_per_second"]["half_width"].get<double>());
  EXPECT_EQ(interval_text(*rate, repeat_metrics().front().format), "110 ± 24.84 (n = 3)");
  const std::optional<Interval> quality = repeat_interval(a, "final_quality");
  ASSERT_TRUE(quality);
  EXPECT_TRUE(quality->identical);
  EXPECT_EQ(interval_text(*quality, [](double v) { return fixed(v, 2); }), "0.50 (identical in all 3 repeats)");
  EXPECT_FALSE(repeat_interval(a, "time_to_target")) << "no repeat reached a target";
}

TEST(Repeats, TheMeanCurveTakesEachEvaluationOverEveryRepeatUpToTheShortest) {
  ArmResults a;
  a.summary = {{"evaluations", {{{"samples", 10}, {"wall", 1.0}, {"value", 0.5}},
                                {{"samples", 20}, {"wall", 2.0}, {"value", 0.7}}}}};
  EXPECT_TRUE(repeat_curve(a).empty()) << "no repeats";
  a.repeat_evaluations = {{{0, 10, 0.0, 3.0, 0.6}, {0, 20, 0.0, 4.0, 0.9}}, {{0, 10, 0.0, 2.0, 0.7}}};
  const std::vector<CurvePoint> curve = repeat_curve(a);
  ASSERT_EQ(curve.size(), 1u) << "the third repeat has one evaluation";
  EXPECT_DOUBLE_EQ(curve[0].samples, 10.0);
  EXPECT_DOUBLE_EQ(curve[0].wall, 2.0);
  EXPECT_EQ(curve[0].value.n, 3);
  EXPECT_DOUBLE_EQ(curve[0].value.mean, mean_interval({0.5, 0.6, 0.7}).mean);
  EXPECT_DOUBLE_EQ(curve[0].value.half_width, mean_interval({0.5, 0.6, 0.7}).half_width);
}

TEST(Repeats, SummaryWithoutRepeatsHasNoRepeatsSection) {
  RunResults run;
  ArmResults a;
  a.name = "a";
  a.summary = arm_summary(100, {0.5});
  run.arms.push_back(a);
  EXPECT_EQ(summary_markdown(run).find("repeats"), std::string::npos);
}

}  // namespace
}  // namespace quartet::analysis
