#include "analysis/plan/megatron.h"

#include <cmath>

#include "analysis/plan/cost.h"
#include "analysis/plan/model_shape.h"

namespace quartet::analysis::plan {

const std::vector<MegatronRow>& megatron_table1() {
  // Narayanan et al. (SC'21), Table 1: parameters (billion), tensor and pipeline
  // model-parallel sizes, GPUs, batch size, achieved teraFLOP/s per GPU.
  static const std::vector<MegatronRow> rows = {
      {"gpt-1.7b", 1.7, 1, 1, 32, 512, 137, 16, 1},      {"gpt-3.6b", 3.6, 2, 1, 64, 512, 138, 16, 1},
      {"gpt-7.5b", 7.5, 4, 1, 128, 512, 142, 16, 1},     {"gpt-18b", 18.4, 8, 1, 256, 1024, 135, 8, 1},
      {"gpt-39b", 39.1, 8, 2, 512, 1536, 138, 4, 1},     {"gpt-76b", 76.1, 8, 4, 1024, 1792, 140, 2, 3},
      {"gpt-145b", 145.6, 8, 8, 1536, 2304, 148, 2, 2},  {"gpt-310b", 310.1, 8, 16, 1920, 2160, 155, 1, 2},
      {"gpt-530b", 529.6, 8, 35, 2520, 2520, 163, 1, 3}, {"gpt-1t", 1008.0, 8, 64, 3072, 3072, 163, 1, 1},
  };
  return rows;
}

PlanArm megatron_arm(const MegatronRow& row) {
  PlanArm a;
  a.name = row.model;
  a.regime = "mesh";
  a.model = row.model;
  a.batch = row.batch;
  a.mesh.tp = row.tp;
  a.mesh.pp = row.pp;
  a.mesh.dp = row.gpus / (row.tp * row.pp);
  a.micro_batches = row.batch / (a.mesh.dp * row.micro_batch);
  a.schedule = "1f1b";
  a.virtual_stages = row.virtual_stages;
  // Megatron's split: layers / pp blocks a stage, the embedding on the first, the head
  // and loss on the last (the cut after block k·l/pp − 1).
  const int64_t layers = model_shape(row.model).gpt->layers;
  for (int64_t k = 1; k < row.pp; ++k) a.cuts.push_back("block" + std::to_string(k * layers / row.pp - 1));
  a.precision = "fp16";
  a.optimizer = "adam";
  a.checkpointing = true;
  a.algorithm = "ring";
  return a;
}

double megatron_step_flops(const MegatronRow& row) {
  const ModelShape m = model_shape(row.model);
  const double B = static_cast<double>(row.batch), s = static_cast<double>(m.gpt->context),
               l = static_cast<double>(m.gpt->layers), h = static_cast<double>(m.gpt->width),
               V = static_cast<double>(m.gpt->vocab);
  return 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h));
}

namespace {

MegatronPrediction predict_row(const MegatronRow& row, const ClusterProfile& c) {
  const Prediction p = predict(model_shape(row.model), megatron_arm(row), c);
  MegatronPrediction out;
  out.row = row;
  out.teraflops = megatron_step_flops(row) / p.step_seconds / static_cast<double>(row.gpus) / 1e12;
  out.error = (out.teraflops - row.teraflops) / row.teraflops;
  out.memory_bytes = p.memory.total();
  out.fits = p.fits;
  out.bottleneck = p.bottleneck;
  return out;
}

ClusterProfile scaled(const ClusterProfile& c, double factor) {
  ClusterProfile s = c;
  s.device.efficiency.matmul = c.device.efficiency.matmul * factor;
  s.device.efficiency.attention = c.device.efficiency.attention * factor;
  return s;
}

}  // namespace

ClusterProfile calibrated_on_first_row(const ClusterProfile& c) {
  // Predicted teraFLOP/s rise with the factor: bisect on it.
  const MegatronRow& first = megatron_table1().front();
  double lo = 0.01, hi = 4.0 / std::max(c.device.efficiency.matmul, c.device.efficiency.attention);
  for (int i = 0; i < 60; ++i) {
    const double mid = std::sqrt(lo * hi);
    (predict_row(first, scaled(c, mid)).teraflops < first.teraflops ? lo : hi) = mid;
  }
  return scaled(c, std::sqrt(lo * hi));
}

std::vector<MegatronPrediction> predict_megatron_table(const ClusterProfile& c) {
  std::vector<MegatronPrediction> out;
  for (const MegatronRow& row : megatron_table1()) out.push_back(predict_row(row, c));
  return out;
}

}  // namespace quartet::analysis::plan
