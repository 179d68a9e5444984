#include "transport/collectives.h"

#include <stdexcept>

#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#define QUARTET_F16C 1
#endif

namespace quartet::transport {

const char* collective_kind_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_reduce: return "all_reduce";
    case CollectiveKind::reduce_scatter: return "reduce_scatter";
    case CollectiveKind::all_gather: return "all_gather";
    case CollectiveKind::broadcast: return "broadcast";
    case CollectiveKind::barrier: return "barrier";
    case CollectiveKind::send_recv: return "send_recv";
    case CollectiveKind::all_to_all: return "all_to_all";
  }
  return "unknown";
}

double bus_bandwidth_factor(CollectiveKind kind, int ranks) {
  if (ranks <= 1) return 0.0;
  const double n = ranks;
  switch (kind) {
    case CollectiveKind::all_reduce: return 2.0 * (n - 1.0) / n;
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::all_gather:
    case CollectiveKind::all_to_all: return (n - 1.0) / n;
    case CollectiveKind::broadcast:
    case CollectiveKind::send_recv: return 1.0;
    case CollectiveKind::barrier: return 0.0;
  }
  return 0.0;
}

int64_t algorithmic_bytes(CollectiveKind kind, int64_t bytes, int ranks) {
  if (ranks <= 1) return 0;
  // Integer arithmetic: exact for sizes that divide evenly, floor otherwise.
  switch (kind) {
    case CollectiveKind::all_reduce: return 2 * (ranks - 1) * bytes / ranks;
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::all_gather: return (ranks - 1) * bytes / ranks;
    case CollectiveKind::broadcast:
    case CollectiveKind::send_recv: return bytes;
    case CollectiveKind::barrier: return 0;
    case CollectiveKind::all_to_all: return bytes;
  }
  return 0;
}

int64_t all_to_all_sent_bytes(std::span<const int64_t> send_counts, int rank) {
  int64_t floats = 0;
  for (size_t p = 0; p < send_counts.size(); ++p)
    if (static_cast<int>(p) != rank) floats += send_counts[p];
  return floats * 4;
}

int64_t algorithmic_messages(CollectiveKind kind, int ranks) {
  if (ranks <= 1) return 0;
  switch (kind) {
    case CollectiveKind::all_reduce: return 2 * (ranks - 1);
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::all_gather:
    case CollectiveKind::all_to_all: return ranks - 1;
    case CollectiveKind::broadcast:
    case CollectiveKind::send_recv: return 1;
    case CollectiveKind::barrier: return 0;
  }
  return 0;
}

void round_to_half(std::span<float> data) {
  for (float& v : data) v = static_cast<float>(static_cast<_Float16>(v));
}

