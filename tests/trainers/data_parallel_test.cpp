// data_parallel with ranks as threads of one process: a real coordinator on 127.0.0.1
// (an OS-chosen port), one CoordinatorClient per rank, Gloo over loopback, as the
// processes of `quartet run` do it.

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <thread>

#include "tests/temp_folder.h"
#include "tests/trainers/trainer_test_util.h"
#include "engine/device.h"
#include "engine/memory.h"
#include "engine/safetensors.h"
#include "trainers/regime.h"
#include "trainers/data_parallel/data_parallel.h"
#include "transport/coordinator.h"
#include "workloads/workload.h"

namespace quartet::trainers {
namespace {

using testing::max_abs_diff;

namespace fs = std::filesystem;
using nlohmann::json;

class DataParallel : public testing::RegimeTest {
 protected:
  DataParallel() : RegimeTest("data_parallel") {}
  static void SetUpTestSuite() {
    // A rank that fails must not leave its peers waiting Gloo's default five minutes.
    ::setenv("QUARTET_GLOO_TIMEOUT_S", "120", 0);
  }

  void use_workload(const std::string& model, int64_t train = 512) {
    workloads::WorkloadConfig wc;
    wc.name = "synthetic";
    wc.model = model;
    wc.train_limit = train;
    wc.test_limit = 64;
    RegimeTest::use_workload(wc);
  }

  RoleContext context(const std::string& arm, int ranks, int64_t max_steps, json settings = json::object()) {
    RoleContext c = RegimeTest::context(arm, 64, max_steps);
    settings["ranks"] = ranks;
    c.settings = testing::regime_settings("data_parallel", c, settings);
    return c;
  }

  void run_single(RoleContext c) {
    c.role = "trainer";
    testing::run_role("single", c);
  }

