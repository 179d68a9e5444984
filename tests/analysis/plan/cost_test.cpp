#include "analysis/plan/cost.h"

#include <gtest/gtest.h>

#include "analysis/plan/collectives.h"
#include "tests/analysis/plan/toy_cluster.h"

namespace quartet::analysis::plan {
namespace {

PlanArm arm_of(const std::string& regime, int64_t batch) {
  PlanArm a;
  a.name = regime;
  a.regime = regime;
  a.batch = batch;
  a.bucket_bytes = 1e15;  // one bucket
  return a;
}

TEST(Cost, SingleIsTrainFlopsOverTheSustainedRate) {
  const ModelShape m = model_shape("cnn");
  const Prediction p = predict(m, arm_of("single", 128), compute_bound());
  const double expected = train_flops(m) * 128 / 0.5e12;
  EXPECT_NEAR(p.step_seconds / expected, 1.0, 1e-6);
  EXPECT_NEAR(p.samples_per_second, 128 / expected, 128 / expected * 1e-6);
  EXPECT_NEAR(p.mfu, 0.5, 1e-6);
  EXPECT_EQ(p.comm_seconds, 0.0);
  EXPECT_NE(p.bottleneck.find("compute in convs"), std::string::npos) << p.bottleneck;
}

// A cpu profile that timed the engine's elementwise ops prices the layers that run them
// by those times (a ReLU layer: its elements × the measured seconds), and a rank's
// further cores add what the profile says each adds.
TEST(Cost, TimedElementwiseOpsAndFurtherCoresPriceACpuRank) {
  const ModelShape m = model_shape("mlp");
  ClusterProfile c = compute_bound(2);
  c.device.kind = "cpu";
  PlanArm one = arm_of("single", 64);
  one.threads = 1;
  const double untimed = predict(m, one, c).step_seconds;
  c.device.elementwise_ops["relu"] = {1e3, 1.0};  // 1 µs an element
  const double timed = predict(m, one, c).step_seconds;
  // relu1 and relu2: 256 + 128 elements a sample, forward and backward.
  EXPECT_NEAR(timed - untimed, 64 * (256 + 128) * 1e-6, 1e-9);
  PlanArm two = one;
  two.threads = 2;
  c.device.efficiency.further_cores = {0.5, 0.5, 0.5, 0.5};
  c.device.elementwise_ops["relu"].further_cores = 0.5;
  EXPECT_NEAR(predict(m, two, c).step_seconds, timed / 1.5, timed * 1e-9);
  c.device.kind = "gpu";  // a GPU rank is one device: its threads do not enter
  EXPECT_NEAR(predict(m, two, c).step_seconds, timed, timed * 1e-9);
}

// Four pipeline stages of one thread on a node of two cores: the stages take turns on the
// cores, and one in its bubble gives its core away, so the step is the four ranks' busy
// time over two cores (and a data-parallel arm of four ranks, always busy, the same).
TEST(Cost, RanksBeyondTheCoresTakeTurnsAndWaitingOnesGiveTheirCoreAway) {
  const ModelShape m = model_shape("gpt-mini");
  ClusterProfile c = compute_bound(2);
  c.device.kind = "cpu";
  c.intra.bandwidth_bytes_per_s = 1e18, c.intra.latency_s = 0;
  PlanArm pp = arm_of("pipeline", 16), dp = arm_of("data_parallel", 16), one = arm_of("single", 16);
  pp.mesh.pp = 4, pp.micro_batches = 4, pp.threads = 1;
  dp.mesh.dp = 4, dp.threads = 1;
  one.threads = 1;
  const double alone = predict(m, one, c).step_seconds;  // one rank, one core
  EXPECT_NEAR(predict(m, pp, c).step_seconds / (alone / 2), 1.0, 0.02);
  EXPECT_NEAR(predict(m, dp, c).step_seconds / (alone / 2), 1.0, 0.02);
}

// A Linear layer's bias pass, timed, is added to its product (a separate kernel).
TEST(Cost, ATimedBiasAddsToTheProduct) {
  const ModelShape m = model_shape("mlp");
  ClusterProfile c = compute_bound(1);
  c.device.kind = "cpu";
  const double without = predict(m, arm_of("single", 64), c).step_seconds;
  c.device.elementwise_ops["bias"] = {1e3, 1.0};
  EXPECT_NEAR(predict(m, arm_of("single", 64), c).step_seconds - without, 64 * (256 + 128 + 10) * 1e-6, 1e-9);
}

TEST(Cost, AccumulatingMicroBatchesCostsTheSameFlops) {
  const ModelShape m = model_shape("mlp");
  PlanArm accumulate = arm_of("accumulate", 128);
  accumulate.micro_batches = 4;
  EXPECT_NEAR(predict(m, accumulate, compute_bound()).step_seconds / predict(m, arm_of("single", 128), compute_bound()).step_seconds,
              1.0, 1e-9);
}

TEST(Cost, DataParallelHalvesComputeAndAddsTheLastBucket) {
  const ModelShape m = model_shape("cnn");
  PlanArm ddp = arm_of("data_parallel", 128);
  ddp.mesh.dp = 2;
  const Prediction p = predict(m, ddp, compute_bound());
  // One bucket: its all-reduce starts when backward ends, so all of it is exposed:
  // 2 (N − 1) = 2 messages of S/2 on the 10 GB/s intra link.
  const double grads = parameter_count(m) * 4;
  const double all_reduce_s = 2 * (grads / 2 / 10e9 + 10e-6);
  const double compute = train_flops(m) * 64 / 0.5e12;
  EXPECT_NEAR(p.step_seconds, compute + all_reduce_s, 1e-9);
  EXPECT_NEAR(p.intra_bytes, grads, 1e-3);  // a rank sends 2 (N−1)/N S
  EXPECT_EQ(p.inter_bytes, 0.0);
}

TEST(Cost, SmallBucketsHideTheAllReduceBehindBackward) {
  const ModelShape m = model_shape("cnn");
  PlanArm ddp = arm_of("data_parallel", 128);
  ddp.mesh.dp = 2;
  const double one_bucket = predict(m, ddp, compute_bound()).comm_seconds;
  ddp.bucket_bytes = 64 * 1024;
  EXPECT_LT(predict(m, ddp, compute_bound()).comm_seconds, one_bucket / 10);
}

// Narayanan et al. (SC'21), §2.2.1: the bubble is (p − 1)/m of the ideal time, for
// GPipe and 1F1B alike.
TEST(Cost, PipelineBubbleIsPMinusOneOverM) {
  const ModelShape m = model_shape("gpt-mini");
  for (const std::string schedule : {"gpipe", "1f1b"})
    for (int64_t pp : {2, 3})
      for (int64_t micro : {1, 4, 8}) {
        PlanArm a = arm_of("pipeline", 64);
        a.mesh.pp = pp;
        a.micro_batches = micro;
        a.schedule = schedule;
        ClusterProfile c = compute_bound();
        c.intra.bandwidth_bytes_per_s = 1e18, c.intra.latency_s = 0;
        const Prediction p = predict(m, a, c);
        const double ideal = p.step_seconds - p.bubble_seconds;
        EXPECT_NEAR(p.bubble_seconds / ideal, (pp - 1.0) / micro, 0.02) << schedule << pp << micro;
      }
}

// §2.2.2: with v model chunks a rank, the interleaved schedule's bubble is
// (p − 1)/(v m), and each micro-batch crosses the stage boundaries v times.
TEST(Cost, InterleavingDividesTheBubbleByTheChunks) {
  const ModelShape m = model_shape("gpt-mini");
  for (int64_t v : {1, 2, 3}) {
    PlanArm a = arm_of("pipeline", 64);
    a.mesh.pp = 2;
    a.micro_batches = 4;
    a.virtual_stages = v;
    ClusterProfile c = compute_bound();
    c.intra.bandwidth_bytes_per_s = 1e18, c.intra.latency_s = 0;
    const Prediction p = predict(m, a, c);
    EXPECT_NEAR(p.bubble_seconds / (p.step_seconds - p.bubble_seconds), 1.0 / (4.0 * static_cast<double>(v)), 0.02)
        << v;
  }
  PlanArm one = arm_of("pipeline", 64), three = one;
  one.mesh.pp = three.mesh.pp = 2;
  one.micro_batches = three.micro_batches = 4;
  three.virtual_stages = 3;
  EXPECT_NEAR(predict(m, three, compute_bound()).intra_bytes, 3.0 * predict(m, one, compute_bound()).intra_bytes,
              1e-6 * predict(m, three, compute_bound()).intra_bytes);
}

TEST(Cost, OneFOneBNeedsLessActivationMemoryThanGpipe) {
  const ModelShape m = model_shape("gpt-mini");
  PlanArm a = arm_of("pipeline", 64);
  a.mesh.pp = 2;
  a.micro_batches = 8;
  a.schedule = "gpipe";
  const double gpipe = predict(m, a, compute_bound()).memory.activations;
  a.schedule = "1f1b";
  EXPECT_LT(predict(m, a, compute_bound()).memory.activations, gpipe / 3);
}

TEST(Cost, TensorParallelAddsFourAllReducesABlock) {
  const ModelShape m = model_shape("gpt-mini");
  PlanArm a = arm_of("tensor_parallel", 8);
  a.mesh.tp = 2;
  const Prediction p = predict(m, a, compute_bound());
  // 4 blocks × 4 all-reduces of 8 × 128 × 128 floats on 2 ranks over 10 GB/s.
  const double bytes = 8.0 * 128 * 128 * 4;
  EXPECT_NEAR(p.comm_seconds, 16 * ring_all_reduce_seconds(bytes, 2, {10e9, 10e-6}), 1e-12);
}

TEST(Cost, ZeroThreeDividesModelStateAndGathersParameters) {
  const ModelShape m = model_shape("gpt-mini");
  PlanArm a = arm_of("data_parallel", 64);
  a.mesh.dp = 4;
  const Prediction zero0 = predict(m, a, compute_bound());
  a.zero = 3;
  const Prediction zero3 = predict(m, a, compute_bound());
  EXPECT_NEAR(zero3.memory.parameters + zero3.memory.gradients + zero3.memory.optimizer_state,
              (zero0.memory.parameters + zero0.memory.gradients + zero0.memory.optimizer_state) / 4, 1.0);
  EXPECT_GT(zero3.intra_bytes, zero0.intra_bytes * 1.9);
}

TEST(Cost, TheMeshSpansNodesTpInnermost) {
  const ModelShape m = model_shape("gpt-mini");
  PlanArm a = arm_of("mesh", 64);
  a.mesh.tp = 4;
  a.mesh.dp = 4;  // 16 ranks on two nodes of 8: tp within a node, dp across
  const Prediction p = predict(m, a, compute_bound(8, 2));
  EXPECT_GT(p.inter_bytes, 0.0);
  EXPECT_GT(p.intra_bytes, 0.0);
  a.mesh = {.tp = 4};
  EXPECT_EQ(predict(m, a, compute_bound(8, 2)).inter_bytes, 0.0);
}

TEST(Cost, TooLargeAModelDoesNotFitAndSaysSo) {
  const Prediction p = predict(model_shape("gpt-1t"), arm_of("single", 1), compute_bound());
  EXPECT_FALSE(p.fits);
  EXPECT_EQ(p.bottleneck.rfind("does not fit", 0), 0u) << p.bottleneck;
}

TEST(Cost, BalancedStagesSplitTheBlocksEvenly) {
  const ModelShape m = model_shape("gpt-mini");
  const std::vector<size_t> starts = pipeline_stage_starts(m, 2, {});
  ASSERT_EQ(starts.size(), 2u);
  EXPECT_EQ(m.layers[starts[1]].stage, "block2");
  EXPECT_EQ(m.layers[pipeline_stage_starts(m, 2, {"block0"})[1]].stage, "block1");
}

// Expert parallelism on gpt-moe (docs/moe.md): each of ep ranks takes 1/ep of the batch
// and holds 1/ep of the experts; per MoE block and micro-batch, two all-to-alls forward
// and two backward of the rank's tokens' k choices (rows of the width), exposed; the
// shared parameters' gradients are all-reduced over the ep ranks.
TEST(Cost, ExpertParallelSpreadsTheExpertsAndAddsFourAllToAllsABlock) {
  const ModelShape m = model_shape("gpt-moe");
  const PlanArm single = arm_of("single", 8);
  PlanArm ep = arm_of("expert_parallel", 8);
  ep.mesh.ep = 2;
  const Prediction one = predict(m, single, compute_bound()), two = predict(m, ep, compute_bound());
  double experts = 0;
  for (const Layer& l : m.layers) experts += l.expert ? l.parameters : 0;
  EXPECT_NEAR(two.memory.parameters, (parameter_count(m) - experts / 2) * 4, 1e-6);
  const double rows = 4 * 128 * 2 * 128 * 4.0;  // 4 samples of 128 tokens, 2 choices, 128 floats
  const CollectiveCost a2a = all_to_all(rows, 2, 1, {10e9, 10e-6}, {1e9, 50e-6});
  const double shared = (parameter_count(m) - experts) * 4;
  const double all_reduce_s = 2 * (shared / 2 / 10e9 + 10e-6);
  EXPECT_NEAR(two.comm_seconds, 2 * 4 * a2a.seconds + all_reduce_s, 1e-12);
  EXPECT_NEAR(two.intra_bytes, 2 * 4 * a2a.intra_bytes + shared, 1e-3);
  // Half the samples a rank: the compute halves (the optimizer step aside).
  EXPECT_NEAR((two.compute_seconds) / (one.compute_seconds), 0.5, 0.01);
}

// The mesh runs micro-batches through its pp stages one after another: a step is every
// stage's slot of every micro-batch, not (m + P − 1) slots of the slowest.
TEST(Cost, TheMeshsStagesRunInTurn) {
  const ModelShape m = model_shape("gpt-mini");
  PlanArm pipe = arm_of("pipeline", 8);
  pipe.mesh.pp = 2;
  pipe.micro_batches = 4;
  PlanArm mesh = pipe;
  mesh.regime = "mesh";
  mesh.schedule = "sequential";
  const Prediction overlapped = predict(m, pipe, compute_bound()), in_turn = predict(m, mesh, compute_bound());
  const Prediction whole = predict(m, arm_of("single", 8), compute_bound());
  // In turn: the whole model's compute (less the optimizer's) plus the hand-overs;
  // overlapped: 5 slots of the slower half.
  EXPECT_GT(in_turn.step_seconds, whole.step_seconds - 1e-12);
  EXPECT_LT(overlapped.step_seconds, in_turn.step_seconds);
}

TEST(CostHostile, ArmsTheModelOrClusterCannotTakeAreNamed) {
  const ModelShape cnn = model_shape("cnn");
  PlanArm a = arm_of("data_parallel", 100);
  a.mesh.dp = 3;
  EXPECT_THROW(predict(cnn, a, compute_bound()), std::invalid_argument);
  a = arm_of("tensor_parallel", 8);
  a.mesh.tp = 2;
  EXPECT_THROW(predict(cnn, a, compute_bound()), std::invalid_argument);
  a = arm_of("data_parallel", 64);
  a.mesh.dp = 16;
  EXPECT_THROW(predict(cnn, a, compute_bound(8, 1)), std::invalid_argument);
  a = arm_of("pipeline", 8);
  a.mesh.pp = 2;
  a.cuts = {"nope"};
  EXPECT_THROW(predict(cnn, a, compute_bound()), std::invalid_argument);
  // Experts: ep needs them and must divide them; gpt-moe is not split by tp; no ZeRO with ep.
  a = arm_of("expert_parallel", 8);
  a.mesh.ep = 2;
  EXPECT_THROW(predict(model_shape("gpt-mini"), a, compute_bound()), std::invalid_argument);
  a.mesh.ep = 8;
  EXPECT_THROW(predict(model_shape("gpt-moe"), a, compute_bound()), std::invalid_argument);
  a = arm_of("tensor_parallel", 8);
  a.mesh.tp = 2;
  EXPECT_THROW(predict(model_shape("gpt-moe"), a, compute_bound()), std::invalid_argument);
  a = arm_of("mesh", 8);
  a.mesh.ep = 2, a.mesh.dp = 2, a.zero = 1;
  EXPECT_THROW(predict(model_shape("gpt-moe"), a, compute_bound()), std::invalid_argument);
}

}  // namespace
}  // namespace quartet::analysis::plan
