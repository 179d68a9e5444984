#include "analysis/plan/rounds.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

#include "analysis/plan/collectives.h"

namespace quartet::analysis::plan {

namespace {

double draw(const Distribution& d, std::mt19937_64& gen) {
  if (d.kind == "uniform") return std::uniform_real_distribution<double>(d.a, d.b)(gen);
  if (d.kind == "lognormal") return std::lognormal_distribution<double>(std::log(d.a), d.b)(gen);
  return d.a;
}

// The arm's own link (an emulated preset), else the cluster's link between nodes.
Link arm_link(const PlanArm& arm, const ClusterProfile& c) {
  if (arm.link_bandwidth_bytes_per_s > 0 || arm.link_latency_s > 0)
    return {arm.link_bandwidth_bytes_per_s, arm.link_latency_s};
  return {c.inter.bandwidth_bytes_per_s, c.inter.latency_s};
}

// Cores a process gets when `processes` share the cluster's first node (cpu): its share,
// or the arm's threads where it sets fewer; one device each (gpu).
double devices_each(const ClusterProfile& c, int64_t processes, const PlanArm& arm) {
  if (c.device.kind == "gpu") return 1.0;
  const double share = static_cast<double>(c.devices_per_node) / static_cast<double>(std::max<int64_t>(1, processes));
  return arm.threads > 0 ? std::min<double>(arm.threads, share) : share;
}

std::string link_name(const PlanArm& arm, const ClusterProfile& c) {
  return !arm.link.empty() ? arm.link : (c.inter.name.empty() ? "the inter-node link" : c.inter.name);
}

}  // namespace

std::vector<ClientDraw> draw_clients(const Population& p, int64_t count, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::bernoulli_distribution drop(p.dropout);
  std::vector<ClientDraw> out(static_cast<size_t>(count));
  for (ClientDraw& c : out) {
    c.flops_per_s = draw(p.flops, gen);
    c.down_bytes_per_s = draw(p.down_bytes_per_s, gen);
    c.up_bytes_per_s = draw(p.up_bytes_per_s, gen);
    c.latency_s = draw(p.latency_s, gen);
    c.drops = drop(gen);
  }
  return out;
}

Prediction predict_split(const ModelShape& m, const PlanArm& arm, const ClusterProfile& c) {
  if (arm.cuts.empty() || arm.cuts.size() > 2)
    throw std::invalid_argument("arm " + arm.name + ": split needs a cut (or two, U-shaped)");
  const std::vector<size_t> starts = pipeline_stage_starts(m, static_cast<int64_t>(arm.cuts.size()) + 1, arm.cuts);
  const double e = element_bytes(arm.precision);
  const double samples = static_cast<double>(arm.batch);
  const bool splitfed = arm.variant == "splitfed";
  // Vanilla and U-shaped run one process at a time (the rest wait); SplitFed's clients
  // share the node's cores.
  const double side_by_side = splitfed ? static_cast<double>(std::min<int64_t>(arm.clients, c.devices_per_node)) : 1.0;
  const double client_devices = devices_each(c, static_cast<int64_t>(side_by_side), arm);
  const double server_devices = devices_each(c, 1, arm);
  const size_t client_end = starts[1];
  double client = layers_seconds(m, 0, client_end, samples, c, arm.precision, client_devices, side_by_side * client_devices);
  double server = layers_seconds(m, client_end, arm.cuts.size() == 2 ? starts[2] : m.layers.size(), samples, c,
                                 arm.precision, server_devices);
  if (arm.cuts.size() == 2)
    client += layers_seconds(m, starts[2], m.layers.size(), samples, c, arm.precision, client_devices,
                             side_by_side * client_devices);
  // Activations up and their gradients down at each cut; labels (vanilla) are small.
  double bytes = 0.0, messages = 0.0;
  for (size_t k = 1; k < starts.size(); ++k) {
    bytes += 2.0 * m.layers[starts[k] - 1].output_elements * samples * e;
    messages += 2.0;
  }
  const Link link = arm_link(arm, c);
  const double comm = messages * link.latency_s + (link.bandwidth_bytes_per_s > 0 ? bytes / link.bandwidth_bytes_per_s : 0.0);
  Prediction p;
  p.arm = arm.name;
  p.regime = arm.regime;
  p.mesh = std::to_string(arm.clients) + (arm.clients == 1 ? " client" : " clients");
  p.ranks = arm.clients + 1;
  // A step: one batch of one client (vanilla); of every client (SplitFed), in parallel
  // on the clients, in turn on the server.
  const double clients = static_cast<double>(arm.clients);
  p.step_seconds = splitfed ? client + comm + clients * server : client + server + comm;
  const double step_samples = splitfed ? samples * clients : samples;
  p.samples_per_second = step_samples / p.step_seconds;
  p.compute_seconds = splitfed ? client + clients * server : client + server;
  p.comm_seconds = comm;
  p.inter_bytes = bytes;
  p.memory.parameters = parameter_count(m) * e;
  p.memory.gradients = p.memory.parameters;
  p.memory.activations = activations(m, 0, m.layers.size(), samples, 1, 1, false, false, arm.precision).kept;
  p.memory_capacity = c.device.memory_bytes * server_devices;
  p.fits = p.memory.total() <= p.memory_capacity;
  p.mfu = train_flops(m) * p.samples_per_second / (c.device.peak(arm.precision) * server_devices);
  p.bottleneck = comm > p.compute_seconds ? "activations and gradients on " + link_name(arm, c)
                                          : (splitfed ? "the server's halves, one client after another" : "compute, clients in turn");
  return p;
}

Prediction predict_federated(const ModelShape& m, const PlanArm& arm, const ClusterProfile& c, uint64_t seed) {
  const double e = element_bytes(arm.precision);
  const double model_bytes = parameter_count(m) * e;
  const int64_t asked = std::max<int64_t>(1, std::llround(arm.fraction * static_cast<double>(arm.clients)));
  // Samples a client trains on in a round: whole batches of its data (the last, partial
  // one dropped, as the clients do), or its data as one batch when it holds less.
  const int64_t held = arm.client_samples > 0 ? arm.client_samples : arm.batch;
  const int64_t batch = std::min(arm.batch, held);
  const double work = static_cast<double>(arm.local_epochs * (held / batch) * batch);
  Prediction p;
  p.arm = arm.name;
  p.regime = arm.regime;
  p.mesh = std::to_string(asked) + " of " + std::to_string(arm.clients);
  p.ranks = asked;
  // Per round: its time, the slowest's training and messages, the clients that answer
  // and the samples they train on.
  double round = 0.0, train = 0.0, comm = 0.0, clients = 0.0, trained = 0.0;
  if (c.population) {
    // Cross-device: each client asked is drawn; the round waits for the slowest answer.
    const std::vector<ClientDraw> drawn = draw_clients(*c.population, asked, seed);
    for (const ClientDraw& d : drawn) {
      if (d.drops) continue;
      clients += 1;
      trained += work;
      const double t_train = train_flops(m) * work / d.flops_per_s;
      const double t_comm = 2 * d.latency_s + model_bytes / d.down_bytes_per_s + model_bytes / d.up_bytes_per_s;
      if (t_train + t_comm > round) round = t_train + t_comm, train = t_train, comm = t_comm;
    }
  } else if (!arm.client_rounds.empty()) {
    // The rounds as they were dealt (a finished run's records): each pool trains its
    // clients in turn, and a round waits for the pool with the most work. Per round, on
    // average over the rounds.
    const int64_t pools = static_cast<int64_t>(std::max<size_t>(1, arm.client_rounds.front().size()));
    const double each = devices_each(c, pools, arm);
    const double per_sample = layers_seconds(m, 0, m.layers.size(), static_cast<double>(arm.batch), c, arm.precision,
                                             each, each * static_cast<double>(pools)) /
                              static_cast<double>(arm.batch);
    const double t_comm = 2 * message_seconds(model_bytes, arm_link(arm, c));
    const double rounds = static_cast<double>(arm.client_rounds.size());
    for (const auto& round_pools : arm.client_rounds) {
      double slowest = 0.0, slowest_train = 0.0;
      for (const std::vector<int64_t>& pool : round_pools) {
        double t_train = 0.0;
        for (const int64_t samples : pool) t_train += static_cast<double>(samples) * per_sample;
        const double t = t_train + static_cast<double>(pool.size()) * t_comm;
        if (t > slowest) slowest = t, slowest_train = t_train;
        clients += static_cast<double>(pool.size()) / rounds;
        for (const int64_t samples : pool) trained += static_cast<double>(samples) / rounds;
      }
      round += slowest / rounds;
      train += slowest_train / rounds;
      comm += (slowest - slowest_train) / rounds;
    }
  } else {
    // Clients as processes on one node: the pools share its cores, each client's round
    // in turn within its pool; weights cross the arm's link.
    const int64_t pools = std::min<int64_t>(asked, c.device.kind == "gpu" ? c.devices_per_node : c.devices_per_node);
    const double each = devices_each(c, pools, arm);
    const double per_client = layers_seconds(m, 0, m.layers.size(), static_cast<double>(arm.batch), c, arm.precision,
                                             each, each * static_cast<double>(pools)) *
                              work / static_cast<double>(arm.batch);
    const Link link = arm_link(arm, c);
    const double t_comm = 2 * message_seconds(model_bytes, link);
    const double turns = std::ceil(static_cast<double>(asked) / static_cast<double>(pools));
    train = turns * per_client;
    comm = turns * t_comm;
    round = train + comm;
    clients = static_cast<double>(asked);
    trained = clients * work;
  }
  // Aggregation: the server reads every update once.
  const double aggregate = clients * model_bytes / (c.device.memory_bandwidth_bytes_per_s * c.devices_per_node);
  p.step_seconds = round + aggregate;
  p.samples_per_second = trained / p.step_seconds;
  p.compute_seconds = train + aggregate;
  p.comm_seconds = comm;
  p.inter_bytes = 2 * model_bytes;
  p.memory.parameters = model_bytes;
  p.memory.gradients = model_bytes;
  p.memory.activations = activations(m, 0, m.layers.size(), static_cast<double>(arm.batch), 1, 1, false, false, arm.precision).kept;
  p.memory_capacity = c.device.memory_bytes;
  p.fits = true;
  p.mfu = 0.0;
  p.bottleneck = comm > train ? "the slowest answering client's download and upload"
                              : "the slowest answering client's local training";
  const int64_t answered = std::llround(clients);
  if (c.population && answered < asked)
    p.bottleneck += " (" + std::to_string(asked - answered) + " of " + std::to_string(asked) + " dropped out)";
  return p;
}

}  // namespace quartet::analysis::plan
