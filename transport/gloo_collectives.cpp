#include "transport/gloo_collectives.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <stdexcept>
#include <vector>

namespace quartet::transport {
namespace {

// Our own slot prefixes (the ring reduce-scatter, send_recv); Gloo's collectives use
// 0x01..0x08.
constexpr uint8_t kReduceScatterSlotPrefix = 0x51;
constexpr uint8_t kSendRecvSlotPrefix = 0x52;

// out = a + b elementwise; out may be a or b. Compiled with the project's flags, so it
// vectorises for this CPU (the packaged Gloo is built without AVX).
void sum_floats(void* out, const void* a, const void* b, size_t n) {
  float* o = static_cast<float*>(out);
  const float* x = static_cast<const float*>(a);
  const float* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

// sum_floats as Gloo's algorithms on registered buffers take it (x += y).
void add_into(float* x, const float* y, size_t n) { sum_floats(x, x, y, n); }
const gloo::ReductionFunction<float> kSum(gloo::SUM, &add_into);

// All-reduces up to this size run on buffers registered with Gloo's pairs ahead of time
// (see BoundAllReduce); larger ones on gloo::allreduce.
constexpr size_t kBoundMaxBytes = size_t{1} << 20;
// Registered all-reduces kept, by element count (a data-parallel model needs one per
// gradient bucket up to kBoundMaxBytes).
constexpr size_t kBoundCapacity = 16;
// How long a closing rank waits for its peers (see ~GlooCollectives).
constexpr std::chrono::milliseconds kCloseBarrierTimeout{2000};

void scale(std::span<float> data, float factor) {
  for (float& v : data) v *= factor;
}

class GlooCollectives final : public Collectives {
 public:
  GlooCollectives(gloo::rendezvous::Store& store, int rank, int size, const GlooOptions& options)
      : options_(options) {
    if (size < 1 || rank < 0 || rank >= size)
      throw std::invalid_argument("gloo: rank " + std::to_string(rank) + " of " + std::to_string(size) +
                                  " is not a valid rank");
    gloo::transport::tcp::attr attr;
    attr.ai_family = AF_INET;
    if (!options.interface.empty())
      attr.iface = options.interface;
    else
      attr.hostname = options.hostname;
    try {
      device_ = gloo::transport::tcp::CreateDevice(attr);
      context_ = std::make_shared<gloo::rendezvous::Context>(rank, size);
      context_->setTimeout(options.timeout);
      context_->connectFullMesh(store, device_);
      if (size > 1) {
        bound_context_ = std::make_shared<gloo::rendezvous::Context>(rank, size);
        bound_context_->setTimeout(options.timeout);
        gloo::rendezvous::PrefixStore bound_store("bound", store);
        bound_context_->connectFullMesh(bound_store, device_);
      }
      // A rank returns from connectFullMesh before its peers finish their handshakes;
      // one that went away then would break theirs. Return once everyone is connected.
      if (size > 1) {
        gloo::BarrierOptions opts(context_);
        opts.setTag(0);
        opts.setTimeout(options.timeout);
        gloo::barrier(opts);
      }
    } catch (const std::exception& e) {
      throw std::runtime_error("gloo rendezvous failed for rank " + std::to_string(rank) + " of " +
                               std::to_string(size) + " (listening on " +
                               (options.interface.empty() ? options.hostname : options.interface) + "): " + e.what());
    }
  }

  ~GlooCollectives() override {
    stop_worker();
    // A registered buffer sees its pair's close as an error even when the message it
    // waits for arrived just before (Gloo's tcp::Buffer::waitRecv checks for the error
    // first). A peer may still be waiting for the last message of our last all-reduce;
    // if that ran on registered buffers, leave only once every rank has passed it: a
    // barrier, on unbound buffers, which a close does not disturb once they completed.
    // Bounded, so a peer busy elsewhere (or gone) holds this rank up 2 s at most.
    if (!close_after_barrier_) return;
    try {
      gloo::BarrierOptions opts(context_);
      opts.setTag(next_tag_++);
      opts.setTimeout(std::min<std::chrono::milliseconds>(options_.timeout, kCloseBarrierTimeout));
      gloo::barrier(opts);
    } catch (const std::exception&) {
      // A peer that is gone or busy elsewhere was not waiting on us.
    }
  }

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }
  const char* backend() const override { return "gloo"; }

 protected:
  void run_all_reduce(std::span<float> data, ReduceOp op) override {
    if (size() > 1 && data.size_bytes() <= kBoundMaxBytes) {
      guarded("all_reduce", [&](uint32_t) {
        BoundAllReduce& bound = bound_all_reduce(data.size());
        std::memcpy(bound.data.data(), data.data(), data.size_bytes());
        bound.algorithm->run();
        std::memcpy(data.data(), bound.data.data(), data.size_bytes());
        close_after_barrier_ = true;
      });
    } else if (size() > 1) {
      guarded("all_reduce", [&](uint32_t tag) {
        gloo::AllreduceOptions opts(context_);
        opts.setOutput(data.data(), data.size());
        opts.setReduceFunction(&sum_floats);
        opts.setTag(tag);
        opts.setTimeout(options_.timeout);
        opts.setMaxSegmentSize(options_.max_segment_bytes);
        gloo::allreduce(opts);
      });
    }
    if (op == ReduceOp::average) scale(data, 1.0f / static_cast<float>(size()));
  }

  void run_reduce_scatter(std::span<float> data, ReduceOp op) override {
    const size_t chunk = data.size() / static_cast<size_t>(size());
    if (size() > 1)
      guarded("reduce_scatter", [&](uint32_t tag) {
        ring_reduce_scatter(data, tag, [&](size_t offset, const float* received, size_t length, bool) {
          sum_floats(data.data() + offset, data.data() + offset, received, length);
        });
      });
    if (op == ReduceOp::average)
      scale(data.subspan(static_cast<size_t>(rank()) * chunk, chunk), 1.0f / static_cast<float>(size()));
  }

  bool half_wire() const override { return true; }

  // Wire::f16 all-reduce: the half reduce-scatter over data padded to size() * k, this
  // rank's float32 sum (mean) rounded to half once more, and an all-gather of halves.
  void run_all_reduce_half(std::span<float> data, ReduceOp op) override {
    if (size() == 1) return round_to_half(data);
    const size_t n = static_cast<size_t>(size());
    const size_t k = (data.size() + n - 1) / n;
    load_halves(data, n * k);
    mine_.resize(k);
    guarded("all_reduce", [&](uint32_t tag) {
      half_reduce_scatter(mine_, tag);
      if (op == ReduceOp::average) scale(mine_, 1.0f / static_cast<float>(size()));
      to_halves(mine_, halves_.data() + static_cast<size_t>(rank()) * k);
      gloo::AllgatherOptions opts(context_);
      opts.setOutput(reinterpret_cast<gloo::float16*>(halves_.data()), halves_.size());
      opts.setTag(tag);
      opts.setTimeout(options_.timeout);
      gloo::allgather(opts);
    });
    from_halves(halves_.data(), data);
  }

  void run_reduce_scatter_half(std::span<float> data, ReduceOp op) override {
    if (size() == 1) return round_to_half(data);
    const size_t k = data.size() / static_cast<size_t>(size());
    load_halves(data, data.size());
    const std::span<float> mine = data.subspan(static_cast<size_t>(rank()) * k, k);
    guarded("reduce_scatter", [&](uint32_t tag) { half_reduce_scatter(mine, tag); });
    if (op == ReduceOp::average) scale(mine, 1.0f / static_cast<float>(size()));
  }

  // halves_ = data as halves, zero-padded to `count`.
  void load_halves(std::span<const float> data, size_t count) {
    halves_.resize(count);
    to_halves(data, halves_.data());
    std::fill(halves_.begin() + static_cast<std::ptrdiff_t>(data.size()), halves_.end(), _Float16(0));
  }

  void run_all_gather(std::span<const float> input, std::span<float> output) override {
    float* own = output.data() + static_cast<size_t>(rank()) * input.size();
    const bool in_place = input.data() == own;
    if (size() == 1) {
      if (!in_place) std::memmove(own, input.data(), input.size_bytes());
      return;
    }
    guarded("all_gather", [&](uint32_t tag) {
      gloo::AllgatherOptions opts(context_);
      // Gloo primes the output with the input itself; in place it needs no input.
      if (!in_place) opts.setInput(const_cast<float*>(input.data()), input.size());
      opts.setOutput(output.data(), output.size());
      opts.setTag(tag);
      opts.setTimeout(options_.timeout);
      gloo::allgather(opts);
    });
  }

  void run_broadcast(std::span<float> data, int root) override {
    if (size() == 1) return;
    guarded("broadcast", [&](uint32_t tag) {
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(data.data(), data.size());
      opts.setRoot(root);
      opts.setTag(tag);
      opts.setTimeout(options_.timeout);
      gloo::broadcast(opts);
    });
  }

  // One message each way on the unbound pairs, the receive posted first.
  void run_send_recv(std::span<const float> input, int to, std::span<float> output, int from) override {
    if (to == rank()) {
      std::memmove(output.data(), input.data(), input.size_bytes());
      return;
    }
    guarded("send_recv", [&](uint32_t tag) {
      const auto slot = gloo::Slot::build(kSendRecvSlotPrefix, tag);
      auto in = context_->createUnboundBuffer(output.data(), output.size_bytes());
      auto out = context_->createUnboundBuffer(const_cast<float*>(input.data()), input.size_bytes());
      in->recv(from, slot);
      out->send(to, slot);
      if (!in->waitRecv(options_.timeout))
        throw std::runtime_error("receive from rank " + std::to_string(from) + " aborted");
      if (!out->waitSend(options_.timeout)) throw std::runtime_error("send to rank " + std::to_string(to) + " aborted");
    });
  }

  // Gloo's pairwise exchange: every rank posts its sends and receives to each peer at
  // once (empty chunks included) on unbound buffers, then waits for them all.
  void run_all_to_all(std::span<const float> input, const std::vector<int64_t>& send, std::span<float> output,
                      const std::vector<int64_t>& recv) override {
    if (size() == 1) {
      if (!input.empty()) std::memmove(output.data(), input.data(), input.size_bytes());
      return;
    }
    // Gloo wants a buffer to register even for nothing.
    float none = 0.0f;
    guarded("all_to_all", [&](uint32_t tag) {
      gloo::AlltoallvOptions opts(context_);
      opts.setInput(input.empty() ? &none : const_cast<float*>(input.data()), send);
      opts.setOutput(output.empty() ? &none : output.data(), recv);
      opts.setTag(tag);
      opts.setTimeout(options_.timeout);
      gloo::alltoallv(opts);
    });
  }

  void run_barrier() override {
    if (size() == 1) return;
    guarded("barrier", [&](uint32_t tag) {
      gloo::BarrierOptions opts(context_);
      opts.setTag(tag);
      opts.setTimeout(options_.timeout);
      gloo::barrier(opts);
    });
  }

 private:
  // Runs one Gloo operation with the next tag; Gloo's errors become runtime_errors
  // that say which operation on which rank failed.
  template <typename F>
  void guarded(const char* what, F&& f) {
    const uint32_t tag = next_tag_++;
    close_after_barrier_ = false;
    try {
      f(tag);
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string("gloo ") + what + " failed on rank " + std::to_string(rank()) + " of " +
                               std::to_string(size()) + ": " + e.what());
    }
  }