  // The largest peak of `tag` any record of the arm's ranks saw (process-wide: every
  // rank's thread together).
  int64_t peak(const std::string& arm, int ranks, const std::string& tag) {
    int64_t p = 0;
    for (int r = 0; r < ranks; ++r)
      for (const json& j : records(arm, "rank" + std::to_string(r)))
        p = std::max(p, j["memory"][tag]["peak"].get<int64_t>());
    return p;
  }
};

// Tolerance for "the same update": float sums in another order (per-rank means, then
// the all-reduce) over 6 SGD steps with momentum on weights of magnitude ~0.05:
// 2e-6 absolute. Measured: see the test log.
constexpr double kSameUpdate = 2e-6;

TEST_F(DataParallel, TwoRanksEqualSingleWithTheSameGlobalBatch) {
  use_workload("mlp");
  run_single(context("single", 1, 6));
  testing::run_data_parallel_ranks(context("ddp2", 2, 6, {{"bucket_mb", 0.1}}));
  const double diff = max_abs_diff(final_weights("single"), final_weights("ddp2"));
  std::cout << "[ measured ] N=2 vs single: max |param diff| = " << diff << "\n";
  EXPECT_LT(diff, kSameUpdate);
  EXPECT_GT(max_abs_diff(final_weights("single"), engine::load_safetensors(init_.string())), 1e-3);
}

TEST_F(DataParallel, FourRanksEqualSingleWithTheSameGlobalBatch) {
  use_workload("mlp");
  run_single(context("single", 1, 6));
  testing::run_data_parallel_ranks(context("ddp4", 4, 6, {{"bucket_mb", 0.1}}));
  const double diff = max_abs_diff(final_weights("single"), final_weights("ddp4"));
  std::cout << "[ measured ] N=4 vs single: max |param diff| = " << diff << "\n";
  EXPECT_LT(diff, kSameUpdate);
}

// The shared-memory backend: the same updates as single; and since every rank adds the
// ranks' gradients in rank order whatever the operation, zero 2's reduce-scatter gives
// bit for bit zero 0's all-reduce (Gloo's own ring and ours add in other orders).
TEST_F(DataParallel, ShmBackendEqualsSingleAndZeroTwoEqualsZeroZeroBitForBit) {
  use_workload("mlp");
  run_single(context("single", 1, 6));
  testing::run_data_parallel_ranks(context("shm4", 4, 6, {{"bucket_mb", 0.1}, {"backend", "shm"}}));
  const double diff = max_abs_diff(final_weights("single"), final_weights("shm4"));
  std::cout << "[ measured ] N=4 over shm vs single: max |param diff| = " << diff << "\n";
  EXPECT_LT(diff, kSameUpdate);
  testing::run_data_parallel_ranks(context("shm4z2", 4, 6, {{"bucket_mb", 0.1}, {"backend", "shm"}, {"zero", 2}}));
  EXPECT_EQ(max_abs_diff(final_weights("shm4"), final_weights("shm4z2")), 0.0);
  EXPECT_EQ(records("shm4", "rank0").back()["comm"]["backend"], "shm");
}

TEST_F(DataParallel, MicroBatchesPerRankEqualSingle) {
  use_workload("mlp");
  run_single(context("single", 1, 6));
  RoleContext c = context("ddp2x2", 2, 6, {{"bucket_mb", 0.1}, {"micro_batches", 2}});
  testing::run_data_parallel_ranks(c);
  const double diff = max_abs_diff(final_weights("single"), final_weights("ddp2x2"));
  std::cout << "[ measured ] N=2 x 2 micro-batches vs single: max |param diff| = " << diff << "\n";
  EXPECT_LT(diff, kSameUpdate);
  // zero 2 accumulates whole gradients on the first micro-batch, scatters on the last.
  RoleContext z = context("ddp2x2z2", 2, 6, {{"bucket_mb", 0.1}, {"micro_batches", 2}, {"zero", 2}});
  testing::run_data_parallel_ranks(z);
  EXPECT_LT(max_abs_diff(final_weights("single"), final_weights("ddp2x2z2")), kSameUpdate);
}

// Every rank writes one record per step; only rank 0 evaluates; bytes are the ring's.
TEST_F(DataParallel, EveryRankRecordsStepsAndCommunication) {
  use_workload("mlp");
  testing::run_data_parallel_ranks(context("rec", 2, 3, {{"bucket_mb", 0.1}}));
  const std::vector<json> r0 = records("rec", "rank0"), r1 = records("rec", "rank1");
  ASSERT_EQ(r0.size(), 3u);
  ASSERT_EQ(r1.size(), 3u);
  EXPECT_TRUE(r0.back().contains("eval"));
  EXPECT_FALSE(r1.back().contains("eval"));
  // 235,146 mlp parameters, all-reduced once a step: 2(N-1)/N * S = S bytes for N = 2.
  const int64_t params_bytes = 235146 * 4;
  for (const json& r : r1) {
    EXPECT_EQ(r["rank"], 1);
    EXPECT_EQ(r["comm"]["bytes"].get<int64_t>(), params_bytes);
    EXPECT_GE(r["comm_exposed"].get<double>(), 0.0);
    EXPECT_GT(r["comm"]["buckets"].get<int>(), 1);
  }
  EXPECT_EQ(r0[2]["samples"], 3 * 64);
  EXPECT_EQ(r0[2]["rank_samples"], 3 * 32);
  EXPECT_TRUE(fs::exists(final_weights_path(dir_ / "rec")));
}

// compress fp16 sends halves (2 bytes a value) on both CPU backends, all-reduce (zero 0)
// and reduce-scatter (zero 2): the collectives' own count of what they sent halves, and
// the updates stay within half precision's reach of fp32's and of single's.
TEST_F(DataParallel, Fp16CompressionHalvesTheBytesAndStaysClose) {
  use_workload("mlp");
  run_single(context("single", 1, 4));
  testing::run_data_parallel_ranks(context("plain", 2, 4, {{"bucket_mb", 0.1}}));
  const json plain = records("plain", "rank0").back()["comm"];
  EXPECT_EQ(plain["wire"], "fp32");
  EXPECT_EQ(plain["transport_bytes"], plain["bytes"]);
  for (const std::string backend : {"gloo", "shm"}) {
    for (int zero : {0, 2}) {
      const std::string arm = "half_" + backend + std::to_string(zero);
      testing::run_data_parallel_ranks(
          context(arm, 2, 4, {{"bucket_mb", 0.1}, {"compress", "fp16"}, {"backend", backend}, {"zero", zero}}));
      const json half = records(arm, "rank0").back()["comm"];
      EXPECT_EQ(half["wire"], "fp16") << arm;
      EXPECT_EQ(half["transport_bytes"], half["bytes"]) << arm;
      if (zero == 0) {
        EXPECT_EQ(half["transport_bytes"].get<int64_t>() * 2, plain["transport_bytes"].get<int64_t>());
      }
      const double diff = max_abs_diff(final_weights("plain"), final_weights(arm));
      const double vs_single = max_abs_diff(final_weights("single"), final_weights(arm));
      std::cout << "[ measured ] " << arm << " after 4 steps: max |param diff| vs fp32 = " << diff
                << ", vs single = " << vs_single << "\n";
      EXPECT_LT(diff, 1e-3) << arm;
      EXPECT_LT(vs_single, 1e-3) << arm;
    }
  }
}

// ZeRO changes where state lives, not the arithmetic: same parameters as zero 0; the
// optimizer state (zero 1, 2) and the gradients (zero 2) of each rank fall to 1/N plus
// at most a bucket. Ranks are threads here, so the engine's (process-wide) peaks are
// every rank's together: N x per rank.
TEST_F(DataParallel, ZeroOneAndTwoEqualZeroZeroWithAShardOfTheMemory) {
  use_workload("mlp");
  const int n = 2;
  const double bucket_mb = 0.1;
  const int64_t bucket_bytes = static_cast<int64_t>(bucket_mb * 1024 * 1024);
  auto arm = [&](const std::string& name, int zero) {
    RoleContext c = context(name, n, 5, {{"bucket_mb", bucket_mb}, {"zero", zero}});
    c.config.optimizer = {.name = "adam", .lr = 1e-3f};
    engine::reset_memory_peaks();
    testing::run_data_parallel_ranks(c);
  };
  arm("zero0", 0);
  arm("zero1", 1);
  arm("zero2", 2);
  const double d1 = max_abs_diff(final_weights("zero0"), final_weights("zero1"));
  const double d2 = max_abs_diff(final_weights("zero0"), final_weights("zero2"));
  std::cout << "[ measured ] zero 1 vs zero 0: " << d1 << ", zero 2 vs zero 0: " << d2 << "\n";
  // Adam: Gloo's reduce-scatter adds in another order than its all-reduce.
  EXPECT_LT(d1, testing::kAdamSameUpdate);
  EXPECT_LT(d2, testing::kAdamSameUpdate);

  const int64_t opt0 = peak("zero0", n, "optimizer_state"), opt1 = peak("zero1", n, "optimizer_state"),
                opt2 = peak("zero2", n, "optimizer_state");
  const int64_t grad0 = peak("zero0", n, "gradients"), grad2 = peak("zero2", n, "gradients");
  std::cout << "[ measured ] optimizer-state peak per rank (bytes): zero0 " << opt0 / n << ", zero1 " << opt1 / n
            << ", zero2 " << opt2 / n << "; gradient peak per rank: zero0 " << grad0 / n << ", zero2 " << grad2 / n
            << "\n";
  // Adam keeps two slots: its state is 2 x 940,584 bytes per rank at zero 0.
  EXPECT_GE(opt0 / n, 2 * 235146 * 4);
  // "One bucket" is the largest: a parameter past bucket_mb (fc1.weight, 784 KiB) is a
  // bucket of its own. Padding to a multiple of N is below a bucket in each Adam slot.
  const int64_t bucket = records("zero2", "rank0").back()["comm"]["largest_bucket_bytes"].get<int64_t>();
  EXPECT_GE(bucket, bucket_bytes);
  EXPECT_LE(opt1 / n, opt0 / n / n + 2 * bucket);
  EXPECT_LE(opt2 / n, opt0 / n / n + 2 * bucket);
  // zero 2: this rank's shard plus the gradients of the bucket being filled.
  EXPECT_LE(grad2 / n, grad0 / n / n + bucket);
  // zero 1 keeps whole gradients, as zero 0 does.
  EXPECT_GE(peak("zero1", n, "gradients"), grad0);
}

TEST_F(DataParallel, SyncBatchNormEqualsSingle) {
  use_workload("resnet-mini", 256);
  auto ctx = [&](const std::string& name, int ranks) {
    RoleContext c = context(name, ranks, 3, {{"sync_bn", true}});
    c.config.batch = 16;
    return c;
  };
  run_single(ctx("single", 1));
  testing::run_data_parallel_ranks(ctx("sync2", 2));
  // Parameters and the running statistics (buffers) alike.
  const double diff = max_abs_diff(final_weights("single"), final_weights("sync2"));
  std::cout << "[ measured ] SyncBatchNorm N=2 vs single (resnet-mini): max |diff| = " << diff << "\n";
  EXPECT_LT(diff, 2e-5);
  // Without it each rank normalises with its own 8 samples' statistics: another update.
  RoleContext local = ctx("local2", 2);
  local.settings = testing::regime_settings("data_parallel", local, {{"ranks", 2}, {"sync_bn", false}});
  testing::run_data_parallel_ranks(local);
  const double local_diff = max_abs_diff(final_weights("single"), final_weights("local2"));
  std::cout << "[ measured ] per-rank BatchNorm N=2 vs single: max |diff| = " << local_diff << "\n";
  EXPECT_GT(local_diff, 100 * diff);
}

// Activation checkpointing recomputes each stage in backward, SyncBatchNorm's all-reduce
// of the statistics included (in the same order on every rank); the running statistics
// the recompute moves are put back, so they move once per step as in single.
TEST_F(DataParallel, SyncBatchNormWithActivationCheckpointingEqualsSingle) {
  use_workload("resnet-mini", 256);
  auto ctx = [&](const std::string& name, int ranks) {
    RoleContext c = context(name, ranks, 3, {{"sync_bn", true}});
    c.config.batch = 16;
    return c;
  };
  run_single(ctx("single", 1));
  RoleContext c = ctx("sync2-ckpt", 2);
  c.config.checkpoint = true;
  testing::run_data_parallel_ranks(c);
  const double diff = max_abs_diff(final_weights("single"), final_weights("sync2-ckpt"));
  std::cout << "[ measured ] SyncBatchNorm N=2, checkpointed, vs single (resnet-mini): max |diff| = " << diff << "\n";
  EXPECT_LT(diff, 2e-5);
}

// A run resumed from its checkpoints ends where an uninterrupted run ends; each rank's
// record file keeps one record per step. zero 2, 3: every rank resumes its own shard.
TEST_F(DataParallel, ResumeFromCheckpointsGivesTheSameFinalWeights) {
  use_workload("mlp");
  for (int zero : {0, 2, 3}) {
    const std::string z = std::to_string(zero);
    const json settings = {{"bucket_mb", 0.1}, {"zero", zero}};
    auto ctx = [&](const std::string& arm, int64_t epochs) {
      RoleContext c = context(arm, 2, 0, settings);
      c.config.epochs = epochs;
      c.config.optimizer = {.name = "adam", .lr = 1e-3f};
      return c;
    };
    testing::run_data_parallel_ranks(ctx("whole" + z, 3));
    testing::run_data_parallel_ranks(ctx("parts" + z, 1));  // one epoch, then "crash"
    fs::remove(final_weights_path(dir_ / ("parts" + z)));
    RoleContext rest = ctx("parts" + z, 3);
    rest.resume = true;
    testing::run_data_parallel_ranks(rest);
    EXPECT_EQ(max_abs_diff(final_weights("whole" + z), final_weights("parts" + z)), 0.0) << "zero " << zero;
    for (const char* role : {"rank0", "rank1"}) {
      const std::vector<json> recs = records("parts" + z, role);
      ASSERT_EQ(recs.size(), 24u) << role;  // 3 epochs of 512 / 64 steps
      for (size_t i = 0; i < recs.size(); ++i) EXPECT_EQ(recs[i]["step"], static_cast<int64_t>(i) + 1);
    }
  }
}

// ZeRO-3 gathers each stage's parameters for its forward and backward and frees them
// after, reduce-scatters the gradients: the same arithmetic as zero 0. Over shm, whose
// reduce-scatter adds in rank order as its all-reduce does, bit for bit, with one
// micro-batch or two (whole gradients kept locally until the last, as FSDP's no_sync).
TEST_F(DataParallel, ZeroThreeEqualsZeroZeroBitForBitOverShm) {
  use_workload("lenet5");
  for (int ranks : {2, 4})
    for (int micro : {1, 2}) {
      const std::string tag = std::to_string(ranks) + "x" + std::to_string(micro);
      const json shm = {{"bucket_mb", 0.05}, {"backend", "shm"}, {"micro_batches", micro}};
      json z3 = shm;
      z3["zero"] = 3;
      testing::run_data_parallel_ranks(context("z0-" + tag, ranks, 4, shm));
      testing::run_data_parallel_ranks(context("z3-" + tag, ranks, 4, z3));
      EXPECT_EQ(max_abs_diff(final_weights("z0-" + tag), final_weights("z3-" + tag)), 0.0) << tag;
      // Every stage is gathered in forward and again in backward (but the last, kept
      // between them): more all-gather bytes a step than the parameters.
      const json comm = records("z3-" + tag, "rank1").back()["comm"];
      EXPECT_EQ(comm["zero"], 3);
      EXPECT_GT(comm["bytes"].get<int64_t>(), records("z0-" + tag, "rank1").back()["comm"]["bytes"].get<int64_t>());
    }
}

// Clipping with zero 2 and 3 all-reduces one float (the squared norm) between the
// reduce-scatter and the all-gathers. Over Gloo at 4 ranks, that small all-reduce once
// made every later operation of the step stall (about 1 s a step against 0.02 s). The
// clipped arms must equal single with clipping, and their communication per step stay
// within a few times the same arm's without clipping (medians over the steps, so a
// hiccup of the machine does not count).
TEST_F(DataParallel, ZeroTwoAndThreeWithClippingOverGlooEqualSingleWithoutStalling) {
  use_workload("cnn");
  const int n = 4;
  const int steps = 6;
  auto median_comm = [&](const std::string& arm) {
    std::vector<double> s;
    for (const json& r : records(arm, "rank0")) s.push_back(r["comm"]["seconds"].get<double>());
    std::sort(s.begin(), s.end());
    return s.at(s.size() / 2);
  };
  RoleContext single = context("single", 1, steps);
  single.config.clip_grad_norm = 0.5;
  run_single(single);
  for (int zero : {2, 3}) {
    const std::string z = "z" + std::to_string(zero);
    const json fields = {{"bucket_mb", 0.5}, {"backend", "gloo"}, {"zero", zero}};
    testing::run_data_parallel_ranks(context(z, n, steps, fields));
    RoleContext clipped = context(z + "-clip", n, steps, fields);
    clipped.config.clip_grad_norm = 0.5;
    testing::run_data_parallel_ranks(clipped);
    const double diff = max_abs_diff(final_weights("single"), final_weights(z + "-clip"));
    const double plain = median_comm(z), with_clip = median_comm(z + "-clip");
    std::cout << "[ measured ] zero " << zero << " over gloo, 4 ranks, clipped: max |param diff| to single " << diff
              << "; communication per step " << plain * 1e3 << " ms unclipped, " << with_clip * 1e3
              << " ms clipped\n";
    EXPECT_LT(diff, kSameUpdate) << "zero " << zero;
    EXPECT_LE(with_clip, 3.0 * plain + 0.05) << "zero " << zero << ": clipping stalls the step";
  }
}

// The per-rank memory of ZeRO-3 against its formula: of the parameters, the shard plus
// the stage in use; of the gradients, the shard plus the bucket being filled; of the
// optimizer state (Adam's two slots), the shard. Ranks are threads of one process here,
// so the engine's peaks are every rank's together: the shards add up exactly, the
// transients (a stage, a bucket) only where the ranks' coincide, so the transients are
// bounded, not matched: a gathered stage counts between once (the ranks gathered it at
// different moments) and N times (at once) in the process's peak, i.e. between 1/N and
// 1 of it per rank. lenet5's fc1 stage is 78 % of its parameters: gathering it costs
// more than sharding the rest saves, so ZeRO-3 holds more parameters than zero 0 here.
TEST_F(DataParallel, ZeroThreeEqualsZeroZeroAndHoldsAShardOfEveryState) {
  use_workload("lenet5");
  const int n = 2;
  auto arm = [&](const std::string& name, int zero) {
    RoleContext c = context(name, n, 5, {{"bucket_mb", 0.05}, {"zero", zero}});
    c.config.optimizer = {.name = "adam", .lr = 1e-3f};
    engine::reset_memory_peaks();
    testing::run_data_parallel_ranks(c);
  };
  arm("zero0", 0);
  arm("zero3", 3);
  const double diff = max_abs_diff(final_weights("zero0"), final_weights("zero3"));
  std::cout << "[ measured ] zero 3 vs zero 0 over Gloo: max |param diff| = " << diff << "\n";
  EXPECT_LT(diff, testing::kAdamSameUpdate);  // Adam, and Gloo's two rings add in other orders

  auto model = workload_->make_model("lenet5", 3);
  int64_t params = 0, largest_stage = 0;
  for (int s = 0; s < model->num_stages(); ++s) {
    int64_t bytes = 0;
    for (const engine::Tensor& p : model->stage(s).parameters()) bytes += p.numel() * 4;
    params += bytes;
    largest_stage = std::max(largest_stage, bytes);
  }
  const int64_t bucket = records("zero3", "rank0").back()["comm"]["largest_bucket_bytes"].get<int64_t>();
  const int64_t p3 = peak("zero3", n, "parameters") / n, g3 = peak("zero3", n, "gradients") / n,
                o3 = peak("zero3", n, "optimizer_state") / n;
  const int64_t formula_p = params / n + largest_stage, formula_o = 2 * params / n;
  std::cout << "[ measured ] zero 3 per rank (bytes): parameters " << p3 << " (formula " << formula_p
            << "), gradients " << g3 << " (shard " << params / n << " + at most a bucket " << bucket
            << "), optimizer state " << o3 << " (" << formula_o << "); zero 0 parameters "
            << peak("zero0", n, "parameters") / n << "\n";
  // Within a bucket's padding to a multiple of N, the stage counted between 1/N and once.
  EXPECT_GE(static_cast<double>(p3), 0.98 * static_cast<double>(params / n + largest_stage / n));
  EXPECT_LE(static_cast<double>(p3), 1.02 * static_cast<double>(formula_p));
  EXPECT_NEAR(static_cast<double>(o3), static_cast<double>(formula_o), 0.02 * formula_o);
  EXPECT_GE(g3, params / n);
  EXPECT_LE(g3, params / n + bucket);
  EXPECT_LT(o3, peak("zero0", n, "optimizer_state") / n);
}

// The hardest stages for the boundaries: resnet-mini's blocks pass skip tensors through
// stages, BatchNorm statistics are summed over the ranks, and with checkpointing each
// stage is recomputed in backward from parameters gathered again.
TEST_F(DataParallel, ZeroThreeWithSyncBatchNormAndCheckpointingEqualsSingle) {
  use_workload("resnet-mini", 256);
  auto ctx = [&](const std::string& name, int ranks, json settings) {
    RoleContext c = context(name, ranks, 3, std::move(settings));
    c.config.batch = 16;
    c.config.checkpoint = ranks > 1;
    return c;
  };
  run_single(ctx("single", 1, json::object()));
  testing::run_data_parallel_ranks(ctx("z3", 2, {{"sync_bn", true}, {"zero", 3}, {"bucket_mb", 0.05}}));
  const double diff = max_abs_diff(final_weights("single"), final_weights("z3"));
  std::cout << "[ measured ] ZeRO-3, SyncBatchNorm, checkpointed, N=2 vs single (resnet-mini): max |diff| = " << diff
            << "\n";
  EXPECT_LT(diff, 2e-5);
}

// Settings made in code, not by the spec, get the spec's checks when the role starts.
// Two simulated hosts of two ranks (rank r on host r % 2, so hosts are not contiguous):
// the hierarchical all-reduce gives single's update, plain and over the fp16 wire, and
// each step's bytes per level are the formula's: within a host, the all-reduce of two
// ranks 2(2-1)/2 * S plus the leader's broadcast S; between hosts, the leaders' ring
// 2(2-1)/2 * S and nothing on the others.
TEST_F(DataParallel, HierarchicalOverTwoHostsEqualsSingleAndCountsBytesPerLevel) {
  use_workload("mlp");
  run_single(context("single", 1, 6));
  ::setenv("QUARTET_SIMULATED_HOSTS", "2", 1);
  testing::run_data_parallel_ranks(context("hier", 4, 6, {{"bucket_mb", 0.1}, {"backend", "hierarchical"}}));
  testing::run_data_parallel_ranks(
      context("hier16", 4, 6, {{"bucket_mb", 0.1}, {"backend", "hierarchical"}, {"compress", "fp16"}}));
  ::unsetenv("QUARTET_SIMULATED_HOSTS");
  const double diff = max_abs_diff(final_weights("single"), final_weights("hier"));
  std::cout << "[ measured ] 2 hosts x 2 ranks, hierarchical vs single: max |param diff| = " << diff << "\n";
  EXPECT_LT(diff, kSameUpdate);
  EXPECT_LT(max_abs_diff(final_weights("single"), final_weights("hier16")), 1e-3);

  const int64_t s = 235146 * 4;  // the mlp's gradients, every bucket once a step
  for (int rank = 0; rank < 4; ++rank) {
    const bool leader = rank < 2;
    for (const json& r : records("hier", "rank" + std::to_string(rank))) {
      const json& comm = r["comm"];
      EXPECT_EQ(comm["backend"], "hierarchical");
      EXPECT_EQ(comm["levels"]["intra"]["bytes"].get<int64_t>(), s + s) << "rank " << rank;
      EXPECT_EQ(comm["levels"]["inter"]["bytes"].get<int64_t>(), leader ? s : 0) << "rank " << rank;
      EXPECT_EQ(comm["bytes"].get<int64_t>(), s + s + (leader ? s : 0)) << "rank " << rank;
      EXPECT_EQ(comm["transport_bytes"], comm["bytes"]);
      EXPECT_GT(comm["levels"]["intra"]["seconds"].get<double>(), 0.0);
      // Per bucket: within the host 2(2-1) ring messages and the broadcast; between, 2(2-1).
      const int64_t buckets = comm["buckets"].get<int64_t>();
      EXPECT_EQ(comm["levels"]["intra"]["messages"].get<int64_t>(), 3 * buckets);
      EXPECT_EQ(comm["levels"]["inter"]["messages"].get<int64_t>(), leader ? 2 * buckets : 0);
      EXPECT_EQ(comm["intra_link"], "nvlink");
    }
  }
  // fp16: the reductions move halves, the leader's broadcast floats.
  const json half = records("hier16", "rank0").back()["comm"];
  EXPECT_EQ(half["levels"]["intra"]["bytes"].get<int64_t>(), s / 2 + s);
  EXPECT_EQ(half["levels"]["inter"]["bytes"].get<int64_t>(), s / 2);
}

// ZeRO's reduce-scatter and all-gather are not hierarchical: the combination is refused.
TEST_F(DataParallel, HierarchicalWithZeroIsRefused) {
  use_workload("mlp");
  RoleContext c = context("hz", 2, 1);
  try {
    testing::regime_settings("data_parallel", c, {{"ranks", 2}, {"backend", "hierarchical"}, {"zero", 1}});
    FAIL() << "expected a refusal";
  } catch (const SettingsError& e) {
    EXPECT_NE(std::string(e.what()).find(".zero: backend \"hierarchical\""), std::string::npos) << e.what();
  }
}

TEST_F(DataParallel, BatchThatDoesNotSplitOverRanksIsRefused) {
  use_workload("mlp");
  RoleContext c = context("odd", 2, 1);
  c.role = "rank0";
  data_parallel::Settings s;
  s.ranks = 3;
  c.settings = std::make_shared<data_parallel::Settings>(s);
  try {
    find_regime("data_parallel").run_role(c);  // refused before any rendezvous
    FAIL() << "expected a refusal";
  } catch (const SettingsError& e) {
    EXPECT_NE(std::string(e.what()).find("3 ranks"), std::string::npos) << e.what();
  }
}

TEST_F(DataParallel, NcclIsRefusedOnThisBuild) {
  use_workload("mlp");
  RoleContext c = context("nccl", 2, 1);
  c.role = "rank0";
  data_parallel::Settings s;
  s.ranks = 2;
  s.backend = "nccl";
  c.settings = std::make_shared<data_parallel::Settings>(s);
  try {
    find_regime("data_parallel").run_role(c);
    FAIL() << "expected a refusal";
  } catch (const SettingsError& e) {
    EXPECT_NE(std::string(e.what()).find("nccl"), std::string::npos) << e.what();
  }
  EXPECT_THROW(testing::regime_settings("data_parallel", c, {{"ranks", 2}, {"backend", "nccl"}}), SettingsError);
}

// Gloo and shm reduce host memory: an arm on a GPU needs nccl.
TEST_F(DataParallel, HostBackendsAreRefusedForAGpuArm) {
  use_workload("mlp");
  RoleContext c = context("gpu", 2, 1);
  c.device = engine::Device::cuda(0);
  for (const char* backend : {"gloo", "shm"}) {
    try {
      testing::regime_settings("data_parallel", c, {{"ranks", 2}, {"backend", backend}});
      FAIL() << backend << ": expected a refusal";
    } catch (const SettingsError& e) {
      EXPECT_NE(std::string(e.what()).find("an arm on cuda:0 needs \"nccl\""), std::string::npos) << e.what();
    }
  }
}

// NCCL runs one rank a GPU: more ranks on this host than GPUs from the arm's device on
// are refused before anything starts (in a build without NCCL, for that reason instead).
TEST_F(DataParallel, AnNcclArmNeedsAGpuForEachLocalRank) {
  use_workload("mlp");
  RoleContext c = context("gpu", 1, 1);
  c.device = engine::Device::cuda(0);
  const int ranks = engine::cuda_device_count() + 1;
  try {
    testing::regime_settings("data_parallel", c, {{"ranks", ranks}, {"backend", "nccl"}});
    FAIL() << "expected a refusal";
  } catch (const SettingsError& e) {
    const std::string what = e.what();
    if (what.find("needs a build of Quartet with NCCL") != std::string::npos) return;
    EXPECT_NE(what.find(".ranks: " + std::to_string(ranks) + " ranks on this host need " + std::to_string(ranks) +
                        " GPUs from cuda:0 on; it has " + std::to_string(ranks - 1) + " (NCCL runs one rank per GPU)"),
              std::string::npos)
        << what;
  }
}

TEST_F(DataParallel, RolesAreOneRankEach) {
  data_parallel::Settings s;
  s.ranks = 3;
  EXPECT_EQ(find_regime("data_parallel").roles(s), (std::vector<std::string>{"rank0", "rank1", "rank2"}));
}

}  // namespace
}  // namespace quartet::trainers