#if QUARTET_F16C
namespace {
__m256 load8(const _Float16* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
void store8(_Float16* p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}
}  // namespace
#endif

void to_halves(std::span<const float> in, _Float16* out) {
  size_t i = 0;
#if QUARTET_F16C
  for (; i + 8 <= in.size(); i += 8) store8(out + i, _mm256_loadu_ps(in.data() + i));
#endif
  for (; i < in.size(); ++i) out[i] = static_cast<_Float16>(in[i]);
}

void from_halves(const _Float16* in, std::span<float> out) {
  size_t i = 0;
#if QUARTET_F16C
  for (; i + 8 <= out.size(); i += 8) _mm256_storeu_ps(out.data() + i, load8(in + i));
#endif
  for (; i < out.size(); ++i) out[i] = static_cast<float>(in[i]);
}

void add_halves(const _Float16* in, std::span<float> out) {
  size_t i = 0;
#if QUARTET_F16C
  for (; i + 8 <= out.size(); i += 8)
    _mm256_storeu_ps(out.data() + i, _mm256_add_ps(_mm256_loadu_ps(out.data() + i), load8(in + i)));
#endif
  for (; i < out.size(); ++i) out[i] += static_cast<float>(in[i]);
}

void sum_halves(const _Float16* a, const _Float16* b, _Float16* out, size_t n) {
  size_t i = 0;
#if QUARTET_F16C
  for (; i + 8 <= n; i += 8) store8(out + i, _mm256_add_ps(load8(a + i), load8(b + i)));
#endif
  for (; i < n; ++i) out[i] = static_cast<_Float16>(static_cast<float>(a[i]) + static_cast<float>(b[i]));
}

CollectiveTotals CollectiveStats::total() const {
  CollectiveTotals t;
  for (const auto& k : by_kind) {
    t.ops += k.ops;
    t.bytes += k.bytes;
    t.seconds += k.seconds;
  }
  return t;
}

int64_t CollectiveStats::messages(int ranks) const {
  int64_t m = 0;
  for (int k = 0; k < kCollectiveKinds; ++k) m += by_kind[k].ops * algorithmic_messages(static_cast<CollectiveKind>(k), ranks);
  return m;
}

void Work::wait() const {
  if (!state_) return;
  std::unique_lock lock(state_->mutex);
  state_->done_cv.wait(lock, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

bool Work::completed() const {
  if (!state_) return true;
  std::lock_guard lock(state_->mutex);
  return state_->done;
}

double Work::seconds() const {
  if (!state_) return 0.0;
  std::lock_guard lock(state_->mutex);
  return state_->seconds;
}

Collectives::~Collectives() { stop_worker(); }

void Collectives::stop_worker() {
  {
    std::unique_lock lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void Collectives::execute(Task& task) {
  const auto start = std::chrono::steady_clock::now();
  std::exception_ptr error;
  try {
    task.run();
  } catch (...) {
    error = std::current_exception();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  {
    std::lock_guard lock(mutex_);
    if (!error) {
      CollectiveTotals& t = stats_.by_kind[static_cast<int>(task.kind)];
      t.ops += 1;
      t.bytes += sent_bytes(task.kind, task.bytes, task.wire);
      t.seconds += seconds;
    }
  }
  {
    std::lock_guard lock(task.state->mutex);
    task.state->done = true;
    task.state->error = error;
    task.state->seconds = seconds;
  }
  task.state->done_cv.notify_all();
}

void Collectives::worker_loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    // Wait for work, and for an inline operation on the caller's thread to finish.
    cv_.wait(lock, [&] { return (!queue_.empty() && !busy_) || (stopping_ && queue_.empty() && !busy_); });
    if (queue_.empty()) return;  // stopping, nothing left
    Task task = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    execute(task);
    lock.lock();
    busy_ = false;
    cv_.notify_all();
  }
}

int64_t Collectives::sent_bytes(CollectiveKind kind, int64_t bytes, Wire) const {
  return algorithmic_bytes(kind, bytes, size());
}

Work Collectives::submit(CollectiveKind kind, int64_t bytes, std::function<void()> run, bool async, Wire wire) {
  Task task{kind, bytes, wire, std::move(run), std::make_shared<detail::WorkState>()};
  Work work(task.state);
  std::unique_lock lock(mutex_);
  if (stopping_) throw std::logic_error("collectives: an operation was issued after the group was shut down");
  if (!async) {
    // Blocking: run on this thread once everything issued before has finished, which
    // keeps the issue order without a thread hand-off.
    cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
    busy_ = true;
    lock.unlock();
    execute(task);
    lock.lock();
    busy_ = false;
    lock.unlock();
    cv_.notify_all();
    work.wait();  // rethrows
    return work;
  }
  if (!worker_.joinable()) worker_ = std::thread([this] { worker_loop(); });
  queue_.push_back(std::move(task));
  lock.unlock();
  cv_.notify_all();
  return work;
}

namespace {

void check_not_empty(size_t n, const char* op) {
  if (n == 0) throw std::invalid_argument(std::string("collectives: ") + op + " of an empty buffer");
}

void check_wire(Wire wire, const Collectives& c) {
  if (wire == Wire::f16 && !c.half_wire())
    throw std::invalid_argument(std::string("collectives: backend ") + c.backend() +
                                " has no fp16 wire (gloo and shm have)");
}

}  // namespace

Work Collectives::all_reduce_async(std::span<float> data, ReduceOp op, Wire wire) {
  check_not_empty(data.size(), "all_reduce");
  check_wire(wire, *this);
  return submit(CollectiveKind::all_reduce, static_cast<int64_t>(data.size()) * wire_element_bytes(wire),
                [this, data, op, wire] { wire == Wire::f16 ? run_all_reduce_half(data, op) : run_all_reduce(data, op); },
                true, wire);
}

void Collectives::all_reduce(std::span<float> data, ReduceOp op, Wire wire) {
  check_not_empty(data.size(), "all_reduce");
  check_wire(wire, *this);
  submit(CollectiveKind::all_reduce, static_cast<int64_t>(data.size()) * wire_element_bytes(wire),
         [this, data, op, wire] { wire == Wire::f16 ? run_all_reduce_half(data, op) : run_all_reduce(data, op); },
         false, wire);
}

void Collectives::run_all_reduce_half(std::span<float>, ReduceOp) {
  throw std::logic_error(std::string("collectives: backend ") + backend() + " has no fp16 wire");
}

void Collectives::run_reduce_scatter_half(std::span<float>, ReduceOp) {
  throw std::logic_error(std::string("collectives: backend ") + backend() + " has no fp16 wire");
}

namespace {

void check_reduce_scatter(size_t n, int ranks) {
  check_not_empty(n, "reduce_scatter");
  if (n % static_cast<size_t>(ranks) != 0)
    throw std::invalid_argument("collectives: reduce_scatter of " + std::to_string(n) +
                                " floats: expected a multiple of the group size " + std::to_string(ranks));
}

void check_all_gather(size_t in, size_t out, int ranks) {
  check_not_empty(in, "all_gather");
  if (out != in * static_cast<size_t>(ranks))
    throw std::invalid_argument("collectives: all_gather of " + std::to_string(in) + " floats per rank needs an output of " +
                                std::to_string(in * static_cast<size_t>(ranks)) + " floats, got " +
                                std::to_string(out));
}

void check_root(int root, int ranks) {
  if (root < 0 || root >= ranks)
    throw std::invalid_argument("collectives: broadcast root " + std::to_string(root) + " outside 0.." +
                                std::to_string(ranks - 1));
}

}  // namespace

Work Collectives::reduce_scatter_async(std::span<float> data, ReduceOp op, Wire wire) {
  check_reduce_scatter(data.size(), size());
  check_wire(wire, *this);
  return submit(
      CollectiveKind::reduce_scatter, static_cast<int64_t>(data.size()) * wire_element_bytes(wire),
      [this, data, op, wire] { wire == Wire::f16 ? run_reduce_scatter_half(data, op) : run_reduce_scatter(data, op); },
      true, wire);
}

void Collectives::reduce_scatter(std::span<float> data, ReduceOp op, Wire wire) {
  check_reduce_scatter(data.size(), size());
  check_wire(wire, *this);
  submit(
      CollectiveKind::reduce_scatter, static_cast<int64_t>(data.size()) * wire_element_bytes(wire),
      [this, data, op, wire] { wire == Wire::f16 ? run_reduce_scatter_half(data, op) : run_reduce_scatter(data, op); },
      false, wire);
}

Work Collectives::all_gather_async(std::span<const float> input, std::span<float> output) {
  check_all_gather(input.size(), output.size(), size());
  return submit(CollectiveKind::all_gather, static_cast<int64_t>(output.size_bytes()),
                [this, input, output] { run_all_gather(input, output); }, true);
}

void Collectives::all_gather(std::span<const float> input, std::span<float> output) {
  check_all_gather(input.size(), output.size(), size());
  submit(CollectiveKind::all_gather, static_cast<int64_t>(output.size_bytes()),
         [this, input, output] { run_all_gather(input, output); }, false);
}

Work Collectives::broadcast_async(std::span<float> data, int root) {
  check_not_empty(data.size(), "broadcast");
  check_root(root, size());
  return submit(CollectiveKind::broadcast, static_cast<int64_t>(data.size_bytes()),
                [this, data, root] { run_broadcast(data, root); }, true);
}

void Collectives::broadcast(std::span<float> data, int root) {
  check_not_empty(data.size(), "broadcast");
  check_root(root, size());
  submit(CollectiveKind::broadcast, static_cast<int64_t>(data.size_bytes()),
         [this, data, root] { run_broadcast(data, root); }, false);
}

Work Collectives::barrier_async() {
  return submit(CollectiveKind::barrier, 0, [this] { run_barrier(); }, true);
}

void Collectives::barrier() { submit(CollectiveKind::barrier, 0, [this] { run_barrier(); }, false); }

void Collectives::run_send_recv(std::span<const float>, int, std::span<float>, int) {
  throw std::logic_error(std::string("collectives: backend ") + backend() + " has no send_recv");
}

void Collectives::run_all_to_all(std::span<const float>, const std::vector<int64_t>&, std::span<float>,
                                 const std::vector<int64_t>&) {
  throw std::logic_error(std::string("collectives: backend ") + backend() +
                         " has no all_to_all (gloo, shm and nccl have)");
}

namespace {

void check_send_recv(size_t in, size_t out, int to, int from, int rank, int ranks) {
  check_not_empty(in, "send_recv");
  if (out != in)
    throw std::invalid_argument("collectives: send_recv of " + std::to_string(in) + " floats needs an output of as "
                                "many, got " + std::to_string(out));
  for (int peer : {to, from})
    if (peer < 0 || peer >= ranks)
      throw std::invalid_argument("collectives: send_recv peer " + std::to_string(peer) + " outside 0.." +
                                  std::to_string(ranks - 1));
  if ((to == rank) != (from == rank))
    throw std::invalid_argument("collectives: send_recv on rank " + std::to_string(rank) + " sends to " +
                                std::to_string(to) + " and receives from " + std::to_string(from) +
                                "; a rank exchanges with itself in both directions or in neither");
}

// Counts of size() entries, none negative, adding up to the buffer's floats.
std::vector<int64_t> checked_counts(std::span<const int64_t> counts, size_t floats, int ranks, const char* which) {
  if (counts.size() != static_cast<size_t>(ranks))
    throw std::invalid_argument(std::string("collectives: all_to_all needs one ") + which + " count per rank (" +
                                std::to_string(ranks) + "), got " + std::to_string(counts.size()));
  int64_t total = 0;
  for (size_t p = 0; p < counts.size(); ++p) {
    if (counts[p] < 0)
      throw std::invalid_argument(std::string("collectives: all_to_all ") + which + " count " +
                                  std::to_string(counts[p]) + " for rank " + std::to_string(p) + " is negative");
    total += counts[p];
  }
  if (total != static_cast<int64_t>(floats))
    throw std::invalid_argument(std::string("collectives: all_to_all ") + which + " counts add up to " +
                                std::to_string(total) + " floats, the " + (which[0] == 's' ? "input" : "output") +
                                " holds " + std::to_string(floats));
  return {counts.begin(), counts.end()};
}

}  // namespace

Work Collectives::send_recv_async(std::span<const float> input, int to, std::span<float> output, int from) {
  check_send_recv(input.size(), output.size(), to, from, rank(), size());
  return submit(CollectiveKind::send_recv, to == rank() ? 0 : static_cast<int64_t>(input.size_bytes()),
                [this, input, to, output, from] { run_send_recv(input, to, output, from); }, true);
}

void Collectives::send_recv(std::span<const float> input, int to, std::span<float> output, int from) {
  check_send_recv(input.size(), output.size(), to, from, rank(), size());
  submit(CollectiveKind::send_recv, to == rank() ? 0 : static_cast<int64_t>(input.size_bytes()),
         [this, input, to, output, from] { run_send_recv(input, to, output, from); }, false);
}

Work Collectives::all_to_all_async(std::span<const float> input, std::span<const int64_t> send_counts,
                                   std::span<float> output, std::span<const int64_t> recv_counts) {
  std::vector<int64_t> send = checked_counts(send_counts, input.size(), size(), "send");
  std::vector<int64_t> recv = checked_counts(recv_counts, output.size(), size(), "receive");
  const int64_t sent = all_to_all_sent_bytes(send, rank());
  return submit(CollectiveKind::all_to_all, sent,
                [this, input, output, send = std::move(send), recv = std::move(recv)] {
                  run_all_to_all(input, send, output, recv);
                },
                true);
}

void Collectives::all_to_all(std::span<const float> input, std::span<const int64_t> send_counts,
                             std::span<float> output, std::span<const int64_t> recv_counts) {
  std::vector<int64_t> send = checked_counts(send_counts, input.size(), size(), "send");
  std::vector<int64_t> recv = checked_counts(recv_counts, output.size(), size(), "receive");
  const int64_t sent = all_to_all_sent_bytes(send, rank());
  submit(CollectiveKind::all_to_all, sent, [&] { run_all_to_all(input, send, output, recv); }, false);
}

CollectiveStats Collectives::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void Collectives::reset_stats() {
  std::lock_guard lock(mutex_);
  stats_ = CollectiveStats{};
}

}  // namespace quartet::transport
