#pragma once

// Helpers the trainer tests share: a folder with a workload and initial weights, comparing
// final weights, reading a role's records, and running every role of an arm
// (data_parallel's ranks, pipeline's stages) as threads of the test process.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/nn.h"
#include "engine/safetensors.h"
#include "tests/temp_folder.h"
#include "tests/text_corpus.h"
#include "trainers/regime.h"
#include "transport/coordinator.h"
#include "workloads/workload.h"

namespace quartet::trainers::testing {

// "The same update" under Adam or AdamW when two arms add the same gradients in another
// order: Adam divides each first moment by the root of the second, so the rounding noise
// of a gradient that is zero by the maths (an input pixel that is always 0, attention's
// key bias) becomes a step of up to lr x |g| / eps. A tenth of one step's largest move at
// lr 1e-3 (docs/data_parallel.md, "How close to single").
constexpr double kAdamSameUpdate = 1e-4;

// The largest elementwise difference of two state dicts; names and counts must agree.
inline double max_abs_diff(const engine::NamedTensors& a, const engine::NamedTensors& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    const float* pa = a[i].second.data();
    const float* pb = b[i].second.data();
    for (int64_t k = 0; k < a[i].second.numel(); ++k) worst = std::max(worst, std::abs(double(pa[k]) - pb[k]));
  }
  return worst;
}

