#include "trainers/data_parallel/reducer.h"

#include <algorithm>
#include <span>
#include <stdexcept>

#include "engine/ops.h"
#include "trainers/metrics.h"

namespace quartet::trainers {

using engine::MemTag;
using engine::Tensor;
using transport::CollectiveKind;

void CommCounters::add(CollectiveKind kind, int64_t buffer_bytes, const transport::Collectives& comm,
                       double op_seconds, transport::Wire wire) {
  bytes += comm.sent_bytes(kind, buffer_bytes, wire);
  messages += comm.sent_messages(kind);
  seconds += op_seconds;
}

nlohmann::json step_comm_json(const std::string& backend, const CommCounters& step, double exposed) {
  return {{"backend", backend},
          {"algorithmic", true},
          {"messages", step.messages},
          {"bytes", step.bytes},
          {"seconds", step.seconds},
          {"exposed", exposed},
          {"busbw", step.seconds > 0.0 ? static_cast<double>(step.bytes) / step.seconds : 0.0}};
}

namespace {

constexpr int64_t kFirstBucketBytes = int64_t{1} << 20;

// A collective's view of a buffer: its storage on its own device.
std::span<float> device_span(Tensor& t) { return {t.device_data(), static_cast<size_t>(t.numel())}; }

}  // namespace

GradReducer::GradReducer(std::vector<Tensor> params, transport::Collectives& comm, CommCounters& counters,
                         ReducerOptions options)
    : params_(std::move(params)),
      bucket_of_(params_.size(), -1),
      comm_(comm),
      counters_(counters),
      options_(options),
      ranks_(comm.size()),
      rank_(comm.rank()),
      wire_(options.fp16 && comm.half_wire() ? transport::Wire::f16 : transport::Wire::f32),
      device_(params_.empty() ? engine::Device::cpu() : params_.front().device()) {
  if (options_.zero < 0 || options_.zero > 3)
    throw std::invalid_argument("zero: expected 0, 1, 2 or 3, got " + std::to_string(options_.zero));
  if (!options_.group_of.empty() && options_.group_of.size() != params_.size())
    throw std::invalid_argument("group_of: " + std::to_string(options_.group_of.size()) + " groups for " +
                                std::to_string(params_.size()) + " parameters");
  auto group = [&](int i) { return options_.group_of.empty() ? 0 : options_.group_of[i]; };
  // Reverse registration order: the last layers' gradients are final first. As DDP
  // assigns them, a bucket closes once it holds its cap (so the parameter that crosses
  // the cap ends its bucket rather than opening the next one, which would then wait for
  // the layers below); the first bucket's cap is at most 1 MiB (DDP's
  // first_bucket_bytes), so communication starts early. With the cnn, fc1's 1.6 MB
  // weight closes the first bucket and is all-reduced while the convolutions' backward
  // runs, instead of waiting in one bucket with them until backward ends.
  auto cap = [&](size_t bucket) {
    const int64_t c = std::max<int64_t>(options_.bucket_bytes, 4);
    return bucket == 0 ? std::min<int64_t>(c, kFirstBucketBytes) : c;
  };
  bool open = false;
  for (int i = static_cast<int>(params_.size()) - 1; i >= 0; --i) {
    if (!open || buckets_.back().group != group(i)) {
      buckets_.emplace_back();
      buckets_.back().group = group(i);
    }
    Bucket& b = buckets_.back();
    bucket_of_[i] = static_cast<int>(buckets_.size()) - 1;
    b.params.push_back(i);
    b.offsets.push_back(b.numel);
    b.numel += params_[i].numel();
    open = b.numel * static_cast<int64_t>(sizeof(float)) < cap(buckets_.size() - 1);
  }
  for (Bucket& b : buckets_) {
    b.chunk = (b.numel + ranks_ - 1) / ranks_;
    b.shard_offset = shard_numel_;
    shard_numel_ += b.chunk;
    // Kept for the whole run and charged as communication buffers, as DDP's buckets are.
    if (!scatters()) b.buffer = Tensor::empty({b.numel}, device_, MemTag::communication);
  }
  for (size_t i = 0; i < params_.size(); ++i)
    params_[i].add_grad_ready_hook([this, i](const Tensor&) { on_grad_ready(static_cast<int>(i)); });
}

GradReducer::~GradReducer() {
  for (Tensor& p : params_) p.clear_grad_ready_hooks();
  // A bucket's buffer must outlive its collective.
  for (Bucket& b : buckets_) {
    for (const transport::Work* w : {&b.work, &b.gather_work}) {
      try {
        w->wait();
      } catch (...) {
      }
    }
  }
}

std::vector<int> GradReducer::buckets_of_group(int g) const {
  std::vector<int> out;
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (buckets_[b].group == g) out.push_back(static_cast<int>(b));
  return out;
}

int64_t GradReducer::largest_bucket_bytes() const {
  int64_t m = 0;
  for (const Bucket& b : buckets_) m = std::max(m, b.chunk * ranks_ * static_cast<int64_t>(sizeof(float)));
  return m;
}

void GradReducer::prepare(bool communicate) {
  communicate_ = communicate;
  next_launch_ = 0;
  for (Bucket& b : buckets_) {
    b.pending = static_cast<int>(b.params.size());
    b.launched = false;
    b.reduced = false;
  }
}

void GradReducer::on_grad_ready(int param) {
  if (!communicate_) return;
  if (scatters()) take_finished_chunks();
  Bucket& b = buckets_[bucket_of_[param]];
  if (b.pending > 0) --b.pending;
  // Launch in index order only: the same order on every rank.
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) launch(buckets_[next_launch_++]);
}