  // Ring reduce-scatter in place over data = size() chunks of k elements (float, or
  // _Float16 for Wire::f16). At ring step s (0..N-2) rank r sends chunk r-s-1 to r+1 and
  // adds chunk r-s-2 from r-1 into its own copy, so after N-1 steps chunk r holds all
  // ranks' sum. Each chunk moves as m >= 2 segments with two in flight: the addition of
  // one overlaps the transfer of the next. add(offset, received, length, last) adds a
  // received segment into data[offset, +length); `last`: the final step, into chunk r.
  template <typename T, typename Add>
  void ring_reduce_scatter(std::span<T> data, uint32_t tag, Add add) {
    const int n = size();
    const int r = rank();
    const size_t k = data.size() / static_cast<size_t>(n);
    const size_t max_segment = std::max<size_t>(1, options_.max_segment_bytes / sizeof(T));
    const size_t m = std::max<size_t>(2, (k + max_segment - 1) / max_segment);
    const size_t segment = (k + m - 1) / m;
    const int right = (r + 1) % n;
    const int left = (r + n - 1) % n;
    const auto slot = gloo::Slot::build(kReduceScatterSlotPrefix, tag);

    std::vector<T> tmp(2 * segment);
    auto data_buf = context_->createUnboundBuffer(data.data(), data.size_bytes());
    auto tmp_buf = context_->createUnboundBuffer(tmp.data(), tmp.size() * sizeof(T));

    struct Io {
      size_t send_offset, recv_offset, length;  // elements
    };
    auto io = [&](size_t i) {
      const int s = static_cast<int>(i / m);
      const size_t j = i % m;
      const size_t send_chunk = static_cast<size_t>((r - s - 1 + 2 * n) % n);
      const size_t recv_chunk = static_cast<size_t>((r - s - 2 + 2 * n) % n);
      const size_t begin = std::min(j * segment, k);
      const size_t length = std::min(segment, k - begin);
      return Io{send_chunk * k + begin, recv_chunk * k + begin, length};
    };
    auto check = [&](bool ok, const char* what) {
      if (!ok) throw std::runtime_error(std::string("reduce_scatter ") + what + " aborted");
    };

    const size_t total = static_cast<size_t>(n - 1) * m;
    for (size_t i = 0; i < total + 2; ++i) {
      if (i >= 2) {
        // Finish the step issued two iterations ago: its segment from the left is
        // added in before anything is sent from that region.
        const Io prev = io(i - 2);
        if (prev.length > 0) {
          check(tmp_buf->waitRecv(options_.timeout), "receive");
          add(prev.recv_offset, tmp.data() + (i & 1) * segment, prev.length, i - 2 >= total - m);
          check(data_buf->waitSend(options_.timeout), "send");
        }
      }
      if (i < total) {
        const Io cur = io(i);
        if (cur.length > 0) {
          tmp_buf->recv(left, slot, (i & 1) * segment * sizeof(T), cur.length * sizeof(T));
          data_buf->send(right, slot, cur.send_offset * sizeof(T), cur.length * sizeof(T));
        }
      }
    }
  }

