#include "trainers/federated/client.h"

#include <algorithm>
#include <stdexcept>

#include "engine/autograd.h"
#include "trainers/metrics.h"
#include "trainers/training_loop.h"
#include "workloads/sampler.h"

namespace quartet::trainers::federated {

Params params_of(const engine::Module& m) {
  Params p;
  for (const auto& [name, t] : m.state_dict()) p.push_back(t.to_vector());
  return p;
}

void load_params(engine::Module& m, const Params& p) {
  engine::NamedTensors sd = m.state_dict();
  if (sd.size() != p.size())
    throw std::invalid_argument("federated weights: " + std::to_string(p.size()) + " tensors for a model of " +
                                std::to_string(sd.size()));
  for (size_t i = 0; i < sd.size(); ++i) {
    engine::Tensor& t = sd[i].second;
    if (static_cast<int64_t>(p[i].size()) != t.numel())
      throw std::invalid_argument("federated weights: " + sd[i].first + " has " + std::to_string(p[i].size()) +
                                  " values, the model " + std::to_string(t.numel()));
    t.copy_from_host(p[i]);
  }
}

int64_t params_bytes(const Params& p) {
  int64_t n = 0;
  for (const auto& t : p) n += static_cast<int64_t>(t.size() * sizeof(float));
  return n;
}

std::vector<std::string> byzantine_attacks() { return {"sign_flip", "scale"}; }

void corrupt_update(Params& weights, const Params& global, const std::string& attack, double scale) {
  if (attack != "sign_flip" && attack != "scale")
    throw std::invalid_argument("unknown byzantine_attack \"" + attack + "\"; known: sign_flip, scale");
  if (weights.size() != global.size()) throw std::invalid_argument("corrupt_update: weights and global differ in shape");
  const double s = attack == "sign_flip" ? -scale : scale;
  for (size_t t = 0; t < weights.size(); ++t) {
    if (weights[t].size() != global[t].size())
      throw std::invalid_argument("corrupt_update: tensor " + std::to_string(t) + " differs in size");
    for (size_t k = 0; k < weights[t].size(); ++k)
      weights[t][k] = static_cast<float>(global[t][k] + s * (static_cast<double>(weights[t][k]) - global[t][k]));
  }
}

int64_t local_samples(int64_t partition_samples, int64_t batch, int64_t local_epochs) {
  const int64_t b = std::min(batch, partition_samples);
  return b < 1 ? 0 : local_epochs * workloads::batches_per_epoch(partition_samples, b) * b;
}

LocalResult train_client(engine::Model& model, const workloads::Workload& wl, const std::vector<int64_t>& indices,
                         const Params& global, const LocalConfig& cfg, int64_t client, int64_t round) {
  if (indices.empty()) throw std::invalid_argument("client " + std::to_string(client) + " has no samples");
  load_params(model, global);
  model.train();
  const std::vector<engine::Tensor> params = model.parameters();
  std::unique_ptr<engine::Optimizer> optimizer = make_optimizer(cfg.optimizer, params);
  const int64_t batch = std::min<int64_t>(cfg.batch, static_cast<int64_t>(indices.size()));
  const int64_t steps_per_epoch = workloads::batches_per_epoch(static_cast<int64_t>(indices.size()), batch);
  const uint64_t client_seed = workloads::mix_seed(cfg.seed ^ workloads::mix_seed(0xc11e47ULL + static_cast<uint64_t>(client)));

  Reducer alone;
  WholeModelStep micro(model, wl, alone);
  StepOptions step{.micro_batches = 1, .lr = std::nullopt, .clip_grad_norm = cfg.clip_grad_norm,
                   .before_step = nullptr};
  if (cfg.mu > 0.0)
    step.before_step = [&] {  // FedProx: grad += mu (w - w_global), on the host
      for (size_t i = 0; i < params.size(); ++i) {
        engine::Tensor g = params[i].grad();
        if (!g.defined()) continue;
        const engine::HostValues w(params[i]);
        engine::update_on_host(g, [&](std::span<float> grad) {
          add_proximal_gradient(grad, w.span(), global[i], static_cast<float>(cfg.mu));
        });
      }
    };
  LocalResult r;
  double loss_sum = 0.0;
  for (int64_t e = 0; e < cfg.local_epochs; ++e) {
    const int64_t epoch = (round - 1) * cfg.local_epochs + e;  // the client's own count
    const std::vector<int64_t> order = workloads::shuffled(indices, client_seed, epoch);
    for (int64_t b = 0; b < steps_per_epoch; ++b) {
      const StepTimes t = train_step(wl, workloads::batch_at(order, batch, b), epoch, params, *optimizer, alone,
                                     micro, step);
      r.data += t.data;
      r.forward += t.forward;
      r.backward += t.backward;
      r.optimizer += t.optimizer;
      loss_sum += t.loss;
      r.steps += 1;
      r.samples_processed += batch;
    }
  }
  r.loss = r.steps > 0 ? loss_sum / static_cast<double>(r.steps) : 0.0;
  r.weights = params_of(model);
  return r;
}

}  // namespace quartet::trainers::federated
