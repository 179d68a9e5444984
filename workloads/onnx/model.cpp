#include "workloads/onnx/model.h"

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <vector>

#include "engine/memory.h"
#include "workloads/onnx/program.h"

namespace quartet::workloads::onnx {
namespace {

using engine::Tensor;

// Steps [begin, end) of a program: the tensor in slot `in` in, slot `out` out, with the
// initializers its steps read as its own parameters and buffers.
class GraphStage : public engine::Module {
 public:
  GraphStage(std::shared_ptr<const Program> program, int begin, int end, int in, int out, uint64_t seed)
      : program_(std::move(program)), begin_(begin), end_(end), in_(in), out_(out), gen_(seed) {
    engine::MemTagScope tag(engine::MemTag::parameters);
    for (const Initializer& i : program_->initializers()) {
      if (i.first_step < begin_ || i.first_step >= end_) continue;
      Tensor t = i.value.clone();
      own_.emplace_back(i.slot, i.buffer ? register_buffer(i.name, t) : register_parameter(i.name, t));
    }
  }

  Tensor forward(const Tensor& x) override {
    Frame f(program_->num_slots());
    f.slots[in_] = x;
    for (const auto& [slot, t] : own_) f.slots[slot] = t;
    f.training = training();
    f.gen = &gen_;
    f.device = x.device();
    f.stats_reducer = reducer_;
    program_->run(f, begin_, end_);
    return f.slots[out_];
  }

  void set_stats_reducer(engine::StatsReducer* reducer) override { reducer_ = reducer; }

 protected:
  engine::Generator* own_generator() override { return &gen_; }

 private:
  std::shared_ptr<const Program> program_;
  int begin_, end_, in_, out_;
  engine::Generator gen_;
  std::vector<std::pair<int, Tensor>> own_;
  engine::StatsReducer* reducer_ = nullptr;
};

::onnx::ModelProto read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument("model onnx:" + path + ": cannot open the file");
  ::onnx::ModelProto model;
  if (!model.ParseFromIstream(&in)) throw std::invalid_argument("model onnx:" + path + ": not an ONNX model file");
  return model;
}

struct Cut {
  int end;   // steps [previous end, end)
  int slot;  // the one tensor that crosses
};

// A stage name from a node's name: letters, digits, '-' and '_' (no '.': a stage name
// prefixes its parameters' names), unique.
std::string stage_name(const std::string& label, std::set<std::string>& used) {
  std::string s;
  for (char c : label) s += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ? c : '_';
  s.erase(0, s.find_first_not_of('_'));
  if (s.empty()) s = "stage";
  std::string name = s;
  for (int k = 2; !used.insert(name).second; ++k) name = s + "_" + std::to_string(k);
  return name;
}

struct Loaded {
  std::shared_ptr<const Program> program;
  std::vector<Cut> cuts;  // the last one ends at the last step, with the output
  std::vector<std::string> names;
};

Loaded load(const std::string& path) {
  Loaded l;
  try {
    l.program = std::make_shared<const Program>(read_file(path));
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    if (what.rfind("model onnx:", 0) == 0) throw;
    throw std::invalid_argument("model onnx:" + path + ": " + what);
  }
  const Program& p = *l.program;
  const std::string where = "model onnx:" + path;
  if (p.inputs().size() != 1 || p.outputs().size() != 1)
    throw std::invalid_argument(where + ": the graph has " + std::to_string(p.inputs().size()) + " inputs and " +
                                std::to_string(p.outputs().size()) + " outputs; a model takes one float input (N, ...) "
                                "and gives one (N, classes) output");
  const int n = static_cast<int>(p.steps().size());
  if (n == 0) throw std::invalid_argument(where + ": the graph has no node to run");
  // Where each runtime slot is made and last read; parameters and buffers apart.
  std::vector<int> made(p.num_slots(), -1), last(p.num_slots(), -1);
  std::vector<bool> state(p.num_slots(), false);
  for (const Initializer& i : p.initializers()) state[i.slot] = true;
  for (int s = 0; s < n; ++s) {
    for (int r : p.steps()[s].reads)
      if (r >= 0) last[r] = s;
    for (int w : p.steps()[s].writes) made[w] = s;
  }
  last[p.outputs()[0]] = std::numeric_limits<int>::max();
  std::set<std::string> used;
  for (int i = 0; i < n; ++i) {
    int crossing = -1, count = 0;
    for (int s = 0; s < p.num_slots() && count < 2; ++s)
      if (!state[s] && made[s] <= i && last[s] > i && (made[s] >= 0 || s == p.inputs()[0])) {
        crossing = s;
        ++count;
      }
    bool shared = false;
    for (const Initializer& init : p.initializers()) shared = shared || (init.first_step <= i && init.last_step > i);
    const bool is_last = i == n - 1;
    if (is_last) crossing = p.outputs()[0];
    else if (count != 1 || shared || crossing == p.inputs()[0] || p.is_value_slot(crossing)) continue;
    l.cuts.push_back({i + 1, crossing});
    l.names.push_back(stage_name(p.steps()[made[crossing] >= 0 ? made[crossing] : i].node, used));
  }
  return l;
}

}  // namespace

