#include "transport/hierarchical_collectives.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <fstream>
#include <map>
#include <stdexcept>

#include <gloo/rendezvous/prefix_store.h>

namespace quartet::transport {

namespace {

std::string first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string link_target(const char* path) {
  std::array<char, 256> buf{};
  const ssize_t n = readlink(path, buf.data(), buf.size() - 1);
  return n > 0 ? std::string(buf.data(), static_cast<size_t>(n)) : std::string();
}

}  // namespace

std::string host_key() {
  std::array<char, 256> name{};
  gethostname(name.data(), name.size() - 1);
  return std::string(name.data()) + "/" + first_line("/proc/sys/kernel/random/boot_id") + "/" +
         link_target("/proc/self/ns/net");
}

std::string host_key_from_environment(int rank) {
  const char* hosts = std::getenv("QUARTET_SIMULATED_HOSTS");
  if (!hosts || !*hosts) return host_key();
  const int h = std::atoi(hosts);
  if (h < 1) throw std::invalid_argument(std::string("QUARTET_SIMULATED_HOSTS: expected an integer >= 1, got ") + hosts);
  return host_key() + "/simulated-" + std::to_string(rank % h);
}

HostLayout host_layout(const std::vector<std::string>& keys) {
  HostLayout l;
  std::map<std::string, int> host_of_key;
  for (const std::string& k : keys) {
    auto [it, fresh] = host_of_key.try_emplace(k, l.hosts());
    if (fresh) l.host_size.push_back(0);
    l.host_of.push_back(it->second);
    l.local_of.push_back(l.host_size[static_cast<size_t>(it->second)]++);
  }
  return l;
}

namespace {

void scale(std::span<float> data, float f) {
  for (float& v : data) v *= f;
}

class HierarchicalCollectives final : public Collectives {
 public:
  HierarchicalCollectives(int rank, HostLayout layout, std::unique_ptr<Collectives> intra,
                          std::unique_ptr<Collectives> inter)
      : rank_(rank), layout_(std::move(layout)), intra_(std::move(intra)), inter_(std::move(inter)) {}
  ~HierarchicalCollectives() override { stop_worker(); }

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(layout_.host_of.size()); }
  const char* backend() const override { return "hierarchical"; }
  bool half_wire() const override { return true; }

  // All-reduce (and what is made of it): the host's all-reduce at the wire's size, the
  // leaders' all-reduce likewise, the leader's broadcast of floats; a broadcast: at most
  // one broadcast within the host and, on leaders, one between hosts.
  int64_t sent_bytes(CollectiveKind kind, int64_t bytes, Wire wire) const override {
    const int local = intra_->size();
    const int hosts = inter_ ? inter_->size() : 0;
    if (kind == CollectiveKind::barrier) return 0;
    if (kind == CollectiveKind::broadcast)
      return algorithmic_bytes(kind, bytes, local) + algorithmic_bytes(kind, bytes, hosts);
    if (kind == CollectiveKind::send_recv) bytes *= size();  // the buffer all-reduced
    const int64_t floats = bytes / wire_element_bytes(wire) * 4;
    return algorithmic_bytes(CollectiveKind::all_reduce, bytes, local) +
           algorithmic_bytes(CollectiveKind::broadcast, floats, local) +
           algorithmic_bytes(CollectiveKind::all_reduce, bytes, hosts);
  }

  // Made of the same operations as sent_bytes counts.
  int64_t sent_messages(CollectiveKind kind) const override {
    const int local = intra_->size();
    const int hosts = inter_ ? inter_->size() : 0;
    if (kind == CollectiveKind::broadcast || kind == CollectiveKind::barrier)
      return algorithmic_messages(kind, local) + algorithmic_messages(kind, hosts);
    return algorithmic_messages(CollectiveKind::all_reduce, local) +
           algorithmic_messages(CollectiveKind::broadcast, local) +
           algorithmic_messages(CollectiveKind::all_reduce, hosts);
  }

  std::vector<LevelTotals> levels() const override {
    std::vector<LevelTotals> out{{"intra", intra_->stats().total(), intra_->stats().messages(intra_->size())},
                                 {"inter", {}, 0}};
    if (inter_) out[1] = {"inter", inter_->stats().total(), inter_->stats().messages(inter_->size())};
    return out;
  }

