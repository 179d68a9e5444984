#include "trainers/local_loop.h"
#include "trainers/regimes.h"

namespace quartet::trainers {
namespace {

// The baseline: one process, the whole batch per step.
class Single : public Regime {
 public:
  std::vector<std::string> roles(const TrainConfig&) const override { return {"trainer"}; }
  void run_role(const RoleContext& ctx) const override {
    RoleContext one = ctx;
    one.config.micro_batches = 1;
    train_locally(one);
  }
};

}  // namespace

std::unique_ptr<Regime> make_single() { return std::make_unique<Single>(); }

}  // namespace quartet::trainers
