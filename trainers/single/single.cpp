#include "trainers/single/single.h"

#include "trainers/training_loop.h"

namespace quartet::trainers::single {
namespace {

class Single final : public RegimeOf<Settings> {
 public:
  std::string_view name() const override { return "single"; }
  std::string_view summary() const override { return "one process, batch B (the baseline)"; }
  CriticalPath critical_path(const std::vector<RoleRecords>& roles) const override { return one_process_path(roles); }
  std::string_view cost_model() const override { return "one process, no messages: the same on every link."; }

 protected:
  std::vector<std::string> roles_of(const Settings&) const override { return {"trainer"}; }
  void run(const RoleContext& ctx, const Settings&) const override { train_locally(ctx, 1); }
};

}  // namespace

const SettingsTable<Settings>& Settings::table() {
  static const SettingsTable<Settings> t;
  return t;
}

const Regime& regime() {
  static const Single r;
  return r;
}

}  // namespace quartet::trainers::single