  // gloo::allreduce works on unbound buffers: for every message the receiver first
  // announces its receive and the sender waits for that announcement. On 127.0.0.1 with
  // 2 ranks it took 1-4 ms for anything from 4 KB to 1.6 MB (PyTorch's Gloo all-reduce,
  // the same code, likewise; Gloo's event loop spins in epoll_wait meanwhile), which a
  // data-parallel step's last bucket pays in full. Gloo's older algorithms register
  // their buffers with the pairs once, when made, and then write straight into the
  // peer's buffer: 0.1 ms for 4-64 KB, 0.3 ms for 256 KB. So up to kBoundMaxBytes an
  // all-reduce of n floats runs such an algorithm, made the first time n is seen and
  // kept, copying in and out of its own buffer (the caller's may move):
  //   2 ranks   AllreduceRing, one exchange of the whole buffer (a ring's bytes at N=2);
  //             each rank adds the other's into its own, the same bits on both;
  //   more      AllreduceRingChunked (reduce-scatter, then all-gather: one rank adds
  //             each chunk), also the same bits on every rank.
  // Beyond kBoundMaxBytes gloo::allreduce was as fast or faster (pipelined segments).
  // They run on pairs of their own (bound_context_, a second full mesh of connections):
  // on the pairs that unbound buffers use, at 3 ranks and more, every unbound operation
  // after one of them (a large all-reduce, reduce-scatter, all-gather, broadcast) crawled
  // at about 1 s per MiB with every rank idle in waitRecv/waitSend, 500 times its lone
  // time (tests/transport/multirank/mixed_sizes_test.cpp); with pairs of their own,
  // nothing stalls. We did not find the cause inside Gloo.
  // Making one takes slots from its context in call order, and the oldest is dropped
  // first, so every rank, issuing the same sizes in the same order, makes and drops the
  // same algorithms at the same points. Each kept one holds three buffers of its size
  // (its own, Gloo's inbox and outbox), outside the engine's tracked memory: at most
  // kBoundCapacity x 3 MiB.
  struct BoundAllReduce {
    std::vector<float> data;  // its size is the key
    std::unique_ptr<gloo::Algorithm> algorithm;
  };

