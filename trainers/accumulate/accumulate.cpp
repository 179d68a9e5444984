#include "trainers/accumulate/accumulate.h"

#include "trainers/training_loop.h"

namespace quartet::trainers::accumulate {
namespace {

class Accumulate final : public RegimeOf<Settings> {
 public:
  std::string_view name() const override { return "accumulate"; }
  std::string_view summary() const override {
    return "one process, k micro-batches of B/k, one optimizer step";
  }
  CriticalPath critical_path(const std::vector<RoleRecords>& roles) const override { return one_process_path(roles); }
  std::string_view cost_model() const override { return "one process, no messages: the same on every link."; }

 protected:
  void complete(Settings& s, const ArmFacts& f, const nlohmann::json&) const override {
    if (f.train.batch % s.micro_batches != 0)
      throw SettingsError(f.path + ".micro_batches: " + std::to_string(s.micro_batches) + " does not divide the batch " +
                          std::to_string(f.train.batch) + "; batches must split evenly");
  }
  std::vector<std::string> roles_of(const Settings&) const override { return {"trainer"}; }
  void run(const RoleContext& ctx, const Settings& s) const override { train_locally(ctx, s.micro_batches); }
};

}  // namespace

const SettingsTable<Settings>& Settings::table() {
  static const SettingsTable<Settings> t = [] {
    SettingsTable<Settings> t;
    t.add(&Settings::micro_batches, "micro_batches",
          "micro-batches per optimizer step, batch / micro_batches samples each; the batch must split evenly")
        .at_least(1);
    return t;
  }();
  return t;
}

const Regime& regime() {
  static const Accumulate r;
  return r;
}

}  // namespace quartet::trainers::accumulate
