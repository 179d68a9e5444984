#include "trainers/local_loop.h"
#include "trainers/regimes.h"

namespace quartet::trainers {
namespace {

// Gradient accumulation: k micro-batches of batch/k, one optimizer step. Same update
// as `single` with the whole batch (no BatchNorm), with about 1/k of its activations.
class Accumulate : public Regime {
 public:
  std::vector<std::string> roles(const TrainConfig&) const override { return {"trainer"}; }
  void run_role(const RoleContext& ctx) const override { train_locally(ctx); }
};

}  // namespace

std::unique_ptr<Regime> make_accumulate() { return std::make_unique<Accumulate>(); }

}  // namespace quartet::trainers
