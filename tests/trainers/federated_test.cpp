// The federated regime end to end in one process: an in-process coordinator on
// 127.0.0.1:0, the server and pool roles as threads over the real transport, and a
// hand-written client where a test needs one that misbehaves.

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <exception>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/temp_folder.h"
#include "tests/trainers/trainer_test_util.h"
#include "engine/safetensors.h"
#include "engine/threads.h"
#include "trainers/federated/client.h"
#include "trainers/federated/privacy.h"
#include "trainers/federated/protocol.h"
#include "trainers/federated/roles.h"
#include "trainers/training_loop.h"
#include "trainers/regime.h"
#include "transport/coordinator.h"
#include "transport/messages.h"
#include "workloads/workload.h"

namespace quartet::trainers {
namespace {

using testing::max_abs_diff;

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

class Federated : public test_util::TempFolderTest {
 protected:
  Federated() : TempFolderTest("federated") {}
  void SetUp() override {
    TempFolderTest::SetUp();
    workloads::WorkloadConfig wc;
    wc.name = "synthetic";
    wc.model = "mlp";
    wc.train_limit = 256;
    wc.test_limit = 64;
    workload_ = workloads::make_workload(wc);
    init_ = dir_ / "init.safetensors";
    engine::save_safetensors(init_.string(), workload_->make_model("mlp", 3)->state_dict());
    coordinator_ = std::make_unique<transport::Coordinator>(transport::CoordinatorOptions{});
    // Roles share this process: one compute thread each, so concurrent OpenMP teams do
    // not change reduction orders from run to run (processes each have their own).
    engine::set_compute_threads(1);
  }
  void TearDown() override {
    coordinator_.reset();
    TempFolderTest::TearDown();
  }

  std::unique_ptr<transport::CoordinatorClient> join(const std::string& arm, const std::string& role) {
    transport::ClientOptions o;
    o.host = "127.0.0.1";
    o.port = coordinator_->port();
    o.token = coordinator_->token();
    o.arm = arm;
    o.role = role;
    return std::make_unique<transport::CoordinatorClient>(o);
  }

  RoleContext context(const std::string& arm, const std::string& role, const json& settings, int64_t batch) {
    RoleContext c;
    c.arm = arm;
    c.role = role;
    c.arm_dir = dir_ / arm;
    fs::create_directories(c.arm_dir / "roles");
    c.init_weights = init_;
    c.model_name = "mlp";
    c.config.batch = batch;
    c.config.eval_batch = 64;
    c.config.optimizer = {.name = "sgd", .lr = 0.1f};
    c.config.seed = 5;
    c.workload = workload_.get();
    c.settings = testing::regime_settings(settings.empty() ? "single" : "federated", c, settings);
    return c;
  }