bool available() { return true; }

std::shared_ptr<engine::Model> import_model(const std::string& path, uint64_t seed) {
  const Loaded l = load(path);
  auto model = std::make_shared<engine::Model>();
  int begin = 0, in = l.program->inputs()[0];
  for (size_t k = 0; k < l.cuts.size(); ++k) {
    model->add_stage(l.names[k], std::make_shared<GraphStage>(l.program, begin, l.cuts[k].end, in, l.cuts[k].slot,
                                                              seed + k));
    begin = l.cuts[k].end;
    in = l.cuts[k].slot;
  }
  return model;
}

GraphInfo inspect_model(const std::string& path) {
  const Loaded l = load(path);
  const Program& p = *l.program;
  GraphInfo info;
  const engine::Shape& in = p.input_shapes()[0];
  if (!in.empty()) info.input_shape.assign(in.begin() + 1, in.end());
  const engine::Shape& out = p.output_shapes()[0];
  if (out.size() != 2 || out[1] < 1)
    throw std::invalid_argument("model onnx:" + path + ": the output is declared " + engine::shape_str(out) +
                                "; a model gives (N, classes) logits");
  info.num_classes = out[1];
  info.stages = l.names;
  for (const Initializer& i : p.initializers())
    if (!i.buffer) info.parameters += i.value.numel();
  return info;
}

void export_model(const std::string& source, const engine::Model& trained, const std::string& out) {
  ::onnx::ModelProto model = read_file(source);
  // "<stage>.<initializer>": the initializer's name follows the stage's.
  std::map<std::string, Tensor> values;
  for (const auto& [name, t] : trained.state_dict()) values[name.substr(name.find('.') + 1)] = t;
  // PyTorch's exporter names equal initializers through Identity nodes, each name a
  // parameter of its own here: a trained one becomes an initializer of its own, in place
  // of its node (nodes in order, so a chain of them unrolls too).
  ::onnx::GraphProto& graph = *model.mutable_graph();
  std::map<std::string, int> init_at;
  for (int i = 0; i < graph.initializer_size(); ++i) init_at[graph.initializer(i).name()] = i;
  std::vector<int> unrolled;
  for (int k = 0; k < graph.node_size(); ++k) {
    const ::onnx::NodeProto& n = graph.node(k);
    if (n.op_type() != "Identity" || n.input_size() != 1 || n.output_size() != 1 || !init_at.count(n.input(0)) ||
        !values.count(n.output(0)) || init_at.count(n.output(0)))
      continue;
    ::onnx::TensorProto own = graph.initializer(init_at.at(n.input(0)));
    own.set_name(n.output(0));
    init_at[own.name()] = graph.initializer_size();
    *graph.add_initializer() = std::move(own);
    unrolled.push_back(k);
  }
  for (auto k = unrolled.rbegin(); k != unrolled.rend(); ++k) graph.mutable_node()->DeleteSubrange(*k, 1);
  size_t replaced = 0;
  for (auto& init : *graph.mutable_initializer()) {
    const auto it = values.find(init.name());
    if (it == values.end()) continue;
    const engine::Shape dims(init.dims().begin(), init.dims().end());
    if (init.data_type() != ::onnx::TensorProto::FLOAT || it->second.shape() != dims)
      throw std::invalid_argument("model onnx:" + source + ": initializer \"" + init.name() + "\" is " +
                                  engine::shape_str(dims) + ", the trained tensor " +
                                  engine::shape_str(it->second.shape()));
    const std::vector<float> v = it->second.to_vector();
    init.clear_float_data();
    init.set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
    ++replaced;
  }
  if (replaced != values.size())
    throw std::invalid_argument("model onnx:" + source + ": " + std::to_string(values.size() - replaced) +
                                " trained tensors have no initializer of their name in the graph");
  try {
    ::onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    throw std::invalid_argument("export to " + out + ": the ONNX checker refuses the result: " + e.what());
  }
  std::ofstream file(out, std::ios::binary | std::ios::trunc);
  if (!file || !model.SerializeToOstream(&file) || !file.flush())
    throw std::invalid_argument("export to " + out + ": cannot write the file");
}

}  // namespace quartet::workloads::onnx