template <class Fn>
void GradReducer::for_each_piece(const Bucket& b, int64_t lo, int64_t hi, Fn fn) const {
  for (size_t k = 0; k < b.params.size(); ++k) {
    const int64_t start = b.offsets[k], end = start + params_[b.params[k]].numel();
    const int64_t from = std::max(lo, start), to = std::min(hi, end);
    if (from < to) fn(b.params[k], from - start, from, to - from);
  }
}

void GradReducer::launch(Bucket& b) {
  const bool scatter = scatters();
  if (scatter) b.buffer = Tensor::empty({b.chunk * ranks_}, device_, MemTag::communication);
  engine::fill_range(b.buffer, b.numel, b.buffer.numel() - b.numel, 0.0f);  // zero 2's padding
  for_each_piece(b, 0, b.numel, [&](int p, int64_t at, int64_t to, int64_t n) {
    const Tensor g = params_[p].grad();
    if (g.defined()) engine::copy_range(b.buffer, to, g, at, n);
    else engine::fill_range(b.buffer, to, n, 0.0f);
  });
  if (scatter)  // the full-size copy lives in the bucket now; free the parameters' grads
    for (int p : b.params) params_[p].zero_grad();
  // A backend without a half wire (NCCL here) gets halves as floats: the same values,
  // twice the bytes, and counted so.
  if (options_.fp16 && wire_ == transport::Wire::f32) engine::round_to_half_(b.buffer, 0, b.buffer.numel());
  b.work = scatter ? comm_.reduce_scatter_async(device_span(b.buffer), transport::ReduceOp::average, wire_)
                   : comm_.all_reduce_async(device_span(b.buffer), transport::ReduceOp::average, wire_);
  b.launched = true;
}

void GradReducer::take_chunk(Bucket& b) {
  b.work.wait();
  counters_.add(CollectiveKind::reduce_scatter, b.buffer.numel() * transport::wire_element_bytes(wire_), comm_,
                b.work.seconds(), wire_);
  b.work = transport::Work();
  if (!shard_grad_.defined()) {
    engine::MemTagScope tag(MemTag::gradients);
    shard_grad_ = Tensor::zeros({shard_numel_}, device_);
  }
  const int64_t mine = rank_ * b.chunk;
  if (options_.fp16) engine::round_to_half_(b.buffer, mine, b.chunk);
  engine::copy_range(shard_grad_, b.shard_offset, b.buffer, mine, b.chunk);
  b.buffer = Tensor();
  b.reduced = true;
}