  // Runs every role of the arm but `skip` as threads; rethrows the first failure.
  void run_arm(const std::string& arm, const json& settings, int64_t batch, const std::vector<std::string>& skip = {},
               bool resume = false) {
    const Regime& regime = find_regime("federated");
    RoleContext probe = context(arm, "server", settings, batch);
    const auto roles = regime.roles(*probe.settings);
    std::vector<std::thread> threads;
    std::vector<std::exception_ptr> errors(roles.size());
    for (size_t i = 0; i < roles.size(); ++i) {
      if (std::find(skip.begin(), skip.end(), roles[i]) != skip.end()) continue;
      threads.emplace_back([&, i] {
        try {
          auto client = join(arm, roles[i]);
          RoleContext ctx = context(arm, roles[i], settings, batch);
          ctx.rank = static_cast<int>(i);
          ctx.coordinator = client.get();
          ctx.resume = resume;
          regime.run_role(ctx);
          client->leave();
        } catch (...) {
          errors[i] = std::current_exception();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  }

  std::vector<json> round_records(const std::string& arm) {
    std::vector<json> out;
    std::ifstream in(records_path(dir_ / arm, "server"));
    std::string line;
    while (std::getline(in, line)) {
      json j = json::parse(line);
      if (j.value("type", "") == "step") out.push_back(j);
    }
    return out;
  }

  // Runs `fl` (3 rounds) as arm "straight", and as arm "resumed": 2 rounds (the
  // checkpoint a server killed in round 3 leaves), then resumed to 3; the two end equal.
  void run_straight_and_resumed(const json& fl) {
    run_arm("straight", fl, 16);
    json two = fl;
    two["rounds"] = 2;
    run_arm("resumed", two, 16);
    run_arm("resumed", fl, 16, {}, /*resume=*/true);
    EXPECT_EQ(max_abs_diff(final_weights("straight"), final_weights("resumed")), 0.0);
  }

  engine::NamedTensors final_weights(const std::string& arm) {
    return engine::load_safetensors(final_weights_path(dir_ / arm).string());
  }

  fs::path init_;
  std::unique_ptr<workloads::Workload> workload_;
  std::unique_ptr<transport::Coordinator> coordinator_;
};

// FedSGD (McMahan et al. 2017): one client holding the whole training set, one local
// step whose batch is its whole partition, is one step of `single` on the same samples.
// The two sum the batch's gradient in different orders: 1e-6 on weights of ~0.05.
TEST_F(Federated, OneClientOneStepOverItsPartitionEqualsOneSingleStep) {
  const json fl = {{"clients", 1}, {"fraction", 1.0}, {"local_epochs", 1}, {"rounds", 1}, {"processes", 1}};
  run_arm("fed", fl, 256);
  RoleContext single = context("single", "trainer", json::object(), 256);
  single.config.epochs = 1;
  find_regime("single").run_role(single);
  const double diff = max_abs_diff(final_weights("fed"), final_weights("single"));
  EXPECT_LT(diff, 1e-6);
  const auto rounds = round_records("fed");
  ASSERT_EQ(rounds.size(), 1u);
  EXPECT_DOUBLE_EQ(rounds[0]["epoch"].get<double>(), 1.0);
  EXPECT_EQ(rounds[0]["samples"].get<int64_t>(), 256);
}

// Bytes per round are the model's bytes, down and up, per asked client, plus framing:
// frame headers, tensor names and shapes, RoundStart and UpdateDone. Framing <= 1%.
TEST_F(Federated, BytesPerRoundAreModelBytesTimesClientsTimesTwoPlusUnderOnePercent) {
  const json fl = {{"clients", 4}, {"fraction", 0.5}, {"local_epochs", 1}, {"rounds", 2}, {"processes", 2},
                   {"partition", {{"kind", "dirichlet"}, {"alpha", 0.5}}}};
  run_arm("fed", fl, 16);
  const auto rounds = round_records("fed");
  ASSERT_EQ(rounds.size(), 2u);
  int64_t previous_total = 0;
  for (const json& r : rounds) {
    const json& round = r["round"];
    const int64_t model = round["model_bytes"].get<int64_t>();
    const int64_t sampled = static_cast<int64_t>(round["sampled"].size());
    EXPECT_EQ(sampled, 2);
    EXPECT_EQ(round["completed"].get<int64_t>(), 2);
    const int64_t analytic = model * sampled * 2;
    const int64_t total = round["bytes"]["total"].get<int64_t>();
    const double framing = static_cast<double>(total - analytic) / static_cast<double>(analytic);
    std::printf("round %lld: model %lld B, sampled %lld, bytes %lld (analytic %lld), framing %.4f%%\n",
                static_cast<long long>(round["index"].get<int64_t>()), static_cast<long long>(model),
                static_cast<long long>(sampled), static_cast<long long>(total), static_cast<long long>(analytic),
                100.0 * framing);
    EXPECT_GT(total, analytic);
    EXPECT_LE(framing, 0.01);
    int64_t per_client = 0;
    for (const json& c : round["clients"]) {
      EXPECT_GT(c["bytes_down"].get<int64_t>(), model);
      EXPECT_GT(c["bytes_up"].get<int64_t>(), model);
      per_client += c["bytes_down"].get<int64_t>() + c["bytes_up"].get<int64_t>();
    }
    EXPECT_EQ(per_client, total);
    // The record's cumulative counters are the sum of the rounds'.
    EXPECT_EQ(r["bytes_sent"].get<int64_t>() + r["bytes_received"].get<int64_t>(), previous_total + total);
    previous_total += total;
    EXPECT_TRUE(r.contains("eval"));
  }
}

TEST_F(Federated, CompressedUpdatesCountFewerBytesAndStillTrain) {
  const json fp16 = {{"clients", 2}, {"rounds", 1}, {"processes", 1}, {"compress", "fp16"}};
  run_arm("fp16", fp16, 32);
  const json topk = {{"clients", 2}, {"rounds", 1}, {"processes", 1}, {"compress", "topk"}, {"topk_fraction", 0.1}};
  run_arm("topk", topk, 32);
  const json r16 = round_records("fp16").at(0)["round"], rk = round_records("topk").at(0)["round"];
  const int64_t model = r16["model_bytes"].get<int64_t>();
  EXPECT_NEAR(static_cast<double>(r16["bytes"]["up"].get<int64_t>()), model * 2 / 2.0, model * 0.01);
  EXPECT_NEAR(static_cast<double>(rk["bytes"]["up"].get<int64_t>()), model * 2 * 0.1 * 2.0, model * 0.01);
  EXPECT_GT(max_abs_diff(final_weights("fp16"), engine::load_safetensors(init_.string())), 1e-4);
}

enum class PoolFault { vanish, stall, slow };

// A hand-written pool that misbehaves: takes a client's round and its weights, then
// vanishes (closes as a killed process would), stalls forever (a straggler), or answers
// after `slow` with the global weights unchanged as the client's update (a valid, slow
// pool). Runs until the server closes or sends shutdown; `clients` gets each client asked.
void misbehaving_pool(transport::Coordinator& coord, const std::string& arm, int64_t index, PoolFault fault,
                      std::vector<int64_t>& clients, std::chrono::milliseconds slow = 0ms) {
  const std::string address = *coord.kv_get(federated::server_address_key(arm), 60000ms);
  const std::string token = *coord.kv_get(federated::server_token_key(arm), 60000ms);
  const auto [host, port] = transport::parse_host_port(address);
  auto conn = transport::Connection::connect(host, port, 30s);
  transport::send_message(*conn, transport::MessageType::hello,
                          transport::Hello{token, federated::kPoolRolePrefix + std::to_string(index)}, 30s);
  transport::receive_message<transport::Welcome>(*conn, transport::MessageType::welcome, 30s);
  try {
    for (;;) {
      const transport::Frame f = conn->receive(std::chrono::minutes(5));
      if (f.type == transport::MessageType::shutdown) return;
      const auto start = transport::decode_message<federated::RoundStart>(f.payload);
      transport::Frame weights = conn->receive(std::chrono::minutes(5));
      clients.push_back(start.client);
      if (fault == PoolFault::vanish) {
        conn->close();  // as a killed process: the socket goes, nothing is said
        return;
      }
      if (fault == PoolFault::stall) continue;  // never answers; the next frame is shutdown
      std::this_thread::sleep_for(slow);
      const transport::TensorsMessage m = transport::decode_tensors(weights.payload);
      std::vector<transport::TensorRef> refs;
      for (size_t i = 0; i < m.data.size(); ++i) refs.push_back({m.names[i], m.shapes[i], m.data[i]});
      transport::send_tensors(*conn, refs, 30s);
      federated::UpdateDone done;
      done.round = start.round;
      done.client = start.client;
      done.samples = 1;
      transport::send_message(*conn, transport::MessageType::control, done, 30s);
    }
  } catch (const std::exception&) {
  }
}

std::vector<int64_t> pool_clients(const json& round, int64_t pool) {
  return round["pools"].at(static_cast<size_t>(pool))["clients"].get<std::vector<int64_t>>();
}

// The client a vanished pool was training is left out of that round; later rounds hand
// every client to the pools that remain.
TEST_F(Federated, PoolThatVanishesMidRoundLosesOnlyItsClientAndTheOthersTrainTheRest) {
  const json fl = {{"clients", 3}, {"rounds", 2}, {"processes", 3}, {"min_clients", 2}};
  std::vector<int64_t> asked;
  std::thread bad([&] { misbehaving_pool(*coordinator_, "fed", 2, PoolFault::vanish, asked); });
  run_arm("fed", fl, 16, {"pool2"});
  bad.join();
  EXPECT_EQ(asked, std::vector<int64_t>{2});  // pools take the waiting clients in order
  const auto rounds = round_records("fed");
  ASSERT_EQ(rounds.size(), 2u);
  EXPECT_EQ(rounds[0]["round"]["completed"].get<int64_t>(), 2) << rounds[0].dump();
  ASSERT_EQ(rounds[0]["round"]["dropped"].size(), 1u);
  EXPECT_EQ(rounds[0]["round"]["dropped"][0]["client"].get<int64_t>(), 2);
  EXPECT_EQ(rounds[1]["round"]["completed"].get<int64_t>(), 3) << rounds[1].dump();
  EXPECT_TRUE(rounds[1]["round"]["dropped"].empty());
  EXPECT_TRUE(pool_clients(rounds[1]["round"], 2).empty());
  EXPECT_TRUE(fs::exists(final_weights_path(dir_ / "fed")));
}

// Krum with f = 1 needs 5 updates; when a client vanishes, its round has 4, keeps the
// old weights and says why.
TEST_F(Federated, KrumRoundShortOfUpdatesKeepsTheWeightsAndSaysWhy) {
  const json fl = {{"clients", 5}, {"rounds", 1}, {"processes", 5}, {"aggregator", "krum"}, {"krum_byzantine", 1}};
  std::vector<int64_t> asked;
  std::thread bad([&] { misbehaving_pool(*coordinator_, "fed", 4, PoolFault::vanish, asked); });
  run_arm("fed", fl, 16, {"pool4"});
  bad.join();
  const auto rounds = round_records("fed");
  ASSERT_EQ(rounds.size(), 1u);
  EXPECT_EQ(rounds[0]["round"]["completed"].get<int64_t>(), 4);
  EXPECT_FALSE(rounds[0]["round"]["aggregated"].get<bool>());
  EXPECT_NE(rounds[0]["degraded"].get<std::string>().find("krum_byzantine: 1 needs more than 2f + 2 = 4 clients"),
            std::string::npos)
      << rounds[0]["degraded"];
  EXPECT_EQ(max_abs_diff(final_weights("fed"), engine::load_safetensors(init_.string())), 0.0);
}

TEST_F(Federated, StragglerPastTheDeadlineIsLeftOutAndItsPoolGetsNoMoreClients) {
  const json fl = {{"clients", 3}, {"rounds", 2}, {"processes", 3}, {"deadline_s", 1.5}};
  std::vector<int64_t> asked;
  std::thread slow([&] { misbehaving_pool(*coordinator_, "fed", 1, PoolFault::stall, asked); });
  run_arm("fed", fl, 16, {"pool1"});
  slow.join();
  EXPECT_EQ(asked, std::vector<int64_t>{1});
  const auto rounds = round_records("fed");
  ASSERT_EQ(rounds.size(), 2u);
  EXPECT_EQ(rounds[0]["round"]["completed"].get<int64_t>(), 2);
  ASSERT_EQ(rounds[0]["round"]["dropped"].size(), 1u);
  EXPECT_NE(rounds[0]["round"]["dropped"][0]["reason"].get<std::string>().find("deadline"), std::string::npos);
  EXPECT_GE(rounds[0]["round"]["time"]["collect"].get<double>(), 1.4);
  // Still holding round 1's client in round 2: the two other pools train all three.
  EXPECT_EQ(rounds[1]["round"]["completed"].get<int64_t>(), 3) << rounds[1].dump();
  EXPECT_TRUE(pool_clients(rounds[1]["round"], 1).empty());
}

// A work queue, not a static placement: while a slow pool holds client 1, the other pool
// takes every client after it (pool c mod 2 would have given the slow one client 3 too).
TEST_F(Federated, AFreePoolTakesTheNextWaitingClient) {
  const json fl = {{"clients", 4}, {"rounds", 1}, {"processes", 2}};
  std::vector<int64_t> asked;
  std::thread slow([&] { misbehaving_pool(*coordinator_, "fed", 1, PoolFault::slow, asked, 3000ms); });
  run_arm("fed", fl, 16, {"pool1"});
  slow.join();
  EXPECT_EQ(asked, std::vector<int64_t>{1});
  const json round = round_records("fed").at(0)["round"];
  EXPECT_EQ(round["completed"].get<int64_t>(), 4);
  EXPECT_EQ(pool_clients(round, 0), (std::vector<int64_t>{0, 2, 3}));
  EXPECT_EQ(pool_clients(round, 1), std::vector<int64_t>{1});
  for (const json& c : round["clients"]) EXPECT_LE(c["started_at"].get<double>(), c["finished_at"].get<double>());
}

// A topk client's residual lives in the pool that trained it, so it stays on pool c mod P.
TEST_F(Federated, TopkClientsStayOnThePoolHoldingTheirResidual) {
  const json fl = {{"clients", 4}, {"rounds", 2}, {"processes", 2}, {"compress", "topk"}, {"topk_fraction", 0.1}};
  run_arm("fed", fl, 16);
  for (const json& r : round_records("fed"))
    for (const json& c : r["round"]["clients"])
      EXPECT_EQ(c["pool"].get<int64_t>(), c["client"].get<int64_t>() % 2) << c.dump();
}

// Any pool can train any client: one pool and three give the same weights bit for bit.
TEST_F(Federated, WeightsDoNotDependOnHowManyPoolsTrainTheClients) {
  const json one = {{"clients", 6}, {"fraction", 0.5}, {"rounds", 3}, {"processes", 1}};
  json three = one;
  three["processes"] = 3;
  run_arm("one", one, 16);
  run_arm("three", three, 16);
  EXPECT_EQ(max_abs_diff(final_weights("one"), final_weights("three")), 0.0);
}

// The server checkpoints every round: a server that stops after round 2 of 3 and is
// resumed ends with the same weights as a run of 3 rounds straight through.
TEST_F(Federated, ResumedServerEndsWithTheWeightsOfAnUninterruptedRun) {
  json fl = {{"clients", 4}, {"fraction", 0.5}, {"rounds", 3}, {"processes", 2}, {"strategy", "fedavgm"},
             {"server_momentum", 0.9}};
  run_straight_and_resumed(fl);
  const auto rounds = round_records("resumed");
  ASSERT_EQ(rounds.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(rounds[i]["step"].get<int64_t>(), i + 1);
}

// FedAdam's m and v are checkpointed with the weights: a resumed FedAdam server also ends
// where an uninterrupted run ends.
TEST_F(Federated, ResumedFedAdamServerEndsWithTheWeightsOfAnUninterruptedRun) {
  json fl = {{"clients", 4}, {"fraction", 0.5}, {"rounds", 3}, {"processes", 2}, {"strategy", "fedadam"},
             {"server_lr", 0.01}};
  run_straight_and_resumed(fl);
  const auto st = engine::read_safetensors(checkpoint_path(dir_ / "resumed").string());
  const auto has = [&](const std::string& prefix) {
    return std::any_of(st.tensors.begin(), st.tensors.end(), [&](const auto& t) { return t.first.starts_with(prefix); });
  };
  EXPECT_TRUE(has("strategy/"));   // m
  EXPECT_TRUE(has("strategy.1/"));  // v
}

// Client 0 of 5 sends its update flipped and scaled by 20. The mean follows it far from
// the run without the attack; the coordinate-wise median takes an honest client's value
// in every coordinate, so it stays about as near the clean run as that run is to the
// initial weights (the median of 4 honest updates is not their mean: 0.023 against 0.020
// when measured), while the mean lands over 10 times as far.
TEST_F(Federated, MedianKeepsAByzantineClientFromDraggingTheModel) {
  const json clean = {{"clients", 5}, {"rounds", 2}, {"processes", 2}};
  json attacked = clean;
  attacked["byzantine_clients"] = 1;
  attacked["byzantine_attack"] = "sign_flip";
  attacked["byzantine_scale"] = 20.0;
  json median = attacked;
  median["aggregator"] = "median";
  run_arm("clean", clean, 16);
  run_arm("mean", attacked, 16);
  run_arm("median", median, 16);
  const auto init = engine::load_safetensors(init_.string());
  const double moved = max_abs_diff(final_weights("clean"), init);
  const double mean_off = max_abs_diff(final_weights("mean"), final_weights("clean"));
  const double median_off = max_abs_diff(final_weights("median"), final_weights("clean"));
  std::printf("clean run moved %.4g; attacked mean %.4g from it, median %.4g\n", moved, mean_off, median_off);
  EXPECT_GT(mean_off, 5.0 * moved);  // (4 d - 20 d) / 5: the mean steps backwards, 3 times as far
  EXPECT_LT(median_off, 2.0 * moved);
  EXPECT_LT(median_off, 0.2 * mean_off);
  EXPECT_EQ(round_records("median").at(0)["round"]["aggregator"], "median");
}

// DP-FedAvg: every round records the epsilon spent so far, the accountant's value for q =
// 2 / 4 and that many rounds; the noise comes from (seed, round), so a resumed server
// (which also resumes the account) ends with the weights of a straight run.
TEST_F(Federated, DpRoundsRecordTheirEpsilonAndResumeBitForBit) {
  json fl = {{"clients", 4}, {"fraction", 0.5}, {"rounds", 3}, {"processes", 2},
             {"dp_clip", 0.05}, {"dp_noise_multiplier", 1.0}, {"dp_delta", 1e-4}};
  run_straight_and_resumed(fl);
  const std::vector<double> orders = federated::default_rdp_orders();
  for (const std::string arm : {"straight", "resumed"}) {
    const auto rounds = round_records(arm);
    ASSERT_EQ(rounds.size(), 3u);
    for (int64_t i = 0; i < 3; ++i) {
      const json& p = rounds[i]["privacy"];
      EXPECT_EQ(p["rounds"].get<int64_t>(), i + 1) << arm;
      EXPECT_DOUBLE_EQ(p["delta"].get<double>(), 1e-4);
      const std::vector<double> rdp = federated::compute_rdp(0.5, 1.0, i + 1, orders);
      const double expected = federated::privacy_spent(orders, rdp, 1e-4).epsilon;
      EXPECT_DOUBLE_EQ(p["epsilon"].get<double>(), expected) << arm << " round " << i + 1;
      EXPECT_DOUBLE_EQ(p["noise_std"].get<double>(), 1.0 * 0.05 / 2);
    }
  }
  run_arm("plain", json{{"clients", 4}, {"fraction", 0.5}, {"rounds", 3}, {"processes", 2}}, 16);
  EXPECT_GT(max_abs_diff(final_weights("straight"), final_weights("plain")), 0.0);
  EXPECT_FALSE(round_records("plain")[0].contains("privacy"));
}

}  // namespace
}  // namespace quartet::trainers
