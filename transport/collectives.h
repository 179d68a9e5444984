#pragma once

// Collectives over the ranks of one group: all-reduce, reduce-scatter, all-gather,
// broadcast, barrier, a point-to-point exchange (send_recv) and all-to-all (variable counts
// per peer) on float buffers (host memory for Gloo, device memory
// for NCCL). Every operation exists synchronously and asynchronously; asynchronous ones
// run on one background worker per group in the order they were issued (FIFO), so a
// trainer can launch bucket all-reduces from grad-ready hooks while backward runs.
//
// Every rank of a group must issue the same operations in the same order with the same
// sizes. Bytes are counted as the algorithm moves them per rank (nccl-tests' busbw
// convention; Gloo and NCCL expose no counters), see algorithmic_bytes(), at the size of
// the element that travels (Wire).

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace quartet::transport {

enum class ReduceOp { sum, average };

// What travels between ranks for a reduction over a float buffer.
//   f32  the floats themselves.
//   f16  IEEE binary16 values, 2 bytes each (PyTorch DDP's fp16_compress_hook): each
//        rank's input is rounded to half before it is sent; partial sums are added in
//        float32; a partial sum forwarded to another rank is rounded to half again
//        (Gloo's ring, whose all-reduce also gathers its results as halves), or never
//        (every rank reads every input: shm). Every rank still ends with the same bits.
//        Backends without it (half_wire() false) refuse it.
enum class Wire { f32, f16 };
inline constexpr int64_t wire_element_bytes(Wire wire) { return wire == Wire::f16 ? 2 : 4; }
// Each value rounded to the nearest half and back: what Wire::f16 keeps of an input (a
// group of one, which sends nothing, returns this too).
void round_to_half(std::span<float> data);
// The backends' half arithmetic, 8 values an instruction where the CPU has F16C (the
// compiler converts _Float16 one value at a time). Rounding is to nearest even.
void to_halves(std::span<const float> in, _Float16* out);                 // out = half(in)
void from_halves(const _Float16* in, std::span<float> out);               // out = float(in)
void add_halves(const _Float16* in, std::span<float> out);                // out += float(in)
void sum_halves(const _Float16* a, const _Float16* b, _Float16* out, size_t n);  // out = half(a + b)

enum class CollectiveKind : int { all_reduce = 0, reduce_scatter, all_gather, broadcast, barrier, send_recv, all_to_all };
inline constexpr int kCollectiveKinds = 7;
const char* collective_kind_name(CollectiveKind kind);

// Bytes one rank sends for an operation whose full buffer is `bytes` (S) over `ranks` (N):
// ring all-reduce 2(N-1)/N * S; reduce-scatter and all-gather (N-1)/N * S, S being the
// whole (unscattered, gathered) buffer; broadcast S; barrier 0; send_recv S, S being what
// one rank sends. One rank moves nothing.
// All-to-all: S is what the rank sends to the other ranks (its own chunk stays), counted
// as it is (all_to_all_sent_bytes); with equal chunks that is (N-1)/N of its buffer.
int64_t algorithmic_bytes(CollectiveKind kind, int64_t bytes, int ranks);
// Messages one rank sends for one operation over `ranks` (N), as the ring algorithms do:
// all-reduce 2(N-1), reduce-scatter and all-gather N-1, broadcast 1, barrier 0,
// send_recv 1; all-to-all N-1, one to each peer (pairwise exchange), empty chunks included.
int64_t algorithmic_messages(CollectiveKind kind, int ranks);
// busbw = algbw * this factor (nccl-tests): 2(N-1)/N, (N-1)/N, (N-1)/N, 1, 0, 1, and
// all-to-all's (N-1)/N (algbw taken over a rank's whole send buffer).
double bus_bandwidth_factor(CollectiveKind kind, int ranks);
// The bytes rank `rank` sends to the other ranks in an all-to-all of send_counts[p]
// floats to rank p: 4 * sum over p != rank of send_counts[p].
int64_t all_to_all_sent_bytes(std::span<const int64_t> send_counts, int rank);

struct CollectiveTotals {
  int64_t ops = 0;
  int64_t bytes = 0;     // algorithmic bytes sent by this rank
  double seconds = 0.0;  // time spent executing (not queued)
};

// What one level of a layered group (hierarchical: within hosts, between them) moved.
struct LevelTotals {
  std::string name;  // "intra", "inter"
  CollectiveTotals totals;
  int64_t messages = 0;  // algorithmic, as sent_messages() counts them
};

struct CollectiveStats {
  std::array<CollectiveTotals, kCollectiveKinds> by_kind{};
  const CollectiveTotals& operator[](CollectiveKind kind) const { return by_kind[static_cast<int>(kind)]; }
  CollectiveTotals total() const;
  // Σ over kinds of ops × algorithmic_messages(kind, ranks).
  int64_t messages(int ranks) const;
};

namespace detail {
struct WorkState {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::exception_ptr error;
  double seconds = 0.0;
};
}  // namespace detail

// The handle of an issued operation. The buffers it names must stay alive and untouched
// until wait() returns.
class Work {
 public:
  Work() = default;  // an empty handle, complete
  explicit Work(std::shared_ptr<detail::WorkState> state) : state_(std::move(state)) {}

  // Blocks until the operation finished; rethrows its error (every call does).
  void wait() const;
  bool completed() const;
  // Execution time of the finished operation; 0 before.
  double seconds() const;

 private:
  std::shared_ptr<detail::WorkState> state_;
};

class Collectives {
 public:
  virtual ~Collectives();
  Collectives(const Collectives&) = delete;
  Collectives& operator=(const Collectives&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend() const = 0;  // "gloo", "nccl"
  // Whether all_reduce and reduce_scatter take Wire::f16.
  virtual bool half_wire() const { return false; }
  // Bytes this rank sends for one operation whose buffer is `bytes` (S, at the wire's
  // element size): the ring formulas of algorithmic_bytes() over size() ranks, unless
  // the backend moves data in another shape.
  virtual int64_t sent_bytes(CollectiveKind kind, int64_t bytes, Wire wire = Wire::f32) const;
  // Messages this rank sends for one operation: algorithmic_messages() over size() ranks
  // unless the backend moves data in another shape.
  virtual int64_t sent_messages(CollectiveKind kind) const { return algorithmic_messages(kind, size()); }
  // A layered backend's totals per level since it was made; empty for a flat one.
  virtual std::vector<LevelTotals> levels() const { return {}; }

  // data: the same number of floats on every rank; ensures every rank holds the sum
  // (or the mean) of all ranks' data.
  void all_reduce(std::span<float> data, ReduceOp op = ReduceOp::sum, Wire wire = Wire::f32);
  Work all_reduce_async(std::span<float> data, ReduceOp op = ReduceOp::sum, Wire wire = Wire::f32);

  // data: size() * k floats, in place; ensures data[rank()*k, (rank()+1)*k) holds the
  // reduction of that chunk over all ranks. The other chunks are left unspecified.
  void reduce_scatter(std::span<float> data, ReduceOp op = ReduceOp::sum, Wire wire = Wire::f32);
  Work reduce_scatter_async(std::span<float> data, ReduceOp op = ReduceOp::sum, Wire wire = Wire::f32);

  // input: k floats; output: size() * k floats; ensures output[r*k, (r+1)*k) is rank r's
  // input. input may be the output's own chunk (in place).
  void all_gather(std::span<const float> input, std::span<float> output);
  Work all_gather_async(std::span<const float> input, std::span<float> output);

  // Ensures every rank's data equals root's.
  void broadcast(std::span<float> data, int root);
  Work broadcast_async(std::span<float> data, int root);

  // Returns once every rank has entered the barrier (and every operation issued before
  // it has finished on this rank).
  void barrier();
  Work barrier_async();

  // Sends `input` to rank `to` and receives `output` from rank `from`: every rank of the
  // group takes part in the same call, and the ranks' `to` form a permutation whose
  // inverse the `from` are (ring attention's shift: to = rank + 1, from = rank - 1, mod
  // size()). input and output: the same number of floats on every rank, distinct
  // buffers; to == rank() exactly when from == rank() (then output = input).
  void send_recv(std::span<const float> input, int to, std::span<float> output, int from);
  Work send_recv_async(std::span<const float> input, int to, std::span<float> output, int from);

  // Every rank sends a chunk to every rank (itself included) and receives one from each
  // (MPI_Alltoallv with packed displacements, NCCL's grouped send/recv). input: this
  // rank's chunks for ranks 0..N-1 in rank order, send_counts[p] floats for rank p;
  // output: the chunks from ranks 0..N-1 in rank order, recv_counts[p] floats from rank
  // p. Counts may be 0, and whole buffers empty: every rank still takes part.
  // requires: size() counts each, >= 0, summing to input.size() and output.size(); on
  //   every rank recv_counts[p] equals rank p's send_counts[rank()]. shm checks this and
  //   throws std::runtime_error on every rank naming the pair; over Gloo and NCCL a
  //   mismatch fails or stalls until the timeout.
  // The counts are copied: only the buffers must outlive an asynchronous one.
  void all_to_all(std::span<const float> input, std::span<const int64_t> send_counts, std::span<float> output,
                  std::span<const int64_t> recv_counts);
  Work all_to_all_async(std::span<const float> input, std::span<const int64_t> send_counts, std::span<float> output,
                        std::span<const int64_t> recv_counts);

  CollectiveStats stats() const;
  void reset_stats();

 protected:
  Collectives() = default;

  // The backend's blocking operations, called one at a time, in issue order, on the
  // worker or the calling thread. Sizes are already checked.
  virtual void run_all_reduce(std::span<float> data, ReduceOp op) = 0;
  virtual void run_reduce_scatter(std::span<float> data, ReduceOp op) = 0;
  virtual void run_all_gather(std::span<const float> input, std::span<float> output) = 0;
  virtual void run_broadcast(std::span<float> data, int root) = 0;
  virtual void run_barrier() = 0;
  // Counts are checked against the buffers and the group size. The default throws
  // std::logic_error: a backend without an all-to-all (hierarchical).
  virtual void run_all_to_all(std::span<const float> input, const std::vector<int64_t>& send_counts,
                              std::span<float> output, const std::vector<int64_t>& recv_counts);
  // Wire::f16 (see Wire); only called where half_wire() is true.
  virtual void run_all_reduce_half(std::span<float> data, ReduceOp op);
  virtual void run_reduce_scatter_half(std::span<float> data, ReduceOp op);
  // Peers and sizes already checked; to == rank(): a copy on the buffers' device. The
  // base class has none and throws.
  virtual void run_send_recv(std::span<const float> input, int to, std::span<float> output, int from);

  // Derived destructors call this first: it finishes queued operations and joins the
  // worker, so no run_* runs on a half-destroyed backend.
  void stop_worker();

 private:
  struct Task {
    CollectiveKind kind;
    int64_t bytes;  // the buffer's S
    Wire wire;
    std::function<void()> run;
    std::shared_ptr<detail::WorkState> state;
  };

  Work submit(CollectiveKind kind, int64_t bytes, std::function<void()> run, bool async, Wire wire = Wire::f32);
  void execute(Task& task);
  void worker_loop();

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool busy_ = false;      // an operation is executing (worker or inline)
  bool stopping_ = false;
  std::thread worker_;
  CollectiveStats stats_;
};

}  // namespace quartet::transport
