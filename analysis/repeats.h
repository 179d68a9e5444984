#pragma once

// Repeated runs of the same arms with derived seeds (spec `repeats`, docs/results.md):
// the Student-t statistics, each arm's figures over its repeats (summary.json's
// "repeats"), and the tables summary.md and the report show.

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "analysis/report.h"
#include "analysis/results_model.h"
#include "analysis/tables.h"

namespace quartet::analysis {

// Student's t distribution with `df` > 0 degrees of freedom (any real df, as Welch's test
// needs): its CDF through the regularized incomplete beta function, and its quantile
// (p in (0, 1)) by bisection on that CDF, exact to double precision.
double student_t_cdf(double t, double df);
double student_t_quantile(double p, double df);

// The mean of `values` and the half-width of its two-sided `confidence` interval,
// t(1 - (1 - confidence) / 2, n - 1) * s / sqrt(n) with s the sample standard deviation.
// n < 2: half_width 0 (no interval). identical: every value is the same, bit for bit.
struct Interval {
  int n = 0;
  double mean = 0.0;
  double half_width = 0.0;
  bool identical = false;
};
Interval mean_interval(const std::vector<double>& values, double confidence = 0.95);

// Welch's two-sided t-test of equal means (unequal variances, Welch–Satterthwaite df).
// Requires two values or more on each side. With no spread on either side the test is
// undefined: p is 0 when the means differ, 1 when they do not, and df is 0.
struct WelchTest {
  double t = 0.0;
  double df = 0.0;
  double p = 1.0;
  bool significant(double alpha = 0.05) const { return p < alpha; }
};
WelchTest welch_test(const std::vector<double>& a, const std::vector<double>& b);

// The seed of repeat `k` (1-based): seed + k - 1, so repeat 1 is the run without repeats.
uint64_t repeat_seed(uint64_t seed, int k);

// The folder a repeat's arms live in: the run folder itself for repeat 1, else
// RUN/repeats/<k>, a run folder of its own (spec.json with the repeat's seed).
std::filesystem::path repeat_dir(const std::filesystem::path& run_dir, int k);

// The figures compared over repeats, each read from an arm summary (null when absent).
struct RepeatMetric {
  std::string key;    // summary.json's "repeats.metrics" key
  std::string label;  // the table's column
  std::optional<double> (*read)(const nlohmann::json& summary);
  std::string (*format)(double value);
};
const std::vector<RepeatMetric>& repeat_metrics();

// The arm's interval of metric `key` (a repeat_metrics() key) over its repeats, from
// summary.json's "repeats" values: what the tables and charts show. None when the arm has
// no repeats or no value of that metric.
std::optional<Interval> repeat_interval(const ArmResults& arm, const std::string& key);

// "mean ± half-width (n = N)"; "mean (identical in all N repeats)" when every value is the
// same, so there is no interval to draw; "mean (n = 1)".
std::string interval_text(const Interval& interval, std::string (*format)(double));

// The arm's evaluations averaged over its repeats, the i-th evaluation of each repeat
// together (repeat 1's and ArmResults::repeat_evaluations, as many as every repeat has):
// the mean samples and wall time, and the value's interval. Empty without repeats.
struct CurvePoint {
  double samples = 0.0;
  double wall = 0.0;
  Interval value;
};
std::vector<CurvePoint> repeat_curve(const ArmResults& arm);

// Whether the repeats came out the same: their evaluations are equal value for value and,
// where every repeat wrote one, their final weights files are equal byte for byte (a
// workload or regime that ignores the seed). False for fewer than two repeats or nothing
// to compare.
bool identical_repeats(const std::vector<nlohmann::json>& summaries,
                       const std::vector<std::filesystem::path>& final_weights);

// summary.json's "repeats": {"n", "seeds", "statuses", "identical", "metrics": {key: {"n",
// "mean", "half_width", "values"}}} over the repeats that ran to their end (`summaries`,
// in repeat order, with their `seeds`).
nlohmann::json repeat_statistics(const std::vector<nlohmann::json>& summaries, const std::vector<uint64_t>& seeds,
                                 bool identical);

// One row per arm whose summary has repeats: n and each metric as "mean ± half-width";
// the note says what the numbers are. Empty rows when no arm was repeated.
Table repeats_table(const std::vector<ArmResults>& arms);
std::string repeats_table_note();

// One row per pair of repeated arms and metric: both means, the difference, Welch's t,
// df and p, and whether it is significant at 5 %.
Table significance_table(const std::vector<ArmResults>& arms);

// The two tables with their notes, or "" when no arm was repeated.
std::string repeats_markdown(const std::vector<ArmResults>& arms);

// The report's charts of repeated arms, drawn without Qt: per figure that varies (samples/s,
// final quality), a bar per arm at its mean with an error bar over its 95 % interval.
// None when no arm was repeated.
struct RepeatChart {
  ChartImage image;  // repeats-<metric>.svg, its title and caption
  std::string svg;
};
std::vector<RepeatChart> repeat_charts(const std::vector<ArmResults>& arms);

}  // namespace quartet::analysis
