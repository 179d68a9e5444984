#include "analysis/plan/cost.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include "analysis/plan/collectives.h"
#include "analysis/plan/rounds.h"

namespace quartet::analysis::plan {

namespace {

// Where a rank runs and what it computes with.
struct Placement {
  int64_t ranks_per_node = 1;
  int64_t nodes = 1;
  double rank_devices = 1.0;  // devices (cpu: cores) one rank computes on, the node's shared out
  double own_devices = 1.0;   // cpu: the cores a rank's threads compute on while it runs
};

Placement place(int64_t ranks, const PlanArm& arm, const ClusterProfile& c) {
  Placement p;
  if (c.device.kind == "gpu") {
    if (ranks > c.devices())
      throw std::invalid_argument("arm " + arm.name + ": " + std::to_string(ranks) + " ranks need as many devices; " +
                                  c.name + " has " + std::to_string(c.devices()));
    p.ranks_per_node = std::min(ranks, c.devices_per_node);
    p.nodes = (ranks + c.devices_per_node - 1) / c.devices_per_node;
    return p;
  }
  // CPU: ranks spread over the nodes, sharing a node's cores.
  p.nodes = std::min(ranks, c.nodes);
  p.ranks_per_node = (ranks + p.nodes - 1) / p.nodes;
  p.rank_devices = arm.threads > 0 ? std::min<double>(arm.threads, static_cast<double>(c.devices_per_node))
                                   : static_cast<double>(c.devices_per_node) / static_cast<double>(p.ranks_per_node);
  p.own_devices = std::max(1.0, std::min(p.rank_devices, static_cast<double>(c.devices_per_node)));
  // More threads than cores on the node: they take turns.
  p.rank_devices = std::min(p.rank_devices, static_cast<double>(c.devices_per_node) / static_cast<double>(p.ranks_per_node));
  return p;
}

struct Group {
  int per_node = 1;
  int nodes = 1;
};

Group group_of(const Mesh& mesh, const std::string& axis, const Placement& p) {
  const int64_t size = mesh.size(axis), stride = mesh.stride(axis);
  Group g;
  g.per_node = static_cast<int>(stride >= p.ranks_per_node ? 1 : std::min(size, p.ranks_per_node / stride));
  g.nodes = static_cast<int>((size + g.per_node - 1) / g.per_node);
  return g;
}

// A group over several axes side by side (the gradient reduction over dp and cp).
Group group_of_axes(const Mesh& mesh, const std::vector<std::string>& axes, const Placement& p) {
  Group g{1, 1};
  for (const std::string& a : axes) {
    const Group one = group_of(mesh, a, p);
    g.per_node *= one.per_node;
    g.nodes *= one.nodes;
  }
  return g;
}

struct Rate {
  double flops_per_s[4] = {};  // by OpClass: peak × efficiency
  double bytes_per_s = 0.0;     // memory bandwidth × elementwise efficiency
  double matmul_half_dim = 0.0;
  double attention_half_positions = 0.0;
  double devices = 1.0;         // cpu: the rank's cores
  double busy = 1.0;            // cpu: the node's cores computing at once
  const std::map<std::string, ElementwiseOp>* elementwise_ops = nullptr;
};

// What `devices` cores of a cpu rank compute at, in one core's rates, while `busy` cores of
// its node compute at once (its own and other ranks'): each busy core beyond the first
// adds `further` of one core, shared out among the busy cores. A rank alone on its cores
// (busy = devices) gets 1 + (devices − 1) × further.
double effective_cores(double devices, double busy, double further) {
  busy = std::max(busy, devices);
  return busy > 1.0 ? devices * (1.0 + (busy - 1.0) * further) / busy : devices;
}

Rate rate_of(const ClusterProfile& c, const std::string& precision, double devices, double busy) {
  const Efficiency& e = c.device.efficiency;
  const bool cpu = c.device.kind == "cpu";
  busy = std::min(busy, static_cast<double>(c.devices_per_node));
  auto cores = [&](double further) { return cpu ? effective_cores(devices, busy, further) : devices; };
  const double peak = c.device.peak(precision);
  Rate r;
  r.flops_per_s[static_cast<int>(OpClass::matmul)] = peak * cores(e.further_cores.matmul) * e.matmul;
  r.flops_per_s[static_cast<int>(OpClass::conv)] = peak * cores(e.further_cores.conv) * e.conv;
  r.flops_per_s[static_cast<int>(OpClass::attention)] = peak * cores(e.further_cores.attention) * e.attention;
  r.flops_per_s[static_cast<int>(OpClass::elementwise)] = peak * cores(e.further_cores.elementwise) * e.elementwise;
  r.bytes_per_s = c.device.memory_bandwidth_bytes_per_s * cores(e.further_cores.elementwise) * e.elementwise;
  r.matmul_half_dim = e.matmul_half_dim;
  r.attention_half_positions = e.attention_half_positions;
  r.devices = devices;
  r.busy = cpu ? busy : devices;
  r.elementwise_ops = &c.device.elementwise_ops;
  return r;
}

// One micro-batch through layers [first, last) on one rank.
struct StageTime {
  double forward = 0.0, backward = 0.0;
  double attention_forward = 0.0;  // what CP's ring hides behind
  double by_op[4] = {};
  double blocks = 0.0;             // transformer blocks in the stage
  double moe_blocks = 0.0;         // of them, blocks with experts
  double parameters = 0.0;         // on this rank (tensor-parallel layers split, experts spread over ep)
  double expert_parameters = 0.0;  // of them, the experts'
  double largest_parameters = 0.0; // the largest model stage's, on this rank (ZeRO-3's gather)
};

StageTime stage_time(const ModelShape& m, size_t first, size_t last, double samples, const PlanArm& arm,
                     const Rate& rate) {
  const double e = element_bytes(arm.precision);
  const double tp = static_cast<double>(arm.mesh.tp), cp = static_cast<double>(arm.mesh.cp);
  StageTime t;
  std::map<std::string, double> stage_params;
  for (size_t i = first; i < last; ++i) {
    const Layer& l = m.layers[i];
    const double split = (l.tensor_parallel ? tp : (arm.sequence_parallel ? tp : 1.0)) * cp;
    const double param_split = l.tensor_parallel ? tp : (l.expert ? static_cast<double>(arm.mesh.ep) : 1.0);
    const double flops = l.forward_flops * samples / (l.tensor_parallel ? tp : 1.0) / cp;
    const double bytes = l.moved_elements * samples * e / split + l.parameters * e / param_split;
    const int op = static_cast<int>(l.op);
    double flops_per_s = rate.flops_per_s[op];
    if (l.op == OpClass::matmul && rate.matmul_half_dim > 0 && l.in_features > 0) {
      const double split = l.tensor_parallel ? tp : 1.0;
      const double d = std::min(l.in_features / (l.row_parallel ? split : 1.0), l.out_features / (l.row_parallel ? 1.0 : split));
      flops_per_s *= d / (d + rate.matmul_half_dim);
    }
    if (l.op == OpClass::attention && rate.attention_half_positions > 0 && m.gpt) {
      // A block's query positions: the context, or under context parallelism the 2 cp
      // chunks a rank's ring attention computes block by block.
      const double positions = static_cast<double>(m.gpt->context) / (cp > 1 ? 2.0 * cp : 1.0);
      flops_per_s *= positions / (positions + rate.attention_half_positions);
    }
    // The layer's elementwise kernels the profile timed (a third of each forward, as
    // backward is twice the forward below); an elementwise layer with all of them timed
    // is priced by them instead of its bytes.
    double kernels = 0.0;
    bool all_timed = !l.kernels.empty();
    for (const auto& [name, per_sample] : l.kernels) {
      const auto it = rate.elementwise_ops->find(name);
      if (it == rate.elementwise_ops->end()) {
        all_timed = false;
        continue;
      }
      const double cores = effective_cores(rate.devices, rate.busy, it->second.further_cores);
      kernels += per_sample * samples / split * it->second.nanoseconds_per_element * 1e-9 / 3.0 / cores;
    }
    const bool elementwise = l.op == OpClass::elementwise;
    const double own = elementwise && all_timed
                           ? 0.0
                           : std::max(elementwise ? 0.0 : flops / flops_per_s, bytes / rate.bytes_per_s);
    const double side = elementwise && !all_timed ? 0.0 : kernels;  // timed kernels beside it
    const double fwd = own + side;
    // Backward: input and weight gradients, each the forward's work; the model's first
    // layer computes no input gradient (its bias gradient still runs).
    const double bwd = (i == 0 && !elementwise ? 1.0 : 2.0) * own + 2.0 * side;
    const double recompute = arm.checkpointing ? fwd : 0.0;
    t.forward += fwd;
    t.backward += bwd + recompute;
    t.by_op[op] += fwd + bwd + recompute;
    if (l.op == OpClass::attention) t.attention_forward += fwd;
    t.parameters += l.parameters / param_split;
    if (l.expert) t.expert_parameters += l.parameters / param_split;
    stage_params[l.stage] += l.parameters / param_split;
  }
  for (const auto& [s, p] : stage_params) t.largest_parameters = std::max(t.largest_parameters, p);
  if (m.gpt)
    for (size_t i = first; i < last; ++i) {
      if (m.layers[i].op == OpClass::attention) t.blocks += 1;
      if (m.layers[i].expert && m.layers[i].out_features > m.layers[i].in_features)
        t.moe_blocks += 1;  // the experts' up projection: one a block
    }
  return t;
}

Link intra_of(const ClusterProfile& c) { return {c.intra.bandwidth_bytes_per_s, c.intra.latency_s}; }
Link inter_of(const ClusterProfile& c) { return {c.inter.bandwidth_bytes_per_s, c.inter.latency_s}; }

std::string percent(double part, double whole) {
  return std::to_string(static_cast<int>(std::lround(whole > 0 ? 100.0 * part / whole : 0.0))) + " %";
}

void check_arm(const ModelShape& m, const PlanArm& arm) {
  const Mesh& mesh = arm.mesh;
  for (const char* a : kMeshAxes)
    if (mesh.size(a) < 1) throw std::invalid_argument("arm " + arm.name + ": mesh axis " + a + " must be ≥ 1");
  if (arm.micro_batches < 1) throw std::invalid_argument("arm " + arm.name + ": micro_batches must be ≥ 1");
  if (arm.batch % (mesh.dp * mesh.ep * arm.micro_batches) != 0)
    throw std::invalid_argument("arm " + arm.name + ": batch " + std::to_string(arm.batch) + " does not split into " +
                                std::to_string(mesh.dp * mesh.ep) + " ranks × " + std::to_string(arm.micro_batches) +
                                " micro-batches");
  const bool experts = m.gpt && m.gpt->moe;
  if (mesh.ep > 1 && !experts)
    throw std::invalid_argument("arm " + arm.name + ": expert parallelism spreads a mixture of experts; " + m.name +
                                " has none");
  if (mesh.ep > 1 && m.gpt->moe->experts % mesh.ep != 0)
    throw std::invalid_argument("arm " + arm.name + ": ep " + std::to_string(mesh.ep) + " does not divide the " +
                                std::to_string(m.gpt->moe->experts) + " experts of " + m.name);
  // What the runtime trains a mixture of experts with (docs/mesh.md): no split of its
  // blocks by tp or cp, and no ZeRO beside ep.
  if (experts && (mesh.tp > 1 || mesh.cp > 1))
    throw std::invalid_argument("arm " + arm.name + ": " + m.name + " is split by dp, ep and pp only, not tp or cp");
  if (mesh.ep > 1 && arm.zero > 0)
    throw std::invalid_argument("arm " + arm.name + ": ZeRO is not combined with expert parallelism");
  if ((mesh.tp > 1 || mesh.cp > 1) && !m.gpt)
    throw std::invalid_argument("arm " + arm.name + ": tensor and context parallelism split transformers; " + m.name +
                                " is not one");
  if (m.gpt && m.gpt->heads % mesh.tp != 0)
    throw std::invalid_argument("arm " + arm.name + ": tp " + std::to_string(mesh.tp) + " does not divide the " +
                                std::to_string(m.gpt->heads) + " heads of " + m.name);
  if (m.gpt && m.gpt->context % (2 * mesh.cp) != 0 && mesh.cp > 1)
    throw std::invalid_argument("arm " + arm.name + ": 2 × cp does not divide the context of " + m.name);
  if (static_cast<size_t>(mesh.pp) > m.stages.size())
    throw std::invalid_argument("arm " + arm.name + ": " + std::to_string(mesh.pp) + " pipeline stages, but " + m.name +
                                " has " + std::to_string(m.stages.size()) + " model stages");
  if (arm.zero < 0 || arm.zero > 3) throw std::invalid_argument("arm " + arm.name + ": zero must be 0..3");
}

}  // namespace

std::vector<size_t> pipeline_stage_starts(const ModelShape& m, int64_t stages, const std::vector<std::string>& cuts) {
  // Model-stage boundaries: the first layer of each model stage.
  std::vector<size_t> starts_of_stage;
  for (size_t i = 0; i < m.layers.size(); ++i)
    if (i == 0 || m.layers[i].stage != m.layers[i - 1].stage) starts_of_stage.push_back(i);
  const size_t S = starts_of_stage.size();
  if (!cuts.empty()) {
    if (static_cast<int64_t>(cuts.size()) + 1 != stages)
      throw std::invalid_argument(std::to_string(cuts.size()) + " cuts make " + std::to_string(cuts.size() + 1) +
                                  " stages, not " + std::to_string(stages));
    std::vector<size_t> out = {0};
    for (const std::string& cut : cuts) {
      const auto it = std::find(m.stages.begin(), m.stages.end(), cut);
      if (it == m.stages.end() || it + 1 == m.stages.end())
        throw std::invalid_argument("cut " + cut + ": not a stage of " + m.name + " with one after it");
      const size_t k = static_cast<size_t>(it - m.stages.begin()) + 1;
      if (starts_of_stage[k] <= out.back()) throw std::invalid_argument("cut " + cut + ": cuts must be in order");
      out.push_back(starts_of_stage[k]);
    }
    return out;
  }
  // Balanced: contiguous groups of model stages minimising the largest group's weight.
  std::vector<double> weight(S, 0.0);
  for (size_t s = 0; s < S; ++s) {
    const size_t end = s + 1 < S ? starts_of_stage[s + 1] : m.layers.size();
    for (size_t i = starts_of_stage[s]; i < end; ++i)
      weight[s] += m.layers[i].forward_flops + 100.0 * m.layers[i].moved_elements;
  }
  const size_t P = static_cast<size_t>(stages);
  const double inf = 1e300;
  // best[p][s]: the least largest weight splitting stages [0, s) into p groups.
  std::vector<std::vector<double>> best(P + 1, std::vector<double>(S + 1, inf));
  std::vector<std::vector<size_t>> from(P + 1, std::vector<size_t>(S + 1, 0));
  best[0][0] = 0.0;
  for (size_t p = 1; p <= P; ++p)
    for (size_t s = p; s <= S; ++s) {
      double group = 0.0;
      for (size_t k = s; k-- > p - 1;) {
        group += weight[k];
        const double v = std::max(best[p - 1][k], group);
        if (v < best[p][s]) best[p][s] = v, from[p][s] = k;
      }
    }
  std::vector<size_t> out(P);
  for (size_t p = P, s = S; p > 0; --p) {
    s = from[p][s];
    out[p - 1] = starts_of_stage[s];
  }
  return out;
}

double layers_seconds(const ModelShape& m, size_t first, size_t last, double samples, const ClusterProfile& c,
                      const std::string& precision, double devices, double busy) {
  PlanArm arm;
  arm.precision = precision;
  const StageTime t = stage_time(m, first, std::min(last, m.layers.size()), samples, arm,
                                 rate_of(c, precision, devices, busy > 0 ? busy : devices));
  return t.forward + t.backward;
}

Prediction predict(const ModelShape& m, const PlanArm& arm, const ClusterProfile& c) {
  if (arm.regime == "split") return predict_split(m, arm, c);
  if (arm.regime == "federated") return predict_federated(m, arm, c);
  check_arm(m, arm);
  const Mesh& mesh = arm.mesh;
  const Placement where = place(mesh.ranks(), arm, c);
  // A cpu rank computes on its own threads' cores; when the node's ranks want more cores
  // than it has, they take turns (below), and a rank that waits gives its core to one
  // that computes.
  const double cores = static_cast<double>(c.devices_per_node);
  const double own = c.device.kind == "cpu" ? where.own_devices : where.rank_devices;
  const Rate rate = rate_of(c, arm.precision, own, own * static_cast<double>(where.ranks_per_node));
  const double e = element_bytes(arm.precision);
  const Link intra = intra_of(c), inter = inter_of(c);
  const int nics = c.inter.nics_per_node;
  const double m_count = static_cast<double>(arm.micro_batches);
  const double samples = static_cast<double>(arm.batch) / static_cast<double>(mesh.dp * mesh.ep) / m_count;
  const double tokens = m.gpt ? static_cast<double>(m.tokens_per_sample) : 1.0;
  const double width = m.gpt ? static_cast<double>(m.gpt->width) : 0.0;
  const Algorithm algorithm = algorithm_named(arm.algorithm);

  Prediction p;
  p.arm = arm.name;
  p.regime = arm.regime;
  p.mesh = mesh.text();
  p.ranks = mesh.ranks();

  // The slowest pipeline stage decides the slot; the fullest one the memory.
  const std::vector<size_t> starts = pipeline_stage_starts(m, mesh.pp, arm.cuts);
  const Group tp_group = group_of(mesh, "tp", where), cp_group = group_of(mesh, "cp", where),
              pp_group = group_of(mesh, "pp", where), ep_group = group_of(mesh, "ep", where),
              grad_group = group_of_axes(mesh, {"dp", "cp", "ep"}, where),
              expert_grad_group = group_of_axes(mesh, {"dp", "cp"}, where);
  // The shared parameters' gradients are summed over dp × cp × ep, the experts' over the
  // ranks that hold the same experts (dp × cp).
  const int64_t grad_ranks = mesh.dp * mesh.cp * mesh.ep, expert_grad_ranks = mesh.dp * mesh.cp;
  // Sequential micro-batches (the mesh regime's pp: no overlap): a step is every stage of
  // every micro-batch in turn.
  const bool sequential = arm.schedule == "sequential";
  double slot = 0.0, slot_compute = 0.0, slot_tp = 0.0, slot_cp = 0.0, slot_p2p = 0.0, slot_ep = 0.0;
  double all_stages = 0.0;
  StageTime slowest;
  double intra_bytes = 0.0, inter_bytes = 0.0;
  MemoryBytes fullest;
  const StateBytes state = state_bytes(arm.precision, arm.optimizer);
  for (size_t s = 0; s < starts.size(); ++s) {
    const size_t first = starts[s], last = s + 1 < starts.size() ? starts[s + 1] : m.layers.size();
    const StageTime t = stage_time(m, first, last, samples, arm, rate);
    // Tensor parallelism: two all-reduces forward and two backward a block (a third
    // pair with recomputation), of the micro-batch's activations; exposed.
    const double act_bytes = samples * tokens * width * e / static_cast<double>(mesh.cp);
    const double tp_calls = t.blocks * (4.0 + (arm.checkpointing ? 2.0 : 0.0));
    const CollectiveCost tp_one = all_reduce(Algorithm::ring, act_bytes, tp_group.per_node, tp_group.nodes, intra, inter, nics);
    const double tp_s = tp_calls * tp_one.seconds;
    // Context parallelism: each block's K and V of the local positions pass the ring
    // (cp − 1 hops) forward, and K, V and their gradients backward; hidden behind the
    // attention's compute where that is longer.
    double cp_s = 0.0;
    CollectiveCost cp_hop;
    if (mesh.cp > 1) {
      const double kv = 2.0 * samples * tokens * width * e / static_cast<double>(mesh.cp) / static_cast<double>(mesh.tp);
      const Link& l = cp_group.nodes > 1 ? inter : intra;
      const double ring = static_cast<double>(mesh.cp - 1) * message_seconds(kv, l) * 3.0;  // forward 1, backward 2
      const double hide = t.attention_forward * 3.0 / std::max(1.0, t.blocks);
      cp_s = t.blocks * std::max(0.0, ring - hide);
      cp_hop.inter_bytes = cp_group.nodes > 1 ? t.blocks * 3.0 * static_cast<double>(mesh.cp - 1) * kv : 0.0;
      cp_hop.intra_bytes = cp_group.nodes > 1 ? 0.0 : t.blocks * 3.0 * static_cast<double>(mesh.cp - 1) * kv;
    }
    // Pipeline: the stage's output forward and its gradient back, once a micro-batch.
    // Between nodes, the tp ranks of a stage each send 1/tp of it on their own NIC and
    // all-gather it on the other side (Megatron's scatter/gather, Narayanan et al. §4.1).
    double p2p = 0.0, p2p_bytes = 0.0;
    if (mesh.pp > 1 && s + 1 < starts.size()) {
      p2p_bytes = m.layers[last - 1].output_elements * samples * e / static_cast<double>(mesh.cp);
      if (pp_group.nodes > 1 && mesh.tp > 1) {
        p2p_bytes /= static_cast<double>(mesh.tp);
        p2p = 2.0 * (message_seconds(p2p_bytes, inter) +
                     ring_all_gather_seconds(p2p_bytes * static_cast<double>(mesh.tp), static_cast<int>(mesh.tp), intra));
      } else {
        p2p = 2.0 * message_seconds(p2p_bytes, pp_group.nodes > 1 ? inter : intra);
      }
      p2p_bytes *= 2.0;
      // Interleaved: a micro-batch crosses every rank's v chunks, so v sends each way.
      p2p *= static_cast<double>(arm.virtual_stages);
      p2p_bytes *= static_cast<double>(arm.virtual_stages);
    }
    // Expert parallelism: each MoE block's dispatch and combine all-to-alls forward, and
    // both again backward, of the micro-batch's k choices a token; exposed.
    double ep_s = 0.0;
    CollectiveCost ep_one;
    if (mesh.ep > 1 && t.moe_blocks > 0) {
      const double rows_bytes = samples * tokens * static_cast<double>(m.gpt->moe->top_k) * width * e;
      ep_one = all_to_all(rows_bytes, ep_group.per_node, ep_group.nodes, intra, inter, nics);
      ep_s = 4.0 * t.moe_blocks * ep_one.seconds;
    }
    const double stage_slot = t.forward + t.backward + tp_s + cp_s + p2p + ep_s;
    all_stages += stage_slot;
    if (stage_slot >= slot) {
      slot = stage_slot, slot_compute = t.forward + t.backward, slot_tp = tp_s, slot_cp = cp_s, slot_p2p = p2p;
      slot_ep = ep_s;
      slowest = t;
      const double ep_calls = 4.0 * t.moe_blocks;
      const double per_micro_intra = tp_calls * tp_one.intra_bytes + cp_hop.intra_bytes +
                                     (pp_group.nodes > 1 ? 0.0 : p2p_bytes) + ep_calls * ep_one.intra_bytes;
      const double per_micro_inter = tp_calls * tp_one.inter_bytes + cp_hop.inter_bytes +
                                     (pp_group.nodes > 1 ? p2p_bytes : 0.0) + ep_calls * ep_one.inter_bytes;
      intra_bytes = per_micro_intra * m_count;
      inter_bytes = per_micro_inter * m_count;
    }
    // Memory of this stage's ranks.
    MemoryBytes mem = model_state(t.parameters, arm.zero, grad_ranks, state);
    const ActivationBytes act = activations(m, first, last, samples, mesh.tp, mesh.cp, arm.sequence_parallel,
                                            arm.checkpointing, arm.precision);
    const double in_flight = static_cast<double>(
        mesh.pp > 1 && !sequential
            ? micro_batches_in_flight(arm.schedule, static_cast<int64_t>(s), mesh.pp, arm.micro_batches, arm.virtual_stages)
            : 1);
    mem.activations = act.kept * in_flight + act.recompute;
    if (grad_ranks > 1) mem.communication = std::min(arm.bucket_bytes, t.parameters * state.gradient) * 2.0;
    if (arm.zero >= 3) mem.communication += t.largest_parameters * e;  // a gathered stage
    double largest_out = 0.0;
    for (size_t i = first; i < last; ++i) largest_out = std::max(largest_out, m.layers[i].output_elements);
    mem.workspace = 2.0 * largest_out * samples * e;
    if (mem.total() > fullest.total()) fullest = mem;
  }
  const double P = static_cast<double>(mesh.pp);
  // Interleaved 1F1B: v chunks a rank, each a 1/v slot, the bubble (P − 1) chunk slots.
  const double v = static_cast<double>(arm.virtual_stages);
  double pipeline_s = sequential ? m_count * all_stages : (m_count + (P - 1.0) / v) * slot;
  // Idle time of the slowest stage's ranks while the others work.
  p.bubble_seconds = sequential ? m_count * (all_stages - slot) : (P - 1.0) / v * slot;
  // More ranks than a cpu node's cores: the node's cores are the bound, each rank busy
  // for its micro-batches' slots (its stage's, the stages on average), `cores / own` of
  // them at once.
  const double node_ranks = static_cast<double>(where.ranks_per_node);
  if (c.device.kind == "cpu" && node_ranks * own > cores) {
    const double work = node_ranks * m_count * all_stages / P * own / cores;
    if (work > pipeline_s) {
      p.bubble_seconds = 0.0;
      pipeline_s = work;
    }
  }

  // Gradient reduction over dp × cp (ZeRO 1 and 2: reduce-scatter then all-gather of the
  // parameters, the same bytes; ZeRO 3: the parameters gathered forward and backward too);
  // with experts, the shared parameters' over dp × cp × ep, the experts' over dp × cp.
  double grad_s = 0.0, grad_exposed = 0.0;
  if (grad_ranks > 1) {
    const double shared = slowest.parameters - slowest.expert_parameters;
    const double grad_bytes = (expert_grad_ranks > 1 ? slowest.parameters : shared) * state.gradient;
    const CollectiveCost g = all_reduce(algorithm, shared * state.gradient, grad_group.per_node, grad_group.nodes,
                                        intra, inter, nics);
    grad_s = g.seconds;
    intra_bytes += g.intra_bytes;
    inter_bytes += g.inter_bytes;
    if (expert_grad_ranks > 1 && slowest.expert_parameters > 0) {
      const CollectiveCost ge = all_reduce(algorithm, slowest.expert_parameters * state.gradient,
                                           expert_grad_group.per_node, expert_grad_group.nodes, intra, inter, nics);
      grad_s += ge.seconds;
      intra_bytes += ge.intra_bytes;
      inter_bytes += ge.inter_bytes;
    }
    // DDP: buckets all-reduced as backward fills them; the last bucket waits for the end.
    const double buckets = std::max(1.0, std::ceil(grad_bytes / arm.bucket_bytes));
    const double hidden_by = mesh.pp > 1 ? 0.0 : slowest.backward;
    grad_exposed = std::max(grad_s / buckets, grad_s - hidden_by);
    if (arm.zero >= 3) {
      const CollectiveCost gather =
          all_gather(slowest.parameters * e, grad_group.per_node, grad_group.nodes, intra, inter);
      intra_bytes += 2.0 * gather.intra_bytes * m_count;
      inter_bytes += 2.0 * gather.inter_bytes * m_count;
      // Prefetched a stage ahead: hidden behind compute where that is longer.
      const double per_pass = gather.seconds;
      grad_exposed += m_count * (std::max(0.0, per_pass - slowest.forward) + std::max(0.0, per_pass - slowest.backward));
    }
  }
  // The optimizer step: elementwise over the local parameters, gradients and state.
  const double local_params = slowest.parameters / (arm.zero >= 1 ? static_cast<double>(grad_ranks) : 1.0);
  const double optimizer_s = 2.0 * local_params * (state.parameter + state.gradient + state.optimizer) / rate.bytes_per_s;

  p.step_seconds = pipeline_s + grad_exposed + optimizer_s;
  p.samples_per_second = static_cast<double>(arm.batch) / p.step_seconds;
  p.compute_seconds = m_count * slot_compute + optimizer_s;
  p.comm_seconds = m_count * (slot_tp + slot_cp + slot_p2p + slot_ep) + grad_exposed;
  p.intra_bytes = intra_bytes;
  p.inter_bytes = inter_bytes;
  p.memory = fullest;
  p.memory_capacity = c.device.memory_bytes * std::max(1.0, where.rank_devices);
  p.fits = fullest.total() <= p.memory_capacity;
  const double peak_all = c.device.peak(arm.precision) * where.rank_devices * static_cast<double>(mesh.ranks());
  p.mfu = train_flops(m) * p.samples_per_second / peak_all;

  // The bottleneck: the largest share of the step.
  std::vector<std::pair<double, std::string>> parts;
  for (int op = 0; op < 4; ++op)
    parts.push_back({m_count * slowest.by_op[op],
                     std::string(op == static_cast<int>(OpClass::elementwise) ? "memory-bound " : "compute in ") +
                         op_class_name(static_cast<OpClass>(op)) + (op == 3 ? " ops" : "s")});
  parts.push_back({m_count * slot_tp, std::string("tensor-parallel all-reduces on the ") +
                                          (tp_group.nodes > 1 ? "inter-node" : "intra-node") + " link"});
  parts.push_back({m_count * slot_cp, "context-parallel K/V ring beyond the attention it hides behind"});
  parts.push_back({m_count * slot_p2p, "activations sent between pipeline stages"});
  parts.push_back({m_count * slot_ep, std::string("expert-parallel all-to-alls on the ") +
                                          (ep_group.nodes > 1 ? "inter-node" : "intra-node") + " link"});
  parts.push_back({p.bubble_seconds, sequential ? "stages waiting for each other: micro-batches run through the " +
                                                     std::to_string(mesh.pp) + " stages in turn, without overlap"
                                               : "the pipeline bubble: P − 1 = " + std::to_string(mesh.pp - 1) + " of " +
                                                     std::to_string(arm.micro_batches + mesh.pp - 1) + " slots idle"});
  parts.push_back({grad_exposed, std::string("gradient ") + (arm.zero >= 3 ? "reduction and ZeRO-3 gathers" : "all-reduce") +
                                     " not hidden by backward, on the " +
                                     (grad_group.nodes > 1 ? "inter-node" : "intra-node") + " link"});
  parts.push_back({optimizer_s, "the optimizer step"});
  const auto top = std::max_element(parts.begin(), parts.end());
  p.bottleneck = top->second + " (" + percent(top->first, p.step_seconds) + " of the step)";
  if (!p.fits)
    p.bottleneck = "does not fit: " + std::to_string(static_cast<int64_t>(fullest.total() / (1 << 20))) +
                   " MiB a device, " + std::to_string(static_cast<int64_t>(p.memory_capacity / (1 << 20))) + " MiB there";
  return p;
}

}  // namespace quartet::analysis::plan
