#pragma once

// A published table as the planner's check: Narayanan et al., "Efficient Large-Scale
// Language Model Training on GPU Clusters Using Megatron-LM" (SC'21), Table 1 — GPT
// models of 1.7B to 1T parameters on 32 to 3,072 A100 GPUs, each row's tensor- and
// pipeline-parallel sizes, batch, and achieved teraFLOP/s per GPU. The planner predicts
// each row's teraFLOP/s as the paper counts them (96 B s l h^2 (1 + s/6h + V/16lh)
// FLOPs a step, activation recomputation included) over its predicted step time.

#include <string>
#include <vector>

#include "analysis/plan/arm.h"
#include "analysis/plan/cluster.h"

namespace quartet::analysis::plan {

struct MegatronRow {
  std::string model;      // model_shape's name: gpt-1.7b .. gpt-1t
  double billions;        // the table's parameter count
  int64_t tp, pp, gpus, batch;
  double teraflops;       // achieved per GPU, the paper's
  // How the row was run, from the paper's artifact (Megatron-LM's
  // examples/sc21/run_table_1.sh): samples a micro-batch, and model chunks a pipeline
  // rank holds (layers a stage over --num-layers-per-virtual-pipeline-stage; 1: plain 1F1B).
  int64_t micro_batch = 1, virtual_stages = 1;
};

const std::vector<MegatronRow>& megatron_table1();

// The row as a planned arm: tp × pp × dp = gpus, the row's micro-batch and chunks
// (interleaved 1F1B where it has several), fp16 mixed precision with Adam, activation
// recomputation, no ZeRO.
PlanArm megatron_arm(const MegatronRow& row);

// The paper's FLOPs of one step of the row's model (with recomputation).
double megatron_step_flops(const MegatronRow& row);

struct MegatronPrediction {
  MegatronRow row;
  double teraflops = 0.0;   // predicted, per GPU
  double error = 0.0;       // (predicted − paper) / paper
  double memory_bytes = 0.0;  // the fullest GPU's
  bool fits = false;
  std::string bottleneck;
};

// `cluster` with its matmul and attention efficiencies scaled by one factor so that the
// table's first row (1.7B on 32 GPUs) is predicted at the paper's 137 teraFLOP/s: the
// calibration. Other efficiencies are the profile's.
ClusterProfile calibrated_on_first_row(const ClusterProfile& cluster);

// Every row predicted on `cluster` (calibrate it first for the paper's check).
std::vector<MegatronPrediction> predict_megatron_table(const ClusterProfile& cluster);

}  // namespace quartet::analysis::plan
