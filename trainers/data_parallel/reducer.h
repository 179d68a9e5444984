#pragma once

// The data-parallel gradient reducer (PyTorch DDP's Reducer, ZeRO-style sharding on top).
//
// Parameters are grouped into buckets of about `bucket_bytes` (the first at most 1 MiB,
// as DDP's), in reverse registration order (the order backward usually finishes them). A grad-ready hook counts each
// bucket's parameters down; a bucket whose gradients are all final is launched at once
// as an asynchronous collective, while backward goes on with the layers below. Buckets
// launch strictly in index order, so every rank issues the same collectives in the same
// order whatever order its hooks fire in.
//
//   zero 0, 1  each bucket is copied into its communication buffer and all-reduced
//              (average); finish() copies the means back into the parameters' grads.
//   zero 2, 3  each bucket is copied into a fresh buffer, the parameters' grads are
//              dropped, and the buffer is reduce-scattered (average); this rank's chunk
//              goes to shard_grad() and the buffer is freed as soon as the collective is
//              done (seen at a later bucket's hook, or at the latest in finish()).
//   zero 3     also the parameters live as shards: gather() fills a bucket's parameters
//              from every rank's shard just before they are used, release() frees them
//              after (trainers/data_parallel/sharded_model.h drives both per stage).
//
// A rank's shard is its chunk of every bucket: bucket b of n floats is padded to
// ranks * ceil(n / ranks) and rank r owns chunk r. Padding is zero and stays zero.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "transport/collectives.h"

namespace quartet::trainers {

// What one rank's collectives cost: algorithmic bytes (a ring sends what it receives),
// ring messages, and seconds spent executing.
struct CommCounters {
  int64_t bytes = 0;
  int64_t messages = 0;
  double seconds = 0.0;
  // buffer_bytes: the whole buffer's size S as it travels (2 bytes a value on Wire::f16);
  // counted as comm counts it (Collectives::sent_bytes).
  void add(transport::CollectiveKind kind, int64_t buffer_bytes, const transport::Collectives& comm,
           double op_seconds, transport::Wire wire = transport::Wire::f32);
  // What was counted since `before`, and two counts together.
  CommCounters since(const CommCounters& before) const {
    return {bytes - before.bytes, messages - before.messages, seconds - before.seconds};
  }
  CommCounters operator+(const CommCounters& o) const { return {bytes + o.bytes, messages + o.messages, seconds + o.seconds}; }
};

// The "comm" fields of a step record that the rank regimes of activations (tensor,
// context, expert parallel) share, for `step`'s counts: the backend, algorithmic bytes and
// messages, seconds, the exposed seconds and the bus bandwidth. Each adds its own fields.
nlohmann::json step_comm_json(const std::string& backend, const CommCounters& step, double exposed);

struct ReducerOptions {
  int64_t bucket_bytes = 0;  // a bucket closes once it holds this many bytes (at least one parameter)
  int zero = 0;       // 0: replicate everything; 1: shard optimizer state; 2: also gradients; 3: also parameters
  // Gradients travel as IEEE half (Wire::f16, 2 bytes a value) and are rounded to half
  // before and after the collective; where the backend has no half wire they are rounded
  // the same but travel (and are counted) as floats.
  bool fp16 = false;
  // Per parameter, a group no bucket crosses (zero 3: the model stage, gathered as a
  // whole); empty: one group.
  std::vector<int> group_of;
};

class GradReducer {
 public:
  // params: the model's trainable parameters (every rank the same shapes, in the same
  // order). Registers a grad-ready hook on each; the destructor removes them.
  GradReducer(std::vector<engine::Tensor> params, transport::Collectives& comm, CommCounters& counters,
              ReducerOptions options);
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Before each backward pass: whether it communicates (the last micro-batch of a step);
  // otherwise gradients only accumulate locally (PyTorch's no_sync).
  void prepare(bool communicate);
  // After a communicating backward: launches the buckets whose hooks did not fire (unused
  // parameters count as zero gradients), then waits for every bucket. Returns the seconds
  // spent waiting: the communication backward did not hide.
  // ensures zero 0, 1: every parameter's grad() is the mean over ranks;
  //         zero 2, 3: shard_grad() is this rank's shard of the mean, parameter grads dropped.
  double finish();

  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  // The buckets holding the parameters of group g (ReducerOptions::group_of).
  std::vector<int> buckets_of_group(int g) const;
  int64_t largest_bucket_bytes() const;
  int64_t shard_numel() const { return shard_numel_; }
  // What the gradients travel as: f16 only with fp16 on a backend that has a half wire.
  transport::Wire wire() const { return wire_; }

  // This rank's shard of the parameters' values (or of their grads: zero 1) into `shard`
  // (shard_numel() floats).
  void params_to_shard(engine::Tensor& shard) const;
  void grads_to_shard(engine::Tensor& shard) const;
  // zero 2: the reduced gradient shard; undefined before the first finish().
  engine::Tensor& shard_grad() { return shard_grad_; }
  // Sets every parameter from all ranks' updated shards, one bucket at a time (one
  // bucket-sized buffer alive at once). Returns the seconds it took.
  double all_gather_params(const engine::Tensor& shard);
  // Starts gathering bucket b's parameters from every rank's `shard` (their storage made
  // resident first); gather_wait(b) finishes it and returns the seconds it waited. A
  // bucket has at most one gather in flight; gathers of several buckets may overlap.
  void gather_async(int b, const engine::Tensor& shard);
  double gather_wait(int b);
  // Frees bucket b's parameters' storage (Storage::release) until the next gather.
  void release(int b);

 private:
  struct Bucket {
    std::vector<int> params;       // indices into params_
    std::vector<int64_t> offsets;  // each parameter's offset inside the bucket
    int64_t numel = 0;             // without padding
    int64_t chunk = 0;             // ceil(numel / ranks)
    int64_t shard_offset = 0;      // where this rank's chunk sits in the shard
    int pending = 0;               // parameters not final yet in this pass
    int group = 0;
    engine::Tensor buffer;         // zero 0, 1: numel, kept; zero 2, 3: ranks * chunk, per pass
    transport::Work work;
    bool launched = false;
    bool reduced = false;          // zero 2, 3: its chunk is in shard_grad_ and the buffer freed
    engine::Tensor gathered;       // zero 3: ranks * chunk parameter values in flight
    transport::Work gather_work;
  };

  bool scatters() const { return options_.zero >= 2; }
  void on_grad_ready(int param);
  void launch(Bucket& b);
  // zero 2, 3: waits for b's reduce-scatter, keeps this rank's chunk, frees the buffer.
  void take_chunk(Bucket& b);
  // zero 2, 3: take_chunk() for every launched bucket whose collective is done already.
  void take_finished_chunks();
  // Calls fn(param, offset in param, offset in bucket, count) for the pieces of the
  // bucket's parameters inside [lo, hi) of the bucket.
  template <class Fn>
  void for_each_piece(const Bucket& b, int64_t lo, int64_t hi, Fn fn) const;
  void copy_chunk_to_shard(const Bucket& b, bool grads, engine::Tensor& shard) const;

  std::vector<engine::Tensor> params_;
  std::vector<int> bucket_of_;  // per parameter
  std::vector<Bucket> buckets_;
  transport::Collectives& comm_;
  CommCounters& counters_;
  ReducerOptions options_;
  int ranks_, rank_;
  transport::Wire wire_;
  engine::Device device_;  // the parameters': buckets and shards live there too
  int64_t shard_numel_ = 0;
  bool communicate_ = false;
  size_t next_launch_ = 0;
  engine::Tensor shard_grad_;
};

}  // namespace quartet::trainers
