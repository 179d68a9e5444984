// What the report shows of a pipeline arm, from a hand-written record set: two stages,
// m = 2 micro-batches under GPipe, three steps each.

#include "analysis/pipeline_view.h"

#include <gtest/gtest.h>

#include "analysis/report.h"

namespace quartet::analysis {
namespace {

using nlohmann::json;

// A step record of stage `s` of 2: `busy` s of compute in a step of `wall` s, the step
// starting at `start` on the shared clock; `timeline` its operations.
json stage_record(int64_t s, int64_t step, double busy, double wall, double start, json timeline) {
  return {{"type", "step"},
          {"role", "stage" + std::to_string(s)},
          {"step", step},
          {"pipeline",
           {{"stage", s},
            {"stages", 2},
            {"first", s == 0 ? "conv1" : "fc1"},
            {"last", s == 0 ? "conv2" : "fc2"},
            {"schedule", "gpipe"},
            {"micro_batches", 2},
            {"busy", busy},
            {"idle", wall - busy},
            {"step_wall", wall},
            {"idle_fraction", (wall - busy) / wall},
            {"bubble_formula", 1.0 / 3.0},
            {"in_flight_peak", 2},
            {"activations_peak", 1048576 * (step + s)},
            {"timeline_start", start},
            {"timeline", std::move(timeline)}}}};
}

// Stage 0: F0 F1 … B0 B1, S; stage 1 starts 0.5 s later on the shared clock.
ArmResults two_stage_arm() {
  ArmResults arm;
  arm.name = "pipe-2";
  arm.regime = "pipeline";
  arm.status = "finished";
  const json t0 = json::array({json::array({"F", 0, 0.0, 1.0}), json::array({"F", 1, 1.0, 2.0}),
                               json::array({"B", 0, 3.5, 4.5}), json::array({"B", 1, 4.5, 5.5}),
                               json::array({"S", -1, 5.5, 6.0})});
  const json t1 = json::array({json::array({"F", 0, 0.5, 1.5}), json::array({"F", 1, 1.5, 2.5}),
                               json::array({"B", 0, 2.5, 3.5}), json::array({"B", 1, 3.5, 4.5}),
                               json::array({"S", -1, 4.5, 5.0})});
  trainers::RoleRecords s0{"stage0", {}}, s1{"stage1", {}};
  // The first step is slow (filling, warming) and left out of the means.
  s0.records.push_back(stage_record(0, 1, 10.0, 20.0, 100.0, t0));
  s1.records.push_back(stage_record(1, 1, 10.0, 20.0, 100.5, t1));
  for (int64_t step = 2; step <= 3; ++step) {
    s0.records.push_back(stage_record(0, step, 4.5, 6.0, 100.0 + 10.0 * step, t0));
    s1.records.push_back(stage_record(1, step, 4.0, 6.0, 100.5 + 10.0 * step, t1));
  }
  arm.roles = {s1, s0};  // in any order
  return arm;
}

TEST(PipelineView, StagesAreAveragedOverTheStepsButTheFirst) {
  const std::vector<StageFigures> stages = pipeline_stages(two_stage_arm());
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_EQ(stages[0].role, "stage0");
  EXPECT_EQ(stages[0].steps, 2);
  EXPECT_DOUBLE_EQ(stages[0].busy, 4.5);
  EXPECT_DOUBLE_EQ(stages[0].idle, 1.5);
  EXPECT_DOUBLE_EQ(stages[0].idle_fraction, 0.25);
  EXPECT_DOUBLE_EQ(stages[1].idle_fraction, 2.0 / 6.0);
  EXPECT_DOUBLE_EQ(stages[1].bubble_formula, 1.0 / 3.0);
  EXPECT_EQ(stages[1].in_flight_peak, 2);
  EXPECT_DOUBLE_EQ(stages[1].activations_peak, 4.0 * 1048576);  // the largest, first step included
  EXPECT_DOUBLE_EQ(stage_balance(stages), 4.5 / 4.0);
}

TEST(PipelineView, TheTableSetsTheMeasuredIdleFractionBesideTheFormula) {
  const std::string md = to_markdown(pipeline_table(pipeline_stages(two_stage_arm())));
  EXPECT_NE(md.find("| stage0 | conv1 … conv2 | 4.5000 | 1.5000 | 25.0 % | 33.3 % | 0.75 | 30.8 % | 3.0 MiB | 2 |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| stage1 | fc1 … fc2 | 4.0000 | 2.0000 | 33.3 % | 33.3 % | 1.00 | 30.8 % | 4.0 MiB | 2 |"),
            std::string::npos)
      << md;
}

// Both stages' operations take 1 s and the optimizer 0.5 s: F0 F1 on stage 0 by 2 s,
// stage 1's F0 at 1–2, F1 2–3, B0 3–4, B1 4–5, S to 5.5; stage 0's B0 4–5, B1 5–6, S to
// 6.5. Each stage is busy 4.5 s of 6.5.
TEST(PipelineView, TheReplayRunsEachStagesOperationsWithInstantTransfers) {
  const std::vector<StageFigures> stages = pipeline_stages(two_stage_arm());
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_DOUBLE_EQ(stages[0].replayed_idle_fraction, 2.0 / 6.5);
  EXPECT_DOUBLE_EQ(stages[1].replayed_idle_fraction, 2.0 / 6.5);

  // Stage 0 twice as slow, GPipe, m = 2: the busier stage idles 1/(m·2+1) of the step.
  auto lane = [](int64_t stage, double f, double b) {
    StageTimeline t;
    t.stage = stage;
    t.role = "stage" + std::to_string(stage);
    t.ops = {{"F", 0, 0.0, f}, {"F", 1, 0.0, f}, {"B", 0, 0.0, b}, {"B", 1, 0.0, b}};
    return t;
  };
  const Replay r = replay_step({lane(0, 2.0, 2.0), lane(1, 1.0, 1.0)});
  EXPECT_DOUBLE_EQ(r.step, 10.0);
  ASSERT_EQ(r.idle.size(), 2u);
  EXPECT_DOUBLE_EQ(r.idle[0], 2.0);
  EXPECT_DOUBLE_EQ(r.idle[1], 6.0);

  // Lanes that are not stages 0 … P-1, or a backward whose input never comes: no replay.
  EXPECT_TRUE(replay_step({lane(1, 1.0, 1.0)}).idle.empty());
  StageTimeline lost = lane(0, 1.0, 1.0);
  lost.ops[2].micro = 7;
  EXPECT_TRUE(replay_step({lost, lane(1, 1.0, 1.0)}).idle.empty());
}

TEST(PipelineView, TheTimelineLinesTheStagesUpOnTheirSharedClock) {
  const std::vector<StageTimeline> t = pipeline_timeline(two_stage_arm());
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].role, "stage0");
  ASSERT_EQ(t[1].ops.size(), 5u);
  // Stage 1 started its step 0.5 s after stage 0.
  EXPECT_DOUBLE_EQ(t[1].ops[0].start, 1.0);
  EXPECT_EQ(t[1].ops[2].op, "B");
  EXPECT_EQ(t[1].ops[2].micro, 0);
  EXPECT_DOUBLE_EQ(t[0].step_end, 6.0);
  EXPECT_DOUBLE_EQ(t[1].step_end, 6.5);
  EXPECT_TRUE(pipeline_timeline(two_stage_arm(), 9).empty());  // no such step

