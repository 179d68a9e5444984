// Stage hooks (Model::set_stage_hooks) and releasable storage: the two things ZeRO-3
// builds on. A hook that frees each stage's parameters after its forward and brings them
// back before its backward must leave every gradient as it was.

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/memory.h"
#include "engine/model.h"
#include "tests/engine/stage_net.h"

namespace quartet::engine {
namespace {

using namespace test_net;

// Frees a stage's parameters after its forward, restores them (from copies) before its
// backward, and logs what happened: "F<i>" forward, "B<i>" before backward, "G<i>" a
// parameter of stage i final.
class ReleasingHooks final : public StageHooks {
 public:
  explicit ReleasingHooks(Model& m) : model_(m) {
    for (int s = 0; s < m.num_stages(); ++s)
      for (Tensor p : m.stage(s).parameters()) {
        saved_[s].push_back(p.clone());
        p.add_grad_ready_hook([this, s](const Tensor&) { log.push_back("G" + std::to_string(s)); });
      }
  }
  void before_forward(int s) override {
    log.push_back("F" + std::to_string(s));
    restore(s);
  }
  void after_forward(int s) override {
    if (!grad_enabled()) return;
    for (Tensor p : model_.stage(s).parameters()) p.release_storage();
  }
  void before_backward(int s) override {
    log.push_back("B" + std::to_string(s));
    restore(s);
  }

  std::vector<std::string> log;

 private:
  void restore(int s) {
    std::vector<Tensor> params = model_.stage(s).parameters();
    for (size_t k = 0; k < params.size(); ++k) {
      params[k].materialize_storage();
      params[k].copy_from(saved_[s][k]);
    }
  }
  Model& model_;
  std::map<int, std::vector<Tensor>> saved_;
};

size_t position(const std::vector<std::string>& log, const std::string& event) {
  for (size_t i = 0; i < log.size(); ++i)
    if (log[i] == event) return i;
  ADD_FAILURE() << event << " never happened";
  return log.size();
}

class StageHooksTest : public testing::TestWithParam<bool> {};

TEST_P(StageHooksTest, ReleasedParametersGatheredBeforeBackwardGiveTheSameGradients) {
  const bool checkpointed = GetParam();
  auto plain = make_net(), hooked = make_net();
  hooked->set_checkpointing(checkpointed);
  ReleasingHooks hooks(*hooked);
  hooked->set_stage_hooks(&hooks);
  Tensor l1 = loss_of(*plain, input()), l2 = loss_of(*hooked, input());
  EXPECT_EQ(l1.item(), l2.item());
  l1.backward();
  l2.backward();
  const NamedTensors p1 = plain->named_parameters(), p2 = hooked->named_parameters();
  ASSERT_EQ(p1.size(), p2.size());
  for (size_t i = 0; i < p1.size(); ++i) {
    ASSERT_TRUE(p2[i].second.grad().defined()) << p2[i].first;
    EXPECT_EQ(max_abs_diff(p1[i].second.grad(), p2[i].second.grad()), 0.0f) << p1[i].first;
  }
  // Forward in order; backward reaches each stage from the head down, and a stage's
  // parameters are final only after backward reached it.
  const std::vector<std::string>& log = hooks.log;
  for (int s = 0; s < 4; ++s) {
    const std::string i = std::to_string(s);
    EXPECT_LT(position(log, "F" + i), position(log, "B3")) << i;
    EXPECT_LT(position(log, "B" + i), position(log, "G" + i)) << i;
    if (s > 0) {
      EXPECT_LT(position(log, "B" + i), position(log, "B" + std::to_string(s - 1))) << i;
    }
  }
  EXPECT_EQ(std::count(log.begin(), log.end(), "B1"), 1) << "one boundary per stage and pass";
}

INSTANTIATE_TEST_SUITE_P(Checkpointing, StageHooksTest, testing::Bool(),
                         [](const testing::TestParamInfo<bool>& i) { return i.param ? "on" : "off"; });

TEST(StageHooks, WithoutGradModeNothingIsRecordedAndNoBoundaryIsAdded) {
  auto m = make_net();
  ReleasingHooks hooks(*m);
  m->set_stage_hooks(&hooks);
  NoGradScope no_grad;
  const Tensor y = m->forward(input());
  EXPECT_EQ(y.grad_fn(), nullptr);
  EXPECT_EQ(hooks.log, (std::vector<std::string>{"F0", "F1", "F2", "F3"}));
  for (const auto& [name, p] : m->named_parameters()) EXPECT_TRUE(p.resident()) << name;
}

int64_t current(MemTag t) { return memory_stats().current[static_cast<int>(t)]; }

TEST(Storage, ReleasedStorageIsUnchargedAndRefusesToBeRead) {
  const int64_t before = current(MemTag::parameters);
  {
    Tensor t = Tensor::zeros({1000}, Device::cpu());
    t.materialize_storage();  // resident already: nothing happens
    Storage& s = *t.impl()->storage;
    s.set_tag(MemTag::parameters);
    const Tensor alias = t.detach();
    EXPECT_EQ(current(MemTag::parameters), before + 4000);
    t.release_storage();
    t.release_storage();
    EXPECT_FALSE(alias.resident());
    EXPECT_EQ(current(MemTag::parameters), before);
    EXPECT_THROW(t.data(), std::logic_error);
    EXPECT_THROW(alias.to_vector(), std::logic_error);
    alias.impl()->storage->set_tag(MemTag::gradients);  // released: moves no charge
    alias.impl()->storage->set_tag(MemTag::parameters);
    t.materialize_storage();
    EXPECT_TRUE(alias.resident());
    EXPECT_EQ(current(MemTag::parameters), before + 4000);
    t.fill_(2.0f);
    EXPECT_EQ(alias.to_vector()[999], 2.0f);
    t.release_storage();
  }
  // A storage freed while released gives back nothing twice.
  EXPECT_EQ(current(MemTag::parameters), before);
}

}  // namespace
}  // namespace quartet::engine