  BoundAllReduce& bound_all_reduce(size_t count) {
    for (BoundAllReduce& b : bound_)
      if (b.data.size() == count) return b;
    if (bound_.size() == kBoundCapacity) bound_.pop_front();
    BoundAllReduce& b = bound_.emplace_back();
    b.data.resize(count);
    const std::vector<float*> ptrs{b.data.data()};
    const int n = static_cast<int>(count);
    if (size() == 2)
      b.algorithm = std::make_unique<gloo::AllreduceRing<float>>(bound_context_, ptrs, n, &kSum);
    else
      b.algorithm = std::make_unique<gloo::AllreduceRingChunked<float>>(bound_context_, ptrs, n, &kSum);
    return b;
  }

  // Wire::f16 reduce-scatter of halves_ (size() chunks of k, the inputs as halves) into
  // this rank's chunk `mine` (k floats): each hop adds in float32 and rounds the partial
  // sum to half only to forward it; the last hop's sum stays float32.
  void half_reduce_scatter(std::span<float> mine, uint32_t tag) {
    const size_t own = static_cast<size_t>(rank()) * mine.size();
    ring_reduce_scatter(std::span<_Float16>(halves_), tag,
                        [&](size_t offset, const _Float16* received, size_t length, bool last) {
                          _Float16* held = halves_.data() + offset;
                          if (!last) return sum_halves(held, received, held, length);
                          const std::span<float> out = mine.subspan(offset - own, length);
                          from_halves(held, out);
                          add_halves(received, out);
                        });
  }

