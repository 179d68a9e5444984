// The regime table: one line a regime. Its order is the order `quartet list regimes`,
// the schema, docs/spec.md and the GUI show them in.

#include "trainers/accumulate/accumulate.h"
#include "trainers/context_parallel/context_parallel.h"
#include "trainers/data_parallel/data_parallel.h"
#include "trainers/expert_parallel/expert_parallel.h"
#include "trainers/federated/federated.h"
#include "trainers/mesh/mesh.h"
#include "trainers/pipeline/pipeline.h"
#include "trainers/regime.h"
#include "trainers/single/single.h"
#include "trainers/split/split.h"
#include "trainers/tensor_parallel/tensor_parallel.h"

namespace quartet::trainers {

const std::vector<const Regime*>& regime_table() {
  static const std::vector<const Regime*> table{
      &single::regime(),
      &accumulate::regime(),
      &data_parallel::regime(),
      &federated::regime(),
      &split::regime(),
      &pipeline::regime(),
      &tensor_parallel::regime(),
      &context_parallel::regime(),
      &expert_parallel::regime(),
      &mesh::regime(),
  };
  return table;
}

}  // namespace quartet::trainers
