#include "analysis/plan/cluster.h"

#include <cmath>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

namespace quartet::analysis::plan {

using nlohmann::json;

namespace {

constexpr double kMaxEfficiency = 4.0;
constexpr double kTera = 1e12, kGiga = 1e9, kGiB = 1024.0 * 1024.0 * 1024.0, kMicro = 1e-6;

// Reads the fields of one JSON object, each once, and refuses the ones it did not read.
class Reader {
 public:
  Reader(const json& j, std::string path) : j_(j), path_(std::move(path)) {
    if (!j_.is_object()) fail(path_, "expected an object, got " + shown(j_));
  }

  std::string field(const std::string& key) const { return path_ + "." + key; }

  const json* find(const std::string& key) {
    seen_.insert(key);
    const auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  const json& need(const std::string& key) {
    const json* v = find(key);
    if (!v) fail(field(key), "missing (docs/plan.md lists the fields)");
    return *v;
  }
  // A finite number > 0 (or ≥ 0 with `zero_ok`), or `fallback` when absent and one is given.
  double number(const std::string& key, bool zero_ok = false, std::optional<double> fallback = std::nullopt) {
    const json* v = fallback ? find(key) : &need(key);
    if (!v) return *fallback;
    if (!v->is_number() || !std::isfinite(v->get<double>()) || v->get<double>() < 0 ||
        (!zero_ok && v->get<double>() == 0))
      fail(field(key), std::string("expected a number ") + (zero_ok ? "≥ 0" : "> 0") + ", got " + shown(*v));
    return v->get<double>();
  }
  int64_t integer(const std::string& key, std::optional<int64_t> fallback = std::nullopt) {
    const json* v = fallback ? find(key) : &need(key);
    if (!v) return *fallback;
    if (!v->is_number_integer() || v->get<int64_t>() < 1)
      fail(field(key), "expected an integer ≥ 1, got " + shown(*v));
    return v->get<int64_t>();
  }
  std::string text(const std::string& key, std::optional<std::string> fallback = std::nullopt) {
    const json* v = fallback ? find(key) : &need(key);
    if (!v) return *fallback;
    if (!v->is_string()) fail(field(key), "expected a string, got " + shown(*v));
    return v->get<std::string>();
  }
  // Every field not read is a typo or a field of another version: refused, by name.
  void done() const {
    for (const auto& [key, value] : j_.items())
      if (!seen_.count(key)) {
        std::string known;
        for (const std::string& k : seen_) known += (known.empty() ? "" : ", ") + k;
        fail(field(key), "unknown field; allowed here: " + known);
      }
  }

  static std::string shown(const json& v) {
    std::string s = v.dump();
    return s.size() > 40 ? s.substr(0, 37) + "..." : s;
  }
  [[noreturn]] static void fail(const std::string& field, const std::string& what) {
    throw ClusterError(field + ": " + what);
  }

 private:
  const json& j_;
  std::string path_;
  std::set<std::string> seen_;
};

// What a further core adds: a fraction in (0, 1] (1, linear, when absent).
double further_cores(Reader& r, const std::string& key, double fallback) {
  const double f = r.number(key, false, fallback);
  if (f > 1.0) Reader::fail(r.field(key), "expected a fraction in (0, 1], got " + std::to_string(f));
  return f;
}

Efficiency parse_efficiency(Reader& r) {
  Efficiency e;
  const json* v = r.find("efficiency");
  if (!v) return e;
  Reader er(*v, r.field("efficiency"));
  for (auto [key, slot] : {std::pair{"matmul", &e.matmul}, {"conv", &e.conv}, {"attention", &e.attention},
                           {"elementwise", &e.elementwise}}) {
    *slot = er.number(key, false, *slot);
    // Above 1 where a kernel does fewer FLOPs than counted (Winograd convolutions).
    if (*slot > kMaxEfficiency)
      Reader::fail(er.field(key), "expected a fraction of the peak in (0, 4], got " + std::to_string(*slot));
  }
  e.matmul_half_dim = er.number("matmul_half_dim", true, 0.0);
  e.attention_half_positions = er.number("attention_half_positions", true, 0.0);
  if (const json* f = er.find("further_cores")) {
    Reader fr(*f, er.field("further_cores"));
    for (auto [key, slot] : {std::pair{"matmul", &e.further_cores.matmul}, {"conv", &e.further_cores.conv},
                             {"attention", &e.further_cores.attention}, {"elementwise", &e.further_cores.elementwise}})
      *slot = further_cores(fr, key, *slot);
    fr.done();
  }
  er.done();
  return e;
}

const std::vector<std::string>& elementwise_op_names() {
  static const std::vector<std::string> names = {"relu",          "max_pool", "gelu", "layer_norm",
                                                  "cross_entropy", "bias",     "moe_dispatch"};
  return names;
}

DeviceProfile parse_device(const json& j, const std::string& path) {
  Reader r(j, path);
  DeviceProfile d;
  d.name = r.text("name");
  d.kind = r.text("kind", "gpu");
  if (d.kind != "gpu" && d.kind != "cpu") Reader::fail(r.field("kind"), "expected gpu or cpu, got \"" + d.kind + "\"");
  const json& peaks = r.need("peak_tflops");
  Reader pr(peaks, r.field("peak_tflops"));
  for (const auto& [precision, value] : peaks.items()) d.peak_flops[precision] = pr.number(precision) * kTera;
  if (!d.peak_flops.count("fp32")) Reader::fail(r.field("peak_tflops.fp32"), "missing (every device has an fp32 peak)");
  d.memory_bytes = r.number("memory_gib") * kGiB;
  d.memory_bandwidth_bytes_per_s = r.number("memory_bandwidth_gb_s") * kGiga;
  d.efficiency = parse_efficiency(r);
  if (const json* ops = r.find("elementwise_ops")) {
    Reader opr(*ops, r.field("elementwise_ops"));
    for (const std::string& name : elementwise_op_names()) {
      const json* op = opr.find(name);
      if (!op) continue;
      Reader one(*op, opr.field(name));
      ElementwiseOp e;
      e.nanoseconds_per_element = one.number("ns");
      e.further_cores = further_cores(one, "further_cores", 1.0);
      one.done();
      d.elementwise_ops[name] = e;
    }
    opr.done();
  }
  r.done();
  return d;
}

LinkLevel parse_link(const json& j, const std::string& path, bool inter) {
  Reader r(j, path);
  LinkLevel l;
  l.name = r.text("name", "");
  l.bandwidth_bytes_per_s = r.number("bandwidth_gbit_s") * kGiga / 8.0;
  l.latency_s = r.number("latency_us", true) * kMicro;
  if (inter) l.nics_per_node = static_cast<int>(r.integer("nics_per_node", 1));
  r.done();
  return l;
}

Distribution parse_distribution(const json& j, const std::string& path, double scale) {
  if (j.is_number()) {
    if (!std::isfinite(j.get<double>()) || j.get<double>() <= 0)
      Reader::fail(path, "expected a number > 0, got " + Reader::shown(j));
    return {"fixed", j.get<double>() * scale, 0.0};
  }
  Reader r(j, path);
  Distribution d;
  d.kind = r.text("kind");
  if (d.kind == "uniform") {
    d.a = r.number("min") * scale;
    d.b = r.number("max") * scale;
    if (d.b < d.a) Reader::fail(r.field("max"), "expected max ≥ min");
  } else if (d.kind == "lognormal") {
    d.a = r.number("median") * scale;
    d.b = r.number("sigma", true);
  } else {
    Reader::fail(r.field("kind"), "expected uniform or lognormal (or a plain number), got \"" + d.kind + "\"");
  }
  r.done();
  return d;
}

json distribution_json(const Distribution& d, double scale) {
  if (d.kind == "fixed") return d.a / scale;
  if (d.kind == "uniform") return {{"kind", "uniform"}, {"min", d.a / scale}, {"max", d.b / scale}};
  return {{"kind", "lognormal"}, {"median", d.a / scale}, {"sigma", d.b}};
}

Population parse_population(const json& j, const std::string& path) {
  Reader r(j, path);
  Population p;
  p.clients = r.integer("clients");
  p.flops = parse_distribution(r.need("client_gflops"), r.field("client_gflops"), kGiga);
  p.down_bytes_per_s = parse_distribution(r.need("down_mbit_s"), r.field("down_mbit_s"), 1e6 / 8.0);
  p.up_bytes_per_s = parse_distribution(r.need("up_mbit_s"), r.field("up_mbit_s"), 1e6 / 8.0);
  p.latency_s = parse_distribution(r.need("latency_ms"), r.field("latency_ms"), 1e-3);
  p.dropout = r.number("dropout", true, 0.0);
  if (p.dropout >= 1.0) Reader::fail(r.field("dropout"), "expected a fraction in [0, 1), got " + std::to_string(p.dropout));
  r.done();
  return p;
}

}  // namespace

double DeviceProfile::peak(const std::string& precision) const {
  if (const auto it = peak_flops.find(precision); it != peak_flops.end()) return it->second;
  std::string known;
  for (const auto& [p, v] : peak_flops) known += (known.empty() ? "" : ", ") + p;
  throw ClusterError("precision " + precision + ": device " + name + " has no peak for it; it has " + known);
}

ClusterProfile parse_cluster(const json& j, const std::string& where) {
  Reader r(j, where);
  ClusterProfile c;
  c.name = r.text("name");
  c.description = r.text("description", "");
  c.nodes = r.integer("nodes");
  c.devices_per_node = r.integer("devices_per_node");
  c.host_cores = r.integer("host_cores");
  c.device = parse_device(r.need("device"), r.field("device"));
  c.intra = parse_link(r.need("intra_link"), r.field("intra_link"), false);
  c.inter = parse_link(r.need("inter_link"), r.field("inter_link"), true);
  if (const json* p = r.find("population")) c.population = parse_population(*p, r.field("population"));
  r.done();
  return c;
}

json cluster_json(const ClusterProfile& c) {
  json peaks = json::object();
  for (const auto& [p, v] : c.device.peak_flops) peaks[p] = v / kTera;
  const Efficiency& e = c.device.efficiency;
  json j = {
      {"name", c.name},
      {"description", c.description},
      {"nodes", c.nodes},
      {"devices_per_node", c.devices_per_node},
      {"host_cores", c.host_cores},
      {"device",
       {{"name", c.device.name},
        {"kind", c.device.kind},
        {"peak_tflops", peaks},
        {"memory_gib", c.device.memory_bytes / kGiB},
        {"memory_bandwidth_gb_s", c.device.memory_bandwidth_bytes_per_s / kGiga},
        {"efficiency",
         {{"matmul", e.matmul},
          {"conv", e.conv},
          {"attention", e.attention},
          {"elementwise", e.elementwise},
          {"matmul_half_dim", e.matmul_half_dim},
          {"attention_half_positions", e.attention_half_positions},
          {"further_cores",
           {{"matmul", e.further_cores.matmul},
            {"conv", e.further_cores.conv},
            {"attention", e.further_cores.attention},
            {"elementwise", e.further_cores.elementwise}}}}}}},
      {"intra_link",
       {{"name", c.intra.name},
        {"bandwidth_gbit_s", c.intra.bandwidth_bytes_per_s * 8.0 / kGiga},
        {"latency_us", c.intra.latency_s / kMicro}}},
      {"inter_link",
       {{"name", c.inter.name},
        {"bandwidth_gbit_s", c.inter.bandwidth_bytes_per_s * 8.0 / kGiga},
        {"latency_us", c.inter.latency_s / kMicro},
        {"nics_per_node", c.inter.nics_per_node}}},
  };
  for (const auto& [name, op] : c.device.elementwise_ops)
    j["device"]["elementwise_ops"][name] = {{"ns", op.nanoseconds_per_element}, {"further_cores", op.further_cores}};
  if (c.population) {
    const Population& p = *c.population;
    j["population"] = {{"clients", p.clients},
                       {"client_gflops", distribution_json(p.flops, kGiga)},
                       {"down_mbit_s", distribution_json(p.down_bytes_per_s, 1e6 / 8.0)},
                       {"up_mbit_s", distribution_json(p.up_bytes_per_s, 1e6 / 8.0)},
                       {"latency_ms", distribution_json(p.latency_s, 1e-3)},
                       {"dropout", p.dropout}};
  }
  return j;
}

ClusterProfile load_cluster_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ClusterError(path + ": cannot be read (a cluster profile, clusters/*.json)");
  std::stringstream text;
  text << in.rdbuf();
  json j;
  try {
    j = json::parse(text.str(), nullptr, true, /*ignore_comments=*/true);
  } catch (const json::exception& e) {
    throw ClusterError(path + ": not JSON: " + e.what());
  }
  return parse_cluster(j, path);
}

}  // namespace quartet::analysis::plan