  GlooOptions options_;
  // Wire::f16's buffers, kept (at the largest size seen) across operations, which run
  // one at a time.
  std::vector<_Float16> halves_;
  std::vector<float> mine_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::shared_ptr<gloo::rendezvous::Context> bound_context_;  // the registered-buffer all-reduces
  // After context_: the algorithms go first.
  std::deque<BoundAllReduce> bound_;  // oldest first
  uint32_t next_tag_ = 1;
  // The last operation was an all-reduce on registered buffers, and it succeeded.
  bool close_after_barrier_ = false;
};

}  // namespace

std::unique_ptr<Collectives> make_gloo_collectives(gloo::rendezvous::Store& store, int rank, int size,
                                                   const GlooOptions& options) {
  return std::make_unique<GlooCollectives>(store, rank, size, options);
}

GlooOptions gloo_options_from_environment(GlooOptions base) {
  if (const char* v = std::getenv("QUARTET_GLOO_HOST"); v && *v) base.hostname = v;
  if (const char* v = std::getenv("QUARTET_GLOO_IFACE"); v && *v) base.interface = v;
  if (const char* v = std::getenv("QUARTET_GLOO_TIMEOUT_S"); v && *v) {
    char* end = nullptr;
    const double s = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(s > 0))
      throw std::invalid_argument(std::string("QUARTET_GLOO_TIMEOUT_S: expected seconds > 0, got \"") + v + "\"");
    base.timeout = std::chrono::milliseconds(static_cast<int64_t>(s * 1000.0));
  }
  if (const char* v = std::getenv("QUARTET_GLOO_SEGMENT_BYTES"); v && *v) {
    char* end = nullptr;
    const long long b = std::strtoll(v, &end, 10);
    if (end == v || *end != '\0' || b < 4)
      throw std::invalid_argument(std::string("QUARTET_GLOO_SEGMENT_BYTES: expected bytes >= 4, got \"") + v + "\"");
    base.max_segment_bytes = static_cast<size_t>(b);
  }
  return base;
}

}  // namespace quartet::transport