void GradReducer::take_finished_chunks() {
  for (size_t i = 0; i < next_launch_; ++i)
    if (!buckets_[i].reduced && buckets_[i].work.completed()) take_chunk(buckets_[i]);
}

double GradReducer::finish() {
  if (!communicate_) return 0.0;
  Stopwatch waited;
  for (; next_launch_ < buckets_.size(); ++next_launch_) launch(buckets_[next_launch_]);
  for (Bucket& b : buckets_) {
    if (scatters()) {
      if (!b.reduced) take_chunk(b);
      continue;
    }
    b.work.wait();
    const int64_t numel = b.buffer.numel();
    counters_.add(CollectiveKind::all_reduce, numel * transport::wire_element_bytes(wire_), comm_, b.work.seconds(),
                  wire_);
    b.work = transport::Work();
    if (options_.fp16) engine::round_to_half_(b.buffer, 0, numel);
    for_each_piece(b, 0, b.numel, [&](int p, int64_t at, int64_t from, int64_t n) {
      Tensor g = params_[p].grad();
      if (!g.defined()) {  // an unused parameter: its mean gradient still arrives
        engine::MemTagScope tag(MemTag::gradients);
        g = Tensor::zeros(params_[p].shape(), device_);
        params_[p].set_grad(g);
      }
      engine::copy_range(g, at, b.buffer, from, n);
    });
  }
  communicate_ = false;
  return waited.seconds();
}

void GradReducer::copy_chunk_to_shard(const Bucket& b, bool grads, Tensor& shard) const {
  const int64_t lo = rank_ * b.chunk, hi = lo + b.chunk;
  engine::fill_range(shard, b.shard_offset, b.chunk, 0.0f);  // padding past the bucket's end
  for_each_piece(b, lo, hi, [&](int p, int64_t at, int64_t from, int64_t n) {
    const Tensor src = grads ? params_[p].grad() : params_[p];
    if (src.defined()) engine::copy_range(shard, b.shard_offset + (from - lo), src, at, n);
  });
}

void GradReducer::params_to_shard(Tensor& shard) const {
  for (const Bucket& b : buckets_) copy_chunk_to_shard(b, false, shard);
}

void GradReducer::grads_to_shard(Tensor& shard) const {
  for (const Bucket& b : buckets_) copy_chunk_to_shard(b, true, shard);
}

double GradReducer::all_gather_params(const Tensor& shard) {
  Stopwatch clock;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    gather_async(static_cast<int>(b), shard);
    gather_wait(static_cast<int>(b));
  }
  return clock.seconds();
}

void GradReducer::gather_async(int index, const Tensor& shard) {
  Bucket& b = buckets_[index];
  if (b.gathered.defined()) throw std::logic_error("gather_async: bucket " + std::to_string(index) + " in flight");
  b.gathered = Tensor::empty({b.chunk * ranks_}, device_, MemTag::communication);
  const int64_t mine = rank_ * b.chunk;
  engine::copy_range(b.gathered, mine, shard, b.shard_offset, b.chunk);
  const std::span<float> all = device_span(b.gathered);
  b.gather_work = comm_.all_gather_async(all.subspan(static_cast<size_t>(mine), static_cast<size_t>(b.chunk)), all);
}

double GradReducer::gather_wait(int index) {
  Bucket& b = buckets_[index];
  if (!b.gathered.defined()) throw std::logic_error("gather_wait: bucket " + std::to_string(index) + " not gathering");
  Stopwatch waited;
  b.gather_work.wait();
  const double seconds = waited.seconds();
  counters_.add(CollectiveKind::all_gather, b.gathered.numel() * 4, comm_, b.gather_work.seconds());
  b.gather_work = transport::Work();
  for (int p : b.params) params_[p].materialize_storage();
  for_each_piece(b, 0, b.numel, [&](int p, int64_t at, int64_t from, int64_t n) {
    Tensor param = params_[p];
    engine::copy_range(param, at, b.gathered, from, n);
  });
  b.gathered = Tensor();
  return seconds;
}

void GradReducer::release(int index) {
  for (int p : buckets_[index].params) params_[p].release_storage();
}

}  // namespace quartet::trainers