 protected:
  void run_all_reduce(std::span<float> data, ReduceOp op) override { reduce(data, op, Wire::f32); }
  void run_all_reduce_half(std::span<float> data, ReduceOp op) override { reduce(data, op, Wire::f16); }
  void run_reduce_scatter(std::span<float> data, ReduceOp op) override { reduce(data, op, Wire::f32); }
  void run_reduce_scatter_half(std::span<float> data, ReduceOp op) override { reduce(data, op, Wire::f16); }

  // Every chunk but this rank's is zero, so the sum is the gather (adding zeros is exact).
  void run_all_gather(std::span<const float> input, std::span<float> output) override {
    std::vector<float> mine(input.begin(), input.end());
    std::fill(output.begin(), output.end(), 0.0f);
    std::copy(mine.begin(), mine.end(), output.begin() + static_cast<ptrdiff_t>(rank_ * mine.size()));
    reduce(output, ReduceOp::sum, Wire::f32);
  }

  // Made of an all-reduce as all-gather is: every rank's input in its own chunk, then
  // the sender's chunk taken.
  void run_send_recv(std::span<const float> input, int to, std::span<float> output, int from) override {
    if (to == rank_) {
      std::copy(input.begin(), input.end(), output.begin());
      return;
    }
    std::vector<float> all(input.size() * static_cast<size_t>(size()), 0.0f);
    std::copy(input.begin(), input.end(), all.begin() + static_cast<ptrdiff_t>(rank_ * input.size()));
    reduce(all, ReduceOp::sum, Wire::f32);
    std::copy_n(all.begin() + static_cast<ptrdiff_t>(from * input.size()), input.size(), output.begin());
  }

  // The root's host hands it to its leader, the leaders pass it on, each leader to its host.
  void run_broadcast(std::span<float> data, int root) override {
    const int root_host = layout_.host_of[static_cast<size_t>(root)];
    const bool on_root_host = root_host == my_host();
    if (on_root_host) intra_->broadcast(data, layout_.local_of[static_cast<size_t>(root)]);
    if (inter_) inter_->broadcast(data, root_host);
    if (!on_root_host) intra_->broadcast(data, 0);
  }

  void run_barrier() override {
    intra_->barrier();
    if (inter_) inter_->barrier();
    intra_->barrier();
  }

 private:
  int my_host() const { return layout_.host_of[static_cast<size_t>(rank_)]; }

  // Sums within the host (every rank then holds the host's sum), between the leaders,
  // and hands the leader's result to its host. The mean is taken once, on the leader, so
  // every rank holds the leader's bits.
  void reduce(std::span<float> data, ReduceOp op, Wire wire) {
    intra_->all_reduce(data, ReduceOp::sum, wire);
    if (inter_) {
      if (inter_->size() > 1) inter_->all_reduce(data, ReduceOp::sum, wire);
      if (op == ReduceOp::average) scale(data, 1.0f / static_cast<float>(size()));
    }
    intra_->broadcast(data, 0);
  }

  int rank_;
  HostLayout layout_;
  std::unique_ptr<Collectives> intra_;
  std::unique_ptr<Collectives> inter_;  // leaders only
};

}  // namespace

std::unique_ptr<Collectives> make_hierarchical_collectives(gloo::rendezvous::Store& store, int rank, int size,
                                                           const std::string& key,
                                                           const HierarchicalOptions& options) {
  store.set("hier/host/" + std::to_string(rank), std::vector<char>(key.begin(), key.end()));
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) {
    const std::vector<char> k = store.get("hier/host/" + std::to_string(r));
    keys.emplace_back(k.begin(), k.end());
  }
  HostLayout layout = host_layout(keys);
  const int host = layout.host_of[static_cast<size_t>(rank)];
  const int local = layout.local_of[static_cast<size_t>(rank)];
  gloo::rendezvous::PrefixStore intra_store("hier/intra/" + std::to_string(host), store);
  std::unique_ptr<Collectives> intra =
      make_shm_collectives(intra_store, local, layout.host_size[static_cast<size_t>(host)], options.intra);
  std::unique_ptr<Collectives> inter;
  if (local == 0) {
    gloo::rendezvous::PrefixStore inter_store("hier/inter", store);
    inter = make_gloo_collectives(inter_store, host, layout.hosts(), options.inter);
  }
  return std::make_unique<HierarchicalCollectives>(rank, std::move(layout), std::move(intra), std::move(inter));
}

}  // namespace quartet::transport