  const std::string svg = timeline_svg(t, "pipe-2 <last step>");
  EXPECT_EQ(svg.rfind("<svg ", 0), 0u);
  EXPECT_NE(svg.find("&lt;last step&gt;"), std::string::npos);
  EXPECT_NE(svg.find(">F1</text>"), std::string::npos);
  EXPECT_NE(svg.find(">B0</text>"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

TEST(PipelineView, TheReportShowsEachPipelineArmsStagesAndTimeline) {
  RunResults run;
  run.name = "pipe";
  run.status = "finished";
  ArmResults single;
  single.name = "single";
  single.regime = "single";
  run.arms = {single, two_stage_arm()};
  const std::string md = report_markdown(run, {});
  EXPECT_NE(md.find("## Pipeline stages (measured)"), std::string::npos) << md;
  EXPECT_NE(md.find("### pipe-2\n\n2 stages, 2 micro-batches, gpipe; balance (busiest / least busy stage's compute) "
                    "1.1"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("![pipe-2: one step](pipeline-pipe-2.svg)"), std::string::npos) << md;
  const auto images = pipeline_timeline_images(run);
  ASSERT_EQ(images.size(), 1u);
  EXPECT_EQ(images[0].first, "pipeline-pipe-2.svg");

  run.arms = {single};
  EXPECT_EQ(report_markdown(run, {}).find("Pipeline stages"), std::string::npos);
}

}  // namespace
}  // namespace quartet::analysis
