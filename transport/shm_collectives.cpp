#include "transport/shm_collectives.h"

#include <fcntl.h>
#include <gloo/rendezvous/store.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstring>
#include <fstream>
#include <new>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "transport/gloo_collectives.h"

namespace quartet::transport {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kMagic = 0x314d5351;  // "QSM1"
constexpr size_t kPage = 4096;

// One rank's words, on its own cache line. Counters are sequence numbers of pieces and
// wrap around; they are compared by signed difference.
struct alignas(64) RankWords {
  std::atomic<uint32_t> arrived{0};   // this rank's slot holds piece `arrived`
  std::atomic<uint32_t> released{0};  // this rank has finished reading piece `released`
  std::atomic<uint32_t> left{0};      // 1 once this rank has left the group
  std::atomic<int32_t> pid{0};
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "futexes need plain 32-bit atomics");

struct alignas(64) Header {
  uint32_t magic = kMagic;
  uint32_t size = 0;
  uint64_t slot_bytes = 0;
};

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
size_t slots_offset(int size) { return round_up(sizeof(Header) + sizeof(RankWords) * size, kPage); }
size_t segment_bytes(int size, size_t slot_bytes) { return slots_offset(size) + slot_bytes * size; }

bool reached(uint32_t value, uint32_t target) { return static_cast<int32_t>(value - target) >= 0; }

// Futexes in a shared mapping: not the _PRIVATE kind.
void futex_wait(std::atomic<uint32_t>& word, uint32_t expected, std::chrono::milliseconds timeout) {
  timespec ts{static_cast<time_t>(timeout.count() / 1000), static_cast<long>(timeout.count() % 1000) * 1000000L};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}
void futex_wake(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

std::string text_of(const std::vector<char>& v) { return std::string(v.begin(), v.end()); }
std::vector<char> bytes_of(const std::string& s) { return std::vector<char>(s.begin(), s.end()); }

class ShmCollectives final : public Collectives {
 public:
  ShmCollectives(gloo::rendezvous::Store& store, int rank, int size, const ShmOptions& options)
      : rank_(rank), size_(size), options_(options) {
    if (size < 1 || rank < 0 || rank >= size)
      throw std::invalid_argument("shm: rank " + std::to_string(rank) + " of " + std::to_string(size) +
                                  " is not a valid rank");
    if (options.slot_bytes < 64 || options.slot_bytes % 64 != 0)
      throw std::invalid_argument("shm: slot_bytes must be a positive multiple of 64, got " +
                                  std::to_string(options.slot_bytes));
    bytes_ = segment_bytes(size, options.slot_bytes);
    try {
      attach(store);
    } catch (const std::exception& e) {
      release_mapping();
      throw std::runtime_error("shm rendezvous failed for " + who() + ": " + e.what());
    }
  }

  ~ShmCollectives() override {
    stop_worker();
    if (words_) {
      words_[rank_].left.store(1, std::memory_order_release);
      // Wake peers waiting on either counter, so they see this rank is gone.
      futex_wake(words_[rank_].arrived);
      futex_wake(words_[rank_].released);
    }
    release_mapping();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "shm"; }

 protected:
  // out = the sum of every rank's slot over [from, from + n) of the piece, in rank order,
  // in float32 (the slots hold T: float or _Float16).
  // requires: size_ >= 2 (a group of one never exchanges).
  template <typename T = float>
  void add_slots(float* out, size_t from, size_t n, ReduceOp op) const {
    if constexpr (std::is_same_v<T, _Float16>) {
      from_halves(slot_as<T>(0) + from, {out, n});
      for (int q = 1; q < size_; ++q) add_halves(slot_as<T>(q) + from, {out, n});
    } else {
      const T* first = slot_as<T>(0) + from;
      const T* second = slot_as<T>(1) + from;
      for (size_t i = 0; i < n; ++i) out[i] = first[i] + second[i];
      for (int q = 2; q < size_; ++q) {
        const T* s = slot_as<T>(q) + from;
        for (size_t i = 0; i < n; ++i) out[i] += s[i];
      }
    }
    if (op == ReduceOp::average) {
      const float f = 1.0f / static_cast<float>(size_);
      for (size_t i = 0; i < n; ++i) out[i] *= f;
    }
  }

  void write_halves(std::span<const float> piece) const { to_halves(piece, slot_as<_Float16>(rank_)); }

  void run_all_reduce(std::span<float> data, ReduceOp op) override {
    if (size_ == 1) return;  // the sum, and the mean, of one is itself
    for_each_piece(
        data.size(), "all_reduce",
        [&](size_t at, size_t n) { std::memcpy(own_slot(), data.data() + at, n * sizeof(float)); },
        [&](size_t at, size_t n) { add_slots(data.data() + at, 0, n, op); });
  }

  void run_reduce_scatter(std::span<float> data, ReduceOp op) override {
    if (size_ == 1) return;
    const size_t k = data.size() / static_cast<size_t>(size_);
    const size_t mine = k * static_cast<size_t>(rank_);
    for_each_piece(
        data.size(), "reduce_scatter",
        [&](size_t at, size_t n) { std::memcpy(own_slot(), data.data() + at, n * sizeof(float)); },
        [&](size_t at, size_t n) {
          // The part of this piece that lies in this rank's chunk.
          const size_t lo = std::max(at, mine), hi = std::min(at + n, mine + k);
          if (lo < hi) add_slots(data.data() + lo, lo - at, hi - lo, op);
        });
  }

  void run_all_gather(std::span<const float> input, std::span<float> output) override {
    const size_t k = input.size();
    if (size_ == 1) {
      if (output.data() != input.data()) std::memcpy(output.data(), input.data(), k * sizeof(float));
      return;
    }
    for_each_piece(
        k, "all_gather", [&](size_t at, size_t n) { std::memcpy(own_slot(), input.data() + at, n * sizeof(float)); },
        [&](size_t at, size_t n) {
          for (int q = 0; q < size_; ++q)
            std::memcpy(output.data() + static_cast<size_t>(q) * k + at, slot(q), n * sizeof(float));
        });
  }

  void run_broadcast(std::span<float> data, int root) override {
    if (size_ == 1) return;
    for_each_piece(
        data.size(), "broadcast",
        [&](size_t at, size_t n) {
          if (rank_ == root) std::memcpy(own_slot(), data.data() + at, n * sizeof(float));
        },
        [&](size_t at, size_t n) {
          if (rank_ != root) std::memcpy(data.data() + at, slot(root), n * sizeof(float));
        });
  }

  bool half_wire() const override { return true; }

  // Wire::f16: each rank's slot holds its input as halves; every rank adds all slots in
  // float32, in rank order, so only the inputs are rounded (the sum stays float32).
  void run_all_reduce_half(std::span<float> data, ReduceOp op) override {
    if (size_ == 1) return round_to_half(data);
    for_each_piece(
        data.size(), "all_reduce", [&](size_t at, size_t n) { write_halves(data.subspan(at, n)); },
        [&](size_t at, size_t n) { add_slots<_Float16>(data.data() + at, 0, n, op); }, sizeof(_Float16));
  }

  void run_reduce_scatter_half(std::span<float> data, ReduceOp op) override {
    const size_t k = data.size() / static_cast<size_t>(size_);
    const size_t mine = k * static_cast<size_t>(rank_);
    if (size_ == 1) return round_to_half(data);
    for_each_piece(
        data.size(), "reduce_scatter", [&](size_t at, size_t n) { write_halves(data.subspan(at, n)); },
        [&](size_t at, size_t n) {
          const size_t lo = std::max(at, mine), hi = std::min(at + n, mine + k);
          if (lo < hi) add_slots<_Float16>(data.data() + lo, lo - at, hi - lo, op);
        },
        sizeof(_Float16));
  }

  // Each rank writes its piece to its own slot and reads its sender's: a step of the same
  // protocol as the others, so it waits for every rank, not only the two peers.
  void run_send_recv(std::span<const float> input, int to, std::span<float> output, int from) override {
    if (to == rank_) {
      std::memmove(output.data(), input.data(), input.size_bytes());
      return;
    }
    for_each_piece(
        input.size(), "send_recv",
        [&](size_t at, size_t n) { std::memcpy(own_slot(), input.data() + at, n * sizeof(float)); },
        [&](size_t at, size_t n) { std::memcpy(output.data() + at, slot(from), n * sizeof(float)); });
  }

  void run_barrier() override {
    if (size_ == 1) return;
    exchange("barrier", [] {}, [] {});
  }

  // Two phases. Counts: every rank publishes its send and receive counts, so every rank
  // sees the whole table and refuses a pair that disagrees (every rank alike, before any
  // data moves). Data: each rank writes its whole send buffer into its slot, piece by
  // piece, and reads from every slot the part of the piece that is its chunk.
  void run_all_to_all(std::span<const float> input, const std::vector<int64_t>& send, std::span<float> output,
                      const std::vector<int64_t>& recv) override {
    if (size_ == 1) {
      if (!input.empty()) std::memmove(output.data(), input.data(), input.size_bytes());
      return;
    }
    const size_t n = static_cast<size_t>(size_);
    // table[q * 2n + p]: rank q's send count to p; table[q * 2n + n + p]: q's receive count from p.
    std::vector<int64_t> table(2 * n * n);
    {
      std::vector<int64_t> mine(send);
      mine.insert(mine.end(), recv.begin(), recv.end());
      const size_t bytes = mine.size() * sizeof(int64_t);
      const size_t per_slot = options_.slot_bytes;
      for (size_t at = 0; at < bytes; at += per_slot) {
        const size_t len = std::min(per_slot, bytes - at);
        exchange(
            "all_to_all", [&] { std::memcpy(own_slot(), reinterpret_cast<const char*>(mine.data()) + at, len); },
            [&] {
              for (size_t q = 0; q < n; ++q)
                std::memcpy(reinterpret_cast<char*>(table.data() + q * 2 * n) + at, slot(static_cast<int>(q)), len);
            });
      }
    }
    for (size_t q = 0; q < n; ++q)
      for (size_t p = 0; p < n; ++p)
        if (table[q * 2 * n + p] != table[p * 2 * n + n + q])
          throw std::runtime_error("shm all_to_all on " + who() + ": rank " + std::to_string(q) + " sends " +
                                   std::to_string(table[q * 2 * n + p]) + " floats to rank " + std::to_string(p) +
                                   ", which expects " + std::to_string(table[p * 2 * n + n + q]));
    // Where this rank's chunk starts in rank q's buffer, the longest buffer, and where
    // each incoming chunk goes in the output.
    const size_t me = static_cast<size_t>(rank_);
    std::vector<size_t> from(n, 0), to(n, 0);
    size_t longest = 0;
    for (size_t q = 0; q < n; ++q) {
      size_t total = 0;
      for (size_t p = 0; p < n; ++p) {
        if (p == me) from[q] = total;
        total += static_cast<size_t>(table[q * 2 * n + p]);
      }
      longest = std::max(longest, total);
      if (q > 0) to[q] = to[q - 1] + static_cast<size_t>(recv[q - 1]);
    }
    for_each_piece(
        longest, "all_to_all",
        [&](size_t at, size_t len) {
          if (at < input.size()) std::memcpy(own_slot(), input.data() + at, std::min(len, input.size() - at) * sizeof(float));
        },
        [&](size_t at, size_t len) {
          for (size_t q = 0; q < n; ++q) {
            const size_t lo = std::max(at, from[q]), hi = std::min(at + len, from[q] + static_cast<size_t>(recv[q]));
            if (lo < hi)
              std::memcpy(output.data() + to[q] + (lo - from[q]), slot(static_cast<int>(q)) + (lo - at),
                          (hi - lo) * sizeof(float));
          }
        });
  }

 private:
  // Moves `floats` in consecutive pieces of at most a slot (of element_bytes each on the
  // wire): write(at, n) fills this
  // rank's slot with its piece, read(at, n) reads the slots once every rank has written.
  template <typename Write, typename Read>
  void for_each_piece(size_t floats, const char* what, Write write, Read read, size_t element_bytes = sizeof(float)) {
    const size_t per_slot = options_.slot_bytes / element_bytes;
    if (floats == 0) return exchange(what, [] {}, [] {});
    for (size_t at = 0; at < floats; at += per_slot) {
      const size_t n = std::min(per_slot, floats - at);
      exchange(what, [&] { write(at, n); }, [&] { read(at, n); });
    }
  }

  // One step of the protocol. Piece s may be written once every rank has finished
  // reading piece s - 1 (the slots are reused), and read once every rank has written it.
  template <typename Write, typename Read>
  void exchange(const char* what, Write write, Read read) {
    const uint32_t s = ++sequence_;
    wait_for_all(&RankWords::released, s - 1, what);
    write();
    publish(words_[rank_].arrived, s);
    wait_for_all(&RankWords::arrived, s, what);
    read();
    publish(words_[rank_].released, s);
  }

  static void publish(std::atomic<uint32_t>& word, uint32_t value) {
    word.store(value, std::memory_order_release);
    futex_wake(word);
  }

  void wait_for_all(std::atomic<uint32_t> RankWords::*field, uint32_t target, const char* what) {
    const auto deadline = Clock::now() + options_.timeout;
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      std::atomic<uint32_t>& word = words_[q].*field;
      for (int spin = 0;; ++spin) {
        const uint32_t seen = word.load(std::memory_order_acquire);
        if (reached(seen, target)) break;
        if (spin < 256) continue;  // a peer a few microseconds behind: no syscall
        if (words_[q].left.load(std::memory_order_acquire) != 0)
          throw std::runtime_error("shm " + std::string(what) + " on " + who() + ": rank " + std::to_string(q) +
                                   " left the group");
        const int32_t pid = words_[q].pid.load(std::memory_order_acquire);
        if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH)
          throw std::runtime_error("shm " + std::string(what) + " on " + who() + ": rank " + std::to_string(q) +
                                   " (pid " + std::to_string(pid) + ") exited");
        if (Clock::now() > deadline)
          throw std::runtime_error("shm " + std::string(what) + " on " + who() + ": rank " + std::to_string(q) +
                                   " did not arrive within " +
                                   std::to_string(options_.timeout.count() / 1000) + " s");
        futex_wait(word, seen, std::chrono::milliseconds(50));
      }
    }
  }

