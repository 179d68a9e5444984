#include "experiments/spec.h"

#include <fstream>
#include <set>
#include <sstream>

#include "trainers/regime.h"
#include "workloads/models.h"
#include "workloads/workload.h"

namespace quartet::experiments {
namespace {

using nlohmann::json;

Field integer(std::string name, std::string desc, double min, json def = nullptr) {
  Field f{.name = std::move(name), .type = FieldType::integer, .description = std::move(desc)};
  f.minimum = min;
  f.default_value = std::move(def);
  return f;
}

Field number(std::string name, std::string desc, json def = nullptr) {
  return Field{.name = std::move(name), .type = FieldType::number, .description = std::move(desc),
               .default_value = std::move(def)};
}

Field string(std::string name, std::string desc, json def = nullptr, std::vector<std::string> one_of = {}) {
  return Field{.name = std::move(name), .type = FieldType::string, .description = std::move(desc),
               .default_value = std::move(def), .one_of = std::move(one_of)};
}

Field required(Field f) {
  f.required = true;
  return f;
}

Field train_field() {
  Field lr = number("lr", "learning rate", 0.05);
  lr.exclusive_minimum = 0.0;
  Field momentum = number("momentum", "SGD momentum", 0.0);
  momentum.minimum = 0.0;
  momentum.maximum = 1.0;
  Field wd = number("weight_decay", "weight decay: L2 on the gradient (sgd, adam), decoupled (adamw)", 0.0);
  wd.minimum = 0.0;
  Field beta1 = number("beta1", "adam, adamw: first-moment decay", 0.9);
  beta1.minimum = 0.0;
  beta1.maximum = 0.999999;
  Field beta2 = number("beta2", "adam, adamw: second-moment decay", 0.999);
  beta2.minimum = 0.0;
  beta2.maximum = 0.999999;
  Field eps = number("eps", "adam, adamw: added to the denominator", 1e-8);
  eps.minimum = 0.0;
  Field optimizer{.name = "optimizer", .type = FieldType::object, .description = "the optimizer",
                  .default_value = json::object()};
  optimizer.fields = {string("name", "optimizer", "sgd", {"sgd", "adam", "adamw"}), lr, momentum,
                      Field{.name = "nesterov", .type = FieldType::boolean, .description = "sgd: Nesterov momentum",
                            .default_value = false},
                      wd, beta1, beta2, eps};
  Field gamma = number("gamma", "step: decay factor", 0.1);
  gamma.exclusive_minimum = 0.0;
  Field min_lr = number("min_lr", "cosine: the rate at the end", 0.0);
  min_lr.minimum = 0.0;
  Field start = number("warmup_start_factor", "warm-up starts at this fraction of the rate", 1.0 / 3.0);
  start.exclusive_minimum = 0.0;
  start.maximum = 1.0;
  Field schedule{.name = "schedule", .type = FieldType::object,
                 .description = "learning-rate schedule over optimizer steps", .default_value = json::object()};
  schedule.fields = {
      string("name", "schedule", "constant", {"constant", "step", "cosine"}),
      integer("step_size", "step: decay every this many optimizer steps", 1, 1),
      gamma,
      min_lr,
      integer("warmup_steps", "linear warm-up steps in front of the schedule; 0: none", 0, 0),
      start,
      integer("scale_base_batch",
              "linear scaling rule (Goyal et al. 2017): lr x batch / this; 0: off", 0, 0),
  };
  Field target = number("target", "quality (test accuracy) to reach; time and samples to it are reported");
  target.exclusive_minimum = 0.0;
  target.maximum = 1.0;
  Field clip = number("clip_grad_norm", "clip gradients to this global L2 norm; 0 turns clipping off", 0.0);
  clip.minimum = 0.0;
  Field train{.name = "train", .type = FieldType::object, .description = "training settings"};
  train.fields = {
      integer("epochs", "passes over the training set (epoch-equivalents)", 1, 1),
      required(integer("batch", "samples behind one optimizer step of the global model", 1)),
      target,
      optimizer,
      schedule,
      clip,
      integer("eval_batch", "batch size for test-set evaluation", 1, 1000),
      integer("max_steps", "stop each arm after this many optimizer steps; 0: no limit", 0, 0),
  };
  return train;
}

Field make_schema() {
  Field workload{.name = "workload", .type = FieldType::object, .description = "dataset, model, loss and metric",
                 .required = true};
  workload.fields = {
      required(string("name", "the workload (quartet list workloads)", nullptr, workloads::workload_names())),
      required(string("model", "the model (quartet list models)")),
      string("data_dir", "dataset folder; empty: the workload's default", ""),
      integer("train_samples", "use only the first N training samples; 0: all", 0, 0),
      integer("test_samples", "evaluate on the first N test samples; 0: all", 0, 0),
  };
  Field train = train_field();
  train.required = true;

  Field arm_train{.name = "train", .type = FieldType::object,
                  .description = "overrides of the experiment's train fields for this arm", .open = true};
  Field arm{.name = "arm", .type = FieldType::object, .description = "one regime and its settings"};
  arm.fields = {
      required(string("name", "the arm's name: a folder name in the run")),
      required(string("regime", "how the model is trained", nullptr, trainers::regime_names())),
      integer("micro_batches", "accumulate: micro-batches per optimizer step; must divide the batch", 1),
      arm_train,
      integer("threads", "compute threads per process; 0: cores / processes of the arm", 0),
      string("device", "\"cpu\" or \"cuda:N\""),
  };
  Field arms{.name = "arms", .type = FieldType::array, .description = "the arms, run one after another",
             .required = true};
  arms.minimum = 1;
  arms.items = {arm};

  Field root{.name = "spec", .type = FieldType::object, .description = "a Quartet experiment"};
  root.fields = {
      required(string("name", "the experiment's name")),
      workload,
      integer("seed", "seed of the initial weights, shuffling and partitions", 0, 1),
      integer("threads", "compute threads per process; 0: cores / processes of the arm", 0, 0),
      string("device", "\"cpu\" or \"cuda:N\"", "cpu"),
      train,
      arms,
  };
  return root;
}

TrainSpec train_from(const json& t) {
  TrainSpec s;
  s.epochs = t.at("epochs").get<int64_t>();
  s.batch = t.at("batch").get<int64_t>();
  if (t.contains("target")) s.target = t.at("target").get<double>();
  const json& o = t.at("optimizer");
  s.optimizer = {o.at("name").get<std::string>(), o.at("lr").get<double>(),       o.at("momentum").get<double>(),
                 o.at("nesterov").get<bool>(),        o.at("weight_decay").get<double>(), o.at("beta1").get<double>(),
                 o.at("beta2").get<double>(),         o.at("eps").get<double>()};
  const json& sc = t.at("schedule");
  s.schedule = {sc.at("name").get<std::string>(),         sc.at("step_size").get<int64_t>(),
                sc.at("gamma").get<double>(),             sc.at("min_lr").get<double>(),
                sc.at("warmup_steps").get<int64_t>(),     sc.at("warmup_start_factor").get<double>(),
                sc.at("scale_base_batch").get<int64_t>()};
  s.clip_grad_norm = t.at("clip_grad_norm").get<double>();
  s.eval_batch = t.at("eval_batch").get<int64_t>();
  s.max_steps = t.at("max_steps").get<int64_t>();
  return s;
}

bool safe_folder_name(const std::string& s) {
  if (s.empty() || s == "." || s == ".." || s.size() > 64) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
  return true;
}

}  // namespace

const Field& spec_schema() {
  static const Field schema = make_schema();
  return schema;
}

const ArmSpec& ExperimentSpec::arm(const std::string& arm_name) const {
  for (const ArmSpec& a : arms)
    if (a.name == arm_name) return a;
  throw SpecError("no arm named \"" + arm_name + "\" in experiment " + name);
}

ExperimentSpec parse_spec(json j) {
  validate_and_fill(j, spec_schema(), "spec");
  ExperimentSpec spec;
  spec.name = j.at("name").get<std::string>();
  if (!safe_folder_name(spec.name))
    throw SpecError("spec.name: expected letters, digits, '-', '_' or '.' (at most 64), got \"" + spec.name + "\"");
  spec.seed = j.at("seed").get<uint64_t>();
  const json& w = j.at("workload");
  spec.workload = {w.at("name").get<std::string>(), w.at("model").get<std::string>(),
                   w.at("data_dir").get<std::string>(), w.at("train_samples").get<int64_t>(),
                   w.at("test_samples").get<int64_t>()};
  {
    std::vector<std::string> known;
    bool found = false;
    for (const auto& m : workloads::model_catalog()) {
      known.push_back(m.name);
      found = found || m.name == spec.workload.model;
    }
    if (!found) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "\"" : ", \"") + k + "\"";
      throw SpecError("spec.workload.model: unknown model \"" + spec.workload.model + "\"; expected one of " + list);
    }
  }

  std::set<std::string> seen;
  json& arms = j.at("arms");
  for (size_t i = 0; i < arms.size(); ++i) {
    json& a = arms[i];
    const std::string path = "spec.arms[" + std::to_string(i) + "]";
    ArmSpec arm;
    arm.name = a.at("name").get<std::string>();
    if (!safe_folder_name(arm.name))
      throw SpecError(path + ".name: expected letters, digits, '-', '_' or '.' (at most 64), got \"" + arm.name + "\"");
    if (!seen.insert(arm.name).second) throw SpecError(path + ".name: \"" + arm.name + "\" is used by another arm");
    arm.regime = a.at("regime").get<std::string>();

    // The arm's train settings: the experiment's, patched by the arm's own.
    json train = j.at("train");
    if (a.contains("train")) train.merge_patch(a.at("train"));
    validate_and_fill(train, train_field(), path + ".train");
    a["train"] = train;
    arm.train = train_from(train);

    if (arm.train.optimizer.nesterov && arm.train.optimizer.name != "sgd")
      throw SpecError(path + ".train.optimizer.nesterov: only sgd has Nesterov momentum");
    if (arm.train.optimizer.nesterov && arm.train.optimizer.momentum <= 0.0)
      throw SpecError(path + ".train.optimizer.nesterov: Nesterov momentum needs momentum > 0");
    arm.micro_batches = a.value("micro_batches", int64_t{1});
    if (a.contains("micro_batches") && arm.regime != "accumulate")
      throw SpecError(path + ".micro_batches: only the accumulate regime takes micro_batches, this arm is " +
                      arm.regime);
    if (arm.train.batch % arm.micro_batches != 0)
      throw SpecError(path + ".micro_batches: " + std::to_string(arm.micro_batches) + " does not divide the batch " +
                      std::to_string(arm.train.batch) + "; batches must split evenly");
    arm.threads = static_cast<int>(a.contains("threads") ? a.at("threads").get<int64_t>() : j.at("threads").get<int64_t>());
    arm.device = a.contains("device") ? a.at("device").get<std::string>() : j.at("device").get<std::string>();
    if (arm.device != "cpu")
      throw SpecError(path + ".device: \"" + arm.device +
                      "\" is not available: this build of Quartet trains on \"cpu\" only (no CUDA backend)");
    spec.arms.push_back(std::move(arm));
  }
  spec.json = std::move(j);
  return spec;
}

ExperimentSpec load_spec_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SpecError(path + ": cannot open the experiment file");
  std::stringstream text;
  text << in.rdbuf();
  json j;
  try {
    j = json::parse(text.str(), nullptr, true, /*ignore_comments=*/true);
  } catch (const json::parse_error& e) {
    throw SpecError(path + ": not valid JSON: " + e.what());
  }
  try {
    return parse_spec(std::move(j));
  } catch (const SpecError& e) {
    throw SpecError(path + ": " + e.what());
  }
}

}  // namespace quartet::experiments