// Every record line of `role` in the arm folder.
inline std::vector<nlohmann::json> read_records(const std::filesystem::path& arm_dir, const std::string& role) {
  std::ifstream in(records_path(arm_dir, role));
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

// `regime`'s settings parsed from `fields` (an arm's regime fields, as a spec gives them),
// checked against c's training settings and model, as the spec parser does.
inline std::shared_ptr<const RegimeSettings> regime_settings(const std::string& regime, const RoleContext& c,
                                                             nlohmann::json fields = nlohmann::json::object()) {
  return find_regime(regime).parse(std::move(fields), facts_of(c));
}

// Runs role c.role of `regime` with its settings from `fields`.
inline void run_role(const std::string& regime, RoleContext c, nlohmann::json fields = nlohmann::json::object()) {
  c.settings = regime_settings(regime, c, std::move(fields));
  find_regime(regime).run_role(c);
}

// Runs every role of `c`'s arm of `regime` as a thread, each with its own client of a
// real coordinator, as the processes of `quartet run` do it; rethrows the first role's
// error.
inline void run_roles_as_threads(const std::string& regime_name, const RoleContext& c) {
  transport::Coordinator coordinator(transport::CoordinatorOptions{});
  const Regime& regime = find_regime(regime_name);
  const std::vector<std::string> roles = regime.roles(*c.settings);
  std::mutex mutex;
  std::exception_ptr error;
  std::vector<std::thread> threads;
  for (int r = 0; r < static_cast<int>(roles.size()); ++r) {
    threads.emplace_back([&, r] {
      try {
        transport::ClientOptions o;
        o.host = coordinator.host();
        o.port = coordinator.port();
        o.token = coordinator.token();
        o.arm = c.arm;
        o.role = roles[r];
        o.requested_rank = r;
        o.timeout = std::chrono::seconds(120);
        transport::CoordinatorClient client(o);
        RoleContext mine = c;
        mine.role = roles[r];
        mine.rank = r;
        mine.coordinator = &client;
        regime.run_role(mine);
        client.leave();
      } catch (...) {
        std::lock_guard lock(mutex);
        if (!error) error = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

// Runs every rank of `c`'s data_parallel arm as a thread, over a real coordinator and
// Gloo; rethrows the first rank's error.
inline void run_data_parallel_ranks(const RoleContext& c) { run_roles_as_threads("data_parallel", c); }

// A test folder holding a workload and the initial weights every arm of the test starts
// from (the model's seed-3 initialisation); context() is an arm's role context with the
// tests' usual training settings (SGD 0.05 with momentum 0.9, seed 5), which a test then
// changes where it needs to.
class RegimeTest : public test_util::TempFolderTest {
 protected:
  using TempFolderTest::TempFolderTest;

  void use_workload(const workloads::WorkloadConfig& wc) {
    model_ = wc.model;
    workload_ = workloads::make_workload(wc);
    init_ = dir_ / "init.safetensors";
    engine::save_safetensors(init_.string(), workload_->make_model(model_, 3)->state_dict());
  }

  // requires use_workload() first
  RoleContext context(const std::string& arm, int64_t batch, int64_t max_steps) const {
    RoleContext c;
    c.arm = arm;
    c.role = "trainer";
    c.arm_dir = dir_ / arm;
    std::filesystem::create_directories(c.arm_dir / "roles");
    c.init_weights = init_;
    c.model_name = model_;
    c.config.batch = batch;
    c.config.max_steps = max_steps;
    c.config.eval_batch = 64;
    c.config.optimizer = {.name = "sgd", .lr = 0.05f, .momentum = 0.9f};
    c.config.seed = 5;
    c.workload = workload_.get();
    return c;
  }

  engine::NamedTensors final_weights(const std::string& arm) const {
    return engine::load_safetensors(final_weights_path(dir_ / arm).string());
  }
  std::vector<nlohmann::json> records(const std::string& arm, const std::string& role) const {
    return read_records(dir_ / arm, role);
  }

  std::filesystem::path init_;
  std::string model_;
  std::unique_ptr<workloads::Workload> workload_;
};

// A regime of ranks (`regime`'s "ranks" field) on a two-source word corpus as a text-lm
// workload of `model`, against single: 4 samples a step, 3 steps, 4 held-out windows.
class RanksOnTextTest : public RegimeTest {
 protected:
  RanksOnTextTest(std::string regime, std::string model, uint64_t corpus_seed)
      : RegimeTest(regime), regime_(std::move(regime)), default_model_(std::move(model)), seed_(corpus_seed) {}

  void SetUp() override {
    RegimeTest::SetUp();
    test_util::write_word_corpus(dir_ / "corpus", seed_);
    use_corpus(0);
  }

  // The corpus as a text-lm workload of `model` (default: the fixture's), its first
  // `train` windows (0: all).
  void use_corpus(int64_t train, const std::string& model = "") {
    workloads::WorkloadConfig wc;
    wc.name = "text-lm";
    wc.model = model.empty() ? default_model_ : model;
    wc.data_dir = (dir_ / "corpus").string();
    wc.train_limit = train;
    wc.test_limit = 4;
    use_workload(wc);
  }

  // An arm of the regime with `ranks` and `settings`; ranks 0: settings left to the caller.
  RoleContext context(const std::string& arm, int64_t ranks, nlohmann::json settings = nlohmann::json::object()) {
    RoleContext c = RegimeTest::context(arm, 4, 3);
    c.config.eval_batch = 4;
    if (ranks > 0) {
      settings["ranks"] = ranks;
      c.settings = regime_settings(regime_, c, settings);
    }
    return c;
  }
  void run_single() { run_role("single", context("single", 0)); }
  // Trains `arm` of regime_ over `ranks` with `settings`, the ranks as threads; returns
  // its final weights' largest difference from single's (run_single() first), printed.
  double diff_from_single(const std::string& arm, int64_t ranks, nlohmann::json settings = nlohmann::json::object()) {
    run_roles_as_threads(regime_, context(arm, ranks, std::move(settings)));
    const double diff = max_abs_diff(final_weights("single"), final_weights(arm));
    std::cout << "[ measured ] " << regime_ << " " << arm << " (" << ranks
              << " ranks) vs single: max |param diff| = " << diff << "\n";
    return diff;
  }

  // Trains an arm of regime_ over 2 ranks (or with `settings`) for 3 epochs of 2 Adam
  // steps, and another that stops after one epoch and resumes from its checkpoints: the
  // same final weights, bit for bit, and ranks 0 and 1's records one per step.
  void expect_resume_bit_for_bit(const nlohmann::json& settings = {{"ranks", 2}}) {
    use_corpus(8);  // two steps of 4 an epoch
    auto ctx = [&](const std::string& arm, int64_t epochs) {
      RoleContext c = context(arm, 0);
      c.config.max_steps = 0;
      c.config.epochs = epochs;
      c.config.optimizer = {.name = "adam", .lr = 1e-3f};
      c.settings = regime_settings(regime_, c, settings);
      return c;
    };
    run_roles_as_threads(regime_, ctx("whole", 3));
    run_roles_as_threads(regime_, ctx("parts", 1));  // one epoch, then "crash"
    std::filesystem::remove(final_weights_path(dir_ / "parts"));
    RoleContext rest = ctx("parts", 3);
    rest.resume = true;
    run_roles_as_threads(regime_, rest);
    EXPECT_EQ(max_abs_diff(final_weights("whole"), final_weights("parts")), 0.0);
    for (const char* role : {"rank0", "rank1"}) {
      int64_t step = 0;
      for (const nlohmann::json& r : records("parts", role)) {
        if (r.value("type", "") != "step") continue;
        EXPECT_EQ(r["step"], ++step) << role;
      }
      EXPECT_EQ(step, 6) << role;
    }
  }

 private:
  std::string regime_, default_model_;
  uint64_t seed_;
};

}  // namespace quartet::trainers::testing
