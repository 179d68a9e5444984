#include "trainers/mesh/pipe_step.h"

#include <span>
#include <utility>
#include <stdexcept>

#include "engine/autograd.h"
#include "engine/ops.h"

namespace quartet::trainers::mesh {
namespace {

using engine::Tensor;
using engine::TensorList;
using transport::CollectiveKind;

// The shape header: a tensor count, then per tensor its rank and dims.
constexpr size_t kHeaderFloats = 1 + 4 * 6;

std::span<float> floats(Tensor& t) { return {t.device_data(), static_cast<size_t>(t.numel())}; }

}  // namespace

PipeStep::PipeStep(engine::Model& stages, const workloads::Workload& workload, const Reducer& reducer,
                   transport::Collectives& line, transport::Collectives* to_prev, transport::Collectives* to_next,
                   LocalBatch local)
    : stages_(stages),
      device_(stages.device()),
      workload_(workload),
      reducer_(reducer),
      line_(line),
      to_prev_(to_prev),
      to_next_(to_next),
      local_(std::move(local)) {}

// Link groups hold the two neighbours; the sender is the root: rank 0 of the link to the
// next stage, rank 1 of the link to the previous one.
void PipeStep::send(transport::Collectives& link, const TensorList& tensors, bool header) {
  const int me = &link == to_next_ ? 0 : 1;
  Stopwatch clock;
  if (header) {
    if (tensors.size() > 4) throw std::runtime_error("mesh: a pipeline stage hands on more than 4 tensors");
    std::vector<float> h(kHeaderFloats, 0.0f);
    h[0] = static_cast<float>(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      const engine::Shape& shape = tensors[i].shape();
      if (shape.size() > 5) throw std::runtime_error("mesh: a pipeline activation has more than 5 dims");
      h[1 + 6 * i] = static_cast<float>(shape.size());
      for (size_t d = 0; d < shape.size(); ++d) h[2 + 6 * i + d] = static_cast<float>(shape[d]);
    }
    link.broadcast(h, me);
    counters.add(CollectiveKind::broadcast, static_cast<int64_t>(h.size()) * 4, link, 0.0);
  }
  for (Tensor t : tensors) {
    link.broadcast(floats(t), me);
    counters.add(CollectiveKind::broadcast, t.numel() * 4, link, 0.0);
  }
  counters.seconds += clock.seconds();
  send_seconds += clock.seconds();
}

// From the previous stage (like: none; a header first) or the next (like: the outputs
// whose gradients come back, shaped alike).
TensorList PipeStep::receive(const TensorList* like) {
  transport::Collectives& link = like ? *to_next_ : *to_prev_;
  const int root = like ? 1 : 0;
  Stopwatch clock;
  TensorList out;
  if (like) {
    for (const Tensor& t : *like) out.push_back(Tensor::zeros(t.shape(), device_));
  } else {
    std::vector<float> h(kHeaderFloats);
    link.broadcast(h, root);
    const size_t n = static_cast<size_t>(h[0]);
    for (size_t i = 0; i < n; ++i) {
      engine::Shape shape;
      for (size_t d = 0; d < static_cast<size_t>(h[1 + 6 * i]); ++d) shape.push_back(static_cast<int64_t>(h[2 + 6 * i + d]));
      out.push_back(Tensor::zeros(shape, device_));
    }
  }
  for (Tensor& t : out) link.broadcast(floats(t), root);
  wait_seconds += clock.seconds();
  return out;
}

// The reducer's inline seconds include this step's waits and sends (the mesh's hook adds
// them), so forward and backward count compute only.
double PipeStep::run(const workloads::Batch& whole, float scale, StepTimes& t) {
  const bool first = to_prev_ == nullptr, last = to_next_ == nullptr;
  const workloads::Batch local = local_ && (first || last) ? local_(whole) : workloads::Batch{};
  const workloads::Batch& batch = local_ ? local : whole;
  TensorList inputs;
  if (first) {
    inputs = {batch.x.to(device_)};
  } else {
    inputs = receive(nullptr);
    for (Tensor& a : inputs) a.set_requires_grad(true);
  }
  double inline0 = reducer_.inline_seconds();
  Stopwatch clock;
  const TensorList outputs = stages_.forward_stages(inputs, 0, stages_.num_stages());
  Tensor loss;
  std::vector<float> value{0.0f};
  if (last) {
    if (outputs.size() != 1) throw std::runtime_error("mesh: the model's last stage gives more than one tensor");
    loss = workload_.loss(outputs[0], batch.y);
    value[0] = loss.item();
  }
  engine::device_synchronize(device_);
  t.forward += clock.seconds() - (reducer_.inline_seconds() - inline0);
  if (!last) send(*to_next_, outputs, true);
  inline0 = reducer_.inline_seconds();
  clock.restart();
  {
    // A layer's side loss (gpt-moe's balance loss) weighs what this loss weighs.
    engine::SideLossWeightScope side(scale);
    if (last) {
      engine::scale(loss, scale).backward();
    } else {
      const TensorList grads = receive(&outputs);
      TensorList roots, seeds;
      for (size_t i = 0; i < outputs.size(); ++i)
        if (outputs[i].requires_grad()) {
          roots.push_back(outputs[i]);
          seeds.push_back(grads[i]);
        }
      if (!roots.empty()) engine::run_backward(roots, seeds);
    }
  }
  engine::device_synchronize(device_);
  t.backward += clock.seconds() - (reducer_.inline_seconds() - inline0);
  if (!first) send(*to_prev_, engine::grads_or_zeros(inputs), false);
  // The loss lives on the last stage: every stage gets it (a sum of one value).
  Stopwatch sum;
  line_.all_reduce(value);
  const double s = sum.seconds();
  counters.add(CollectiveKind::all_reduce, 4, line_, s);
  wait_seconds += s;
  return value[0];
}

}  // namespace quartet::trainers::mesh
