#include "trainers/tensor_parallel/slice_hook.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "engine/safetensors.h"

namespace quartet::trainers::tensor_parallel {

using engine::Tensor;
using workloads::TensorSplit;

std::vector<std::pair<int64_t, int64_t>> slice_runs(const engine::Shape& shape, TensorSplit split, int rank,
                                                    int size) {
  const int64_t numel = engine::shape_numel(shape);
  switch (split) {
    case TensorSplit::whole:
      return {{0, numel}};
    case TensorSplit::first_rank:
      return rank == 0 ? std::vector<std::pair<int64_t, int64_t>>{{0, numel}} : std::vector<std::pair<int64_t, int64_t>>{};
    case TensorSplit::rows: {
      const int64_t part = numel / size;
      return {{rank * part, part}};
    }
    case TensorSplit::columns: {
      const int64_t cols = shape.at(1), row = numel / shape.at(0), part = cols / size;
      std::vector<std::pair<int64_t, int64_t>> runs;
      for (int64_t r = 0; r < shape.at(0); ++r) runs.emplace_back(r * row + rank * part, part);
      return runs;
    }
  }
  return {};
}

SliceHook::SliceHook(const RoleContext& ctx, transport::Collectives& comm, bool sequence_parallel)
    : ctx_(ctx),
      comm_(comm),
      sequence_parallel_(sequence_parallel),
      sum_(comm_, counters_),
      gather_sum_(comm_, gather_counters_) {}

std::vector<int64_t> SliceHook::positions() const {
  const int64_t t = workloads::context_parallel_context(ctx_.model_name), slice = t / comm_.size();
  std::vector<int64_t> out;
  for (int64_t p = comm_.rank() * slice; p < (comm_.rank() + 1) * slice; ++p) out.push_back(p);
  return out;
}

// Sequence parallel: each rank's backward seeded its own tokens' mean loss, and the
// reduce-scatters and all-gathers summed those over the ranks into every split
// parameter's gradient: N times the mean loss's. A whole parameter got only its own
// tokens' part, the ranks' parts summed here. Both are scaled by 1/N.
double SliceHook::finish() {
  if (!sequence_parallel_) return 0.0;
  const float mean = 1.0f / static_cast<float>(comm_.size());
  for (Part& p : parts_) {
    if (!p.slice.defined() || !p.slice.grad().defined()) continue;
    Tensor g = p.slice.grad();
    if (p.split == TensorSplit::whole) sum_.all_reduce_sum(g);
    engine::scale_(g, mean);
  }
  return 0.0;  // its sums' time is in inline_seconds()
}

void SliceHook::load(engine::Model& shard) {
  const engine::SafetensorsFile init = engine::read_safetensors(ctx_.init_weights.string());
  std::map<std::string, Tensor> whole(init.tensors.begin(), init.tensors.end());
  std::map<std::string, Tensor> mine;
  for (auto& [name, t] : shard.named_parameters()) mine[name] = t;
  for (const auto& [name, split] : workloads::tensor_parallel_plan(ctx_.model_name)) {
    const auto w = whole.find(name);
    if (w == whole.end()) throw std::runtime_error("tensor_parallel: the initial weights lack " + name);
    Part p{name, split, w->second.shape(), {}};
    const auto runs = slice_runs(p.whole_shape, split, comm_.rank(), comm_.size());
    if (!runs.empty()) {
      p.slice = mine.at(name);
      const std::vector<float> values = w->second.to_vector();
      std::vector<float> part;
      for (const auto& [offset, count] : runs) part.insert(part.end(), values.begin() + offset, values.begin() + offset + count);
      p.slice.copy_from_host(part);
    }
    parts_.push_back(std::move(p));
  }
}

void SliceHook::hold_only(const std::function<bool(const std::string& name)>& held, transport::Collectives& across) {
  across_ = &across;
  for (Part& p : parts_)
    if (p.slice.defined() && !held(p.name)) {
      p.slice.release_storage();
      p.slice = Tensor();
    }
}

void SliceHook::start(const Position& pos) {
  if (ctx_.resume) data_parallel::check_same_step(comm_, pos.step, ctx_.device, "tensor_parallel");
  engine::reset_memory_peaks();
}

void SliceHook::begin_step() {
  before_ = counters_;
  sum_.seconds = 0.0;
}

// Clips by the whole model's gradient norm (engine::clip_grad_norm's rule): the split
// parameters' squares summed over the ranks, rank 0's first_rank biases once, and the
// copies every rank holds once.
double SliceHook::step(engine::Optimizer& optimizer, double clip_grad_norm) {
  double comm = 0.0;
  if (clip_grad_norm > 0.0) {
    std::vector<Tensor> split, copies;
    for (const Part& p : parts_)
      if (p.slice.defined()) (p.split == TensorSplit::whole ? copies : split).push_back(p.slice.grad());
    comm = data_parallel::clip_by_group_norm(split, copies, sum_, clip_grad_norm, ctx_.device);
  }
  optimizer.step();
  return comm;
}

// Every rank sums the split parameters' slices, placed in zeros, into the whole; rank
// 0 keeps them, with its own copies of the rest, in a whole model it builds here.
void SliceHook::gather_model() {
  if (ctx_.rank == 0 && !whole_) whole_ = make_model(ctx_);
  std::map<std::string, Tensor> target;
  if (whole_)
    for (auto& [name, t] : whole_->named_parameters()) target[name] = t;
  for (Part& p : parts_) {
    const bool copy = p.split == TensorSplit::whole || p.split == TensorSplit::first_rank;
    if (copy && !across_) {
      if (whole_) target.at(p.name).copy_from(p.slice);
      continue;
    }
    // A copy every rank holds counts once: from the group's rank 0.
    const bool adds = p.slice.defined() && (p.split != TensorSplit::whole || comm_.rank() == 0);
    Tensor buf = Tensor::zeros(p.whole_shape, ctx_.device);
    if (adds) {
      const std::vector<float> mine = p.slice.to_vector();
      update_on_host(buf, [&](std::span<float> v) {
        size_t at = 0;
        for (const auto& [offset, count] : slice_runs(p.whole_shape, p.split, comm_.rank(), comm_.size())) {
          std::copy_n(mine.begin() + static_cast<std::ptrdiff_t>(at), count, v.begin() + offset);
          at += static_cast<size_t>(count);
        }
      });
    }
    if (comm_.size() > 1) gather_sum_.all_reduce_sum(buf);
    if (across_) {
      Stopwatch clock;
      across_->all_reduce({buf.device_data(), static_cast<size_t>(buf.numel())});
      gather_counters_.add(transport::CollectiveKind::all_reduce, buf.numel() * 4, *across_, clock.seconds());
    }
    if (whole_) target.at(p.name).copy_from(buf);
  }
}

void SliceHook::release_model() {
  whole_.reset();
  engine::reset_memory_peaks();
}

}  // namespace quartet::trainers::tensor_parallel
