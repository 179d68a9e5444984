#include "trainers/data_parallel/rank_group.h"

#if defined(QUARTET_WITH_NCCL)
#include "transport/nccl/nccl_collectives.h"
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <span>
#include <stdexcept>

#include "engine/device.h"
#include "engine/memory.h"
#include "transport/coordinator.h"
#include "transport/gloo_collectives.h"
#include "transport/hierarchical_collectives.h"
#include "transport/shm_collectives.h"
#include "transport/store.h"

namespace quartet::trainers::data_parallel {
namespace {

bool nccl_built() {
#if defined(QUARTET_WITH_NCCL)
  return true;
#else
  return false;
#endif
}

// NCCL runs on its own stream and the engine's kernels on the device's compute stream:
// each collective first waits for the kernels queued before it (the gradients it
// reduces). It waits on the collectives' worker, so backward goes on being queued.
class AfterCompute final : public transport::Collectives {
 public:
  AfterCompute(std::unique_ptr<transport::Collectives> inner, engine::Device device)
      : inner_(std::move(inner)), device_(device) {}
  ~AfterCompute() override { stop_worker(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const char* backend() const override { return inner_->backend(); }

 protected:
  void run_all_reduce(std::span<float> data, transport::ReduceOp op) override {
    engine::device_synchronize(device_);
    inner_->all_reduce(data, op);
  }
  void run_reduce_scatter(std::span<float> data, transport::ReduceOp op) override {
    engine::device_synchronize(device_);
    inner_->reduce_scatter(data, op);
  }
  void run_all_gather(std::span<const float> input, std::span<float> output) override {
    engine::device_synchronize(device_);
    inner_->all_gather(input, output);
  }
  void run_broadcast(std::span<float> data, int root) override {
    engine::device_synchronize(device_);
    inner_->broadcast(data, root);
  }
  void run_barrier() override { inner_->barrier(); }
  void run_send_recv(std::span<const float> input, int to, std::span<float> output, int from) override {
    engine::device_synchronize(device_);
    inner_->send_recv(input, to, output, from);
  }

  void run_all_to_all(std::span<const float> input, const std::vector<int64_t>& send, std::span<float> output,
                      const std::vector<int64_t>& recv) override {
    engine::device_synchronize(device_);
    inner_->all_to_all(input, send, output, recv);
  }

 private:
  std::unique_ptr<transport::Collectives> inner_;
  engine::Device device_;
};

bool is_loopback(const std::string& address) {
  return address.rfind("127.", 0) == 0 || address == "::1" || address.rfind("::ffff:127.", 0) == 0;
}

// The address this rank's Gloo device listens on and announces to its peers: the one its
// host reaches the coordinator from, which the other ranks' hosts reach too. A rank on
// the coordinator's own host reaches it through loopback, though, which a rank of another
// host cannot use: such a rank takes the coordinator's address as a rank of another host
// dialled it, when there is one. Ranks publish both addresses through the coordinator;
// only loopback ranks wait for the others'.
std::string gloo_host(transport::CoordinatorClient& client, const std::string& arm, int rank, int ranks,
                      std::chrono::milliseconds timeout) {
  const std::string mine = client.local_address();
  const std::string key = "arm/" + arm + "/gloo-address/";
  client.kv_set(key + std::to_string(rank), mine + " " + client.coordinator_address());
  if (!is_loopback(mine)) return mine;
  for (int r = 0; r < ranks; ++r) {
    const std::string theirs = client.kv_wait(key + std::to_string(r), timeout);
    const size_t space = theirs.find(' ');
    if (space != std::string::npos && !is_loopback(theirs.substr(0, space))) return theirs.substr(space + 1);
  }
  return mine;
}

}  // namespace

void check_backend(const std::string& backend, int64_t ranks, const ArmFacts& f) {
  if (backend == "nccl") {
    if (f.device.is_cpu())
      throw SettingsError(f.path + ".backend: \"nccl\" reduces GPU memory; this arm runs on the cpu (set its "
                          "device to \"cuda\", or use \"gloo\" or \"shm\")");
    if (!nccl_built())
      throw SettingsError(f.path + ".backend: \"nccl\" needs a build of Quartet with NCCL, which this one lacks; "
                          "use \"gloo\" or \"shm\" (CPU)");
    // One rank per GPU (NCCL refuses two ranks of a communicator on one device): rank
    // r takes the arm's device plus its local index.
    const int64_t local = ranks - static_cast<int64_t>(f.remote.size());
    const int64_t gpus = engine::cuda_device_count() - f.device.index;
    if (local > gpus)
      throw SettingsError(f.path + ".ranks: " + std::to_string(local) + " ranks on this host need " +
                          std::to_string(local) + " GPUs from " + f.device.str() + " on; it has " +
                          std::to_string(std::max<int64_t>(gpus, 0)) + " (NCCL runs one rank per GPU)");
  } else if (!f.device.is_cpu()) {
    throw SettingsError(f.path + ".backend: \"" + backend + "\" reduces host memory; an arm on " + f.device.str() +
                        " needs \"nccl\"");
  }
  if (backend == "shm" && !f.remote.empty())
    throw SettingsError(f.path + ".remote: backend \"shm\" needs every rank on this host; ranks on other hosts "
                        "need \"gloo\"");
}

namespace {

// How the role makes `backend`'s collectives over a store: the Gloo address it announces
// (asked of the coordinator once), its GPU for NCCL.
transport::MakeCollectives backend_factory(const RoleContext& ctx, const std::string& regime,
                                           const std::string& backend, int ranks) {
  if (!ctx.coordinator)
    throw std::runtime_error(regime + ": " + ctx.role + " has no connection to the run's coordinator, which the "
                             "ranks rendezvous through");
  // QUARTET_GLOO_HOST or QUARTET_GLOO_IFACE, when set, say where Gloo listens.
  transport::GlooOptions gloo = transport::gloo_options_from_environment();
  auto set = [](const char* name) { return std::getenv(name) && *std::getenv(name); };
  if ((backend == "gloo" || backend == "hierarchical") && !set("QUARTET_GLOO_HOST") && !set("QUARTET_GLOO_IFACE"))
    gloo.hostname = gloo_host(*ctx.coordinator, ctx.arm, ctx.rank, ranks, gloo.timeout);
  const int world_rank = ctx.rank;
  const engine::Device device = ctx.device;
  return [=](gloo::rendezvous::Store& store, int rank, int size) -> std::unique_ptr<transport::Collectives> {
    if (backend == "nccl") {
#if defined(QUARTET_WITH_NCCL)
      transport::NcclOptions o;
      o.device = device.index;
      return std::make_unique<AfterCompute>(transport::make_nccl_collectives(store, rank, size, o), device);
#else
      throw std::runtime_error(regime + ": this build of Quartet has no NCCL");
#endif
    }
    if (backend == "shm") return transport::make_shm_collectives(store, rank, size, transport::shm_options_from_environment());
    if (backend == "hierarchical")
      return transport::make_hierarchical_collectives(store, rank, size,
                                                      transport::host_key_from_environment(world_rank),
                                                      {transport::shm_options_from_environment(), gloo});
    return transport::make_gloo_collectives(store, rank, size, gloo);
  };
}

}  // namespace

std::unique_ptr<transport::Collectives> connect(const RoleContext& ctx, const std::string& regime,
                                                const std::string& backend, int ranks) {
  const transport::MakeCollectives make = backend_factory(ctx, regime, backend, ranks);
  transport::CoordinatorStore store(*ctx.coordinator, "arm/" + ctx.arm + "/" + backend + "/");
  return make(store, ctx.rank, ranks);
}

std::unique_ptr<transport::Collectives> connect_group(const RoleContext& ctx, const std::string& regime,
                                                      const std::string& backend, int ranks,
                                                      const transport::SubGroup& group) {
  const transport::MakeCollectives make = backend_factory(ctx, regime, backend, ranks);
  transport::CoordinatorStore store(*ctx.coordinator, "arm/" + ctx.arm + "/" + backend + "/");
  return transport::make_sub_group(store, ctx.rank, group, make);
}

RoleContext on_own_device(RoleContext ctx) {
  const int place = ctx.local_rank >= 0 ? ctx.local_rank : ctx.rank;
  if (!ctx.device.is_cpu()) ctx.device = engine::Device::cuda(ctx.device.index + place % engine::cuda_device_count());
  return ctx;
}

std::filesystem::path own_checkpoint(const RoleContext& ctx, bool own_state) {
  if (!own_state || ctx.rank == 0) return checkpoint_path(ctx.arm_dir);
  return ctx.arm_dir / ("checkpoint." + ctx.role + ".safetensors");
}

void check_same_step(transport::Collectives& comm, int64_t step, const engine::Device& device,
                     const std::string& regime) {
  const float mine = static_cast<float>(step);
  engine::Tensor all = engine::Tensor::full({comm.size()}, mine, device);
  const std::span<float> gathered{all.device_data(), static_cast<size_t>(all.numel())};
  comm.all_gather(gathered.subspan(static_cast<size_t>(comm.rank()), 1), gathered);
  const std::vector<float> steps = all.to_vector();
  for (int r = 0; r < comm.size(); ++r)
    if (steps[r] != mine)
      throw std::runtime_error(regime + ": rank " + std::to_string(comm.rank()) + " resumes at step " +
                               std::to_string(step) + " but rank " + std::to_string(r) + " at step " +
                               std::to_string(static_cast<int64_t>(steps[r])) +
                               "; their checkpoints are of different points");
}

void CountedSum::all_reduce_sum(engine::Tensor& t) {
  Stopwatch clock;
  comm_.all_reduce({t.device_data(), static_cast<size_t>(t.numel())});
  const double s = clock.seconds();
  counters_.add(transport::CollectiveKind::all_reduce, t.numel() * 4, comm_, s);
  seconds += s;
}

void CountedSum::all_gather(const engine::Tensor& part, engine::Tensor& whole) {
  Stopwatch clock;
  comm_.all_gather({part.device_data(), static_cast<size_t>(part.numel())},
                   {whole.device_data(), static_cast<size_t>(whole.numel())});
  const double s = clock.seconds();
  counters_.add(transport::CollectiveKind::all_gather, whole.numel() * 4, comm_, s);
  seconds += s;
}

void CountedSum::reduce_scatter_sum(const engine::Tensor& whole, engine::Tensor& part) {
  engine::Tensor buffer;
  {
    engine::MemTagScope tag(engine::MemTag::communication);
    buffer = whole.clone();  // reduce_scatter works in place
  }
  Stopwatch clock;
  comm_.reduce_scatter({buffer.device_data(), static_cast<size_t>(buffer.numel())});
  const double s = clock.seconds();
  counters_.add(transport::CollectiveKind::reduce_scatter, whole.numel() * 4, comm_, s);
  seconds += s;
  engine::copy_range(part, 0, buffer, comm_.rank() * part.numel(), part.numel());
}

double clip_by_group_norm(const std::vector<engine::Tensor>& split, const std::vector<engine::Tensor>& copies,
                          CountedSum& sum, double clip_grad_norm, const engine::Device& device) {
  double mine = 0.0, shared = 0.0;
  for (const engine::Tensor& g : split)
    if (g.defined()) mine += engine::sum_squares(g);
  for (const engine::Tensor& g : copies)
    if (g.defined()) shared += engine::sum_squares(g);
  engine::Tensor total = engine::Tensor::full({1}, static_cast<float>(mine), device);
  Stopwatch clock;
  sum.all_reduce_sum(total);
  const double seconds = clock.seconds();
  const double coef = clip_grad_norm / (std::sqrt(static_cast<double>(total.item()) + shared) + 1e-6);
  if (coef < 1.0)
    for (const auto* list : {&split, &copies})
      for (engine::Tensor g : *list)
        if (g.defined()) engine::scale_(g, static_cast<float>(coef));
  return seconds;
}

}  // namespace quartet::trainers::data_parallel
