#pragma once

#include "trainers/regime.h"

namespace quartet::trainers {

// One process trains the whole model: each optimizer step takes `batch` samples of the
// epoch's permutation in `micro_batches` slices, each slice's loss scaled by
// 1/micro_batches, so the summed gradient equals the gradient of the whole batch's mean
// loss. Evaluates and checkpoints at the end of every epoch; writes final weights.
void train_locally(const RoleContext& ctx);

}  // namespace quartet::trainers