  void attach(gloo::rendezvous::Store& store) {
    const std::string host = boot_id();
    if (rank_ == 0) {
      std::random_device rd;
      name_ = "/quartet-" + std::to_string(getpid()) + "-" + std::to_string(rd()) + std::to_string(rd());
      const int fd = shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd < 0) throw std::runtime_error("cannot create shared memory " + name_ + ": " + std::strerror(errno));
      owner_ = true;
      // Reserve the pages now: a /dev/shm too small (Docker's default is 64 MiB) is an
      // error here rather than a SIGBUS at the first write.
      const int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes_));
      if (err == 0) map(fd);
      close(fd);
      if (err != 0)
        throw std::runtime_error("cannot reserve " + std::to_string(bytes_) + " bytes of shared memory (" +
                                 std::strerror(err) + "); /dev/shm may be too small (docker run --shm-size), or "
                                 "use backend \"gloo\"");
      auto* header = new (base_) Header{};
      header->size = static_cast<uint32_t>(size_);
      header->slot_bytes = options_.slot_bytes;
      for (int q = 0; q < size_; ++q) new (&words_[q]) RankWords{};
      store.set("shm/segment", bytes_of(name_ + "\n" + host));
    } else {
      store.wait({"shm/segment"}, options_.timeout);
      const std::string published = text_of(store.get("shm/segment"));
      const size_t nl = published.find('\n');
      name_ = published.substr(0, nl);
      if (nl == std::string::npos || published.substr(nl + 1) != host)
        throw std::runtime_error("rank 0 runs on another host; backend \"shm\" needs every rank on one host "
                                 "(use \"gloo\" across hosts)");
      const int fd = shm_open(name_.c_str(), O_RDWR, 0);
      if (fd < 0)
        throw std::runtime_error("cannot open rank 0's shared memory " + name_ + " (" + std::strerror(errno) +
                                 "): backend \"shm\" needs every rank on one host, in one IPC namespace");
      struct stat st {};
      const bool sized = fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == bytes_;
      if (sized) map(fd);
      close(fd);
      if (!sized)
        throw std::runtime_error("rank 0's shared memory is not " + std::to_string(bytes_) +
                                 " bytes: the ranks disagree on the group size or slot size");
      const auto* header = static_cast<const Header*>(base_);
      if (header->magic != kMagic || header->size != static_cast<uint32_t>(size_) ||
          header->slot_bytes != options_.slot_bytes)
        throw std::runtime_error("rank 0's shared memory was made for another group (size " +
                                 std::to_string(header->size) + ", slot " + std::to_string(header->slot_bytes) +
                                 " bytes)");
    }
    words_[rank_].pid.store(static_cast<int32_t>(getpid()), std::memory_order_release);
    store.set("shm/attached/" + std::to_string(rank_), {'1'});
    if (rank_ == 0) {
      std::vector<std::string> keys;
      for (int q = 1; q < size_; ++q) keys.push_back("shm/attached/" + std::to_string(q));
      if (!keys.empty()) store.wait(keys, options_.timeout);
      shm_unlink(name_.c_str());  // every rank holds a mapping: the memory lives on until they unmap
      owner_ = false;
    }
  }

  void map(int fd) {
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) throw std::runtime_error(std::string("cannot map shared memory: ") + std::strerror(errno));
    base_ = p;
    words_ = reinterpret_cast<RankWords*>(static_cast<char*>(base_) + sizeof(Header));
  }

  void release_mapping() {
    if (owner_) shm_unlink(name_.c_str());
    owner_ = false;
    if (base_) munmap(base_, bytes_);
    base_ = nullptr;
    words_ = nullptr;
  }

  float* slot(int q) const {
    return reinterpret_cast<float*>(static_cast<char*>(base_) + slots_offset(size_) +
                                    options_.slot_bytes * static_cast<size_t>(q));
  }
  float* own_slot() const { return slot(rank_); }
  template <typename T>
  T* slot_as(int q) const { return reinterpret_cast<T*>(slot(q)); }
  std::string who() const { return "rank " + std::to_string(rank_) + " of " + std::to_string(size_); }

  int rank_;
  int size_;
  ShmOptions options_;
  size_t bytes_ = 0;
  std::string name_;
  bool owner_ = false;  // created the name and has not unlinked it yet
  void* base_ = nullptr;
  RankWords* words_ = nullptr;
  uint32_t sequence_ = 0;
};

}  // namespace

ShmOptions shm_options_from_environment(ShmOptions base) {
  GlooOptions gloo;
  gloo.timeout = base.timeout;
  base.timeout = gloo_options_from_environment(gloo).timeout;
  return base;
}

std::unique_ptr<Collectives> make_shm_collectives(gloo::rendezvous::Store& store, int rank, int size,
                                                  const ShmOptions& options) {
  return std::make_unique<ShmCollectives>(store, rank, size, options);
}

}  // namespace quartet::transport
