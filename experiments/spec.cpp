#include "experiments/spec.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "trainers/regime.h"
#include "transport/link.h"
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
  Field target = number("target", "quality (the test metric: accuracy, or mean Dice for volumes) to reach; time "
                                  "and samples to it are reported");
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
      Field{.name = "checkpoint", .type = FieldType::boolean,
            .description = "activation checkpointing: each model stage but the last keeps only its inputs in "
                           "forward and is recomputed in backward (less memory, more compute; every regime)",
            .default_value = false},
  };
  return train;
}

// The federated regime's arm fields (docs/federated.md). No schema defaults: other
// regimes' arms stay free of them; parse_spec fills them for federated arms.
const std::vector<std::string> kFederatedFields{"clients", "fraction", "local_epochs", "rounds", "partition",
                                                "strategy", "mu", "server_momentum", "server_lr", "deadline_s",
                                                "min_clients", "processes", "compress", "topk_fraction"};

std::vector<Field> federated_fields() {
  Field fraction = number("fraction", "federated: fraction C of the clients sampled each round (seeded), 0 < C <= 1");
  fraction.exclusive_minimum = 0.0;
  fraction.maximum = 1.0;
  Field alpha = number("alpha", "dirichlet: concentration; small is skewed", 0.5);
  alpha.exclusive_minimum = 0.0;
  Field partition{.name = "partition", .type = FieldType::object,
                  .description = "federated, split: how the training set is split among the clients"};
  partition.fields = {string("kind", "iid, dirichlet (label skew) or shards (McMahan et al.)", "iid",
                             {"iid", "dirichlet", "shards"}),
                      alpha, integer("shards_per_client", "shards: shards per client", 1, 2)};
  Field mu = number("mu", "fedprox: weight of the proximal term (mu/2)||w - w_global||^2");
  mu.minimum = 0.0;
  Field momentum = number("server_momentum", "fedavgm: server momentum beta");
  momentum.minimum = 0.0;
  momentum.maximum = 1.0;
  Field server_lr = number("server_lr", "fedavgm: server learning rate");
  server_lr.exclusive_minimum = 0.0;
  Field deadline = number("deadline_s", "federated: seconds a round waits for its clients; later updates are left out");
  deadline.exclusive_minimum = 0.0;
  Field topk = number("topk_fraction", "compress topk: fraction of the update's values sent");
  topk.exclusive_minimum = 0.0;
  topk.maximum = 1.0;
  return {
      integer("clients", "federated, split: logical clients K, each with its own partition and connection", 1),
      fraction,
      integer("local_epochs", "federated: local epochs E per round, at the train batch", 1),
      integer("rounds", "federated: communication rounds", 1),
      partition,
      string("strategy", "federated: how the server combines updates", nullptr, {"fedavg", "fedprox", "fedavgm"}),
      mu,
      momentum,
      server_lr,
      deadline,
      integer("min_clients", "federated: fewest updates a round averages (else it keeps the weights); <= clients", 1),
      integer("processes", "federated, split: pool processes hosting the virtual clients; default min(cores, clients) (split vanilla, ushaped: 1)", 1),
      string("compress",
             "federated: encoding of client updates; data_parallel: of the gradients it reduces (none, fp16)",
             nullptr, {"none", "fp16", "topk"}),
      topk,
  };
}

// The split regime's own arm fields (docs/split.md); it shares clients, partition and
// processes with federated.
const std::vector<std::string> kSplitShared{"clients", "partition", "processes"};

std::vector<Field> split_fields() {
  Field cuts{.name = "cuts", .type = FieldType::array,
             .description = "split ushaped: [a, b]: the client runs the stages up to a and after b, and keeps the "
                            "labels; the server runs the stages after a up to b",
             .items = {Field{.name = "stage", .type = FieldType::string, .description = "a stage name"}}};
  cuts.minimum = 2;
  Field timeout = number("step_timeout_s", "split: seconds a silent client or server may take in a turn before it "
                                           "is dropped");
  timeout.exclusive_minimum = 0.0;
  return {
      string("variant", "split: vanilla (clients in turn), ushaped (labels stay on the client), splitfed (clients "
                        "in parallel, halves averaged every epoch)",
             nullptr, {"vanilla", "ushaped", "splitfed"}),
      string("cut", "split vanilla, splitfed: the client's last stage (quartet list models); the server runs the rest"),
      cuts,
      string("server_halves", "split splitfed: per_client (SFLv1, server halves averaged) or shared (SFLv2)", nullptr,
             {"per_client", "shared"}),
      timeout,
  };
}

Field link_field(json def) {
  return string("link", "emulated link for Asio traffic (transport/link.h presets)", std::move(def),
                transport::link_profile_names());
}

Field volume_size_field() {
  Field f = integer("volume_size", "phantom workloads: voxels per side of each volume; default 32", 32);
  f.maximum = 256;
  return f;
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
      integer("volumes", "phantom workloads: phantoms made from the seed, the test ones included; default 20. "
                         "msd-folder: use the first N cases; default all", 2),
      integer("test_volumes", "volume workloads: the last ones, held out for the metric; default 4", 1),
      volume_size_field(),
      integer("patch", "volume workloads: voxels per side of a training patch and of an inference window; default 32",
              1),
  };
  Field train = train_field();
  train.required = true;

  Field arm_train{.name = "train", .type = FieldType::object,
                  .description = "overrides of the experiment's train fields for this arm", .open = true};
  Field bucket_mb = number("bucket_mb", "data_parallel: gradient bucket size in MiB; default 25 (PyTorch DDP's)");
  bucket_mb.exclusive_minimum = 0.0;
  Field zero = integer("zero", "data_parallel: ZeRO stage, 1 shards the optimizer state, 2 also the gradients; "
                       "default 0", 0);
  zero.maximum = 2;
  Field arm{.name = "arm", .type = FieldType::object, .description = "one regime and its settings"};
  arm.fields = {
      required(string("name", "the arm's name: a folder name in the run")),
      required(string("regime", "how the model is trained", nullptr, trainers::regime_names())),
      string("model", "the model this arm trains (quartet list models); default: workload.model"),
      integer("patch", "volume workloads: this arm's patch and inference window, voxels per side (memory against "
                       "size); default: workload.patch", 1),
      integer("micro_batches",
              "accumulate: micro-batches per optimizer step; data_parallel: per rank, gradients "
              "communicated on the last only; the batch must split evenly",
              1),
      integer("ranks", "data_parallel (required): processes, each batch / ranks of every batch", 1),
      string("backend",
             "data_parallel: collectives, \"gloo\" (CPU, TCP, any hosts), \"shm\" (CPU, shared memory, "
             "every rank on one host) or \"nccl\" (GPU); default \"gloo\"",
             nullptr, {"gloo", "shm", "nccl"}),
      bucket_mb,
      Field{.name = "sync_bn", .type = FieldType::boolean,
            .description = "data_parallel: SyncBatchNorm, batch statistics over every rank; default false"},
      zero,
      arm_train,
      integer("threads", "compute threads per process; 0: cores / processes of the arm, fewer when other work keeps cores busy as the arm starts", 0),
      string("device", "\"cpu\" or \"cuda:N\""),
      Field{.name = "remote",
            .type = FieldType::array,
            .description = "roles this run does not start: they join from other hosts with quartet role --coordinator",
            .items = {Field{.name = "role", .type = FieldType::string, .description = "a role of the arm's regime"}}},
      link_field(nullptr),
  };
  for (Field& f : federated_fields()) arm.fields.push_back(std::move(f));
  for (Field& f : split_fields()) arm.fields.push_back(std::move(f));
  Field arms{.name = "arms", .type = FieldType::array, .description = "the arms, run one after another",
             .required = true};
  arms.minimum = 1;
  arms.items = {arm};

  Field root{.name = "spec", .type = FieldType::object, .description = "a Quartet experiment"};
  root.fields = {
      required(string("name", "the experiment's name")),
      workload,
      integer("seed", "seed of the initial weights, shuffling and partitions", 0, 1),
      integer("threads", "compute threads per process; 0: cores / processes of the arm, fewer when other work keeps cores busy as the arm starts", 0, 0),
      string("device", "\"cpu\" or \"cuda:N\"", "cpu"),
      link_field("loopback"),
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
  s.checkpoint = t.at("checkpoint").get<bool>();
  return s;
}

bool safe_folder_name(const std::string& s) {
  if (s.empty() || s == "." || s == ".." || s.size() > 64) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
  return true;
}

// data_parallel's fields only on its arms, their defaults filled so the spec as run says
// what ran. `compress` is shared with federated, which checks it for its own arms.
void check_data_parallel(json& a, const std::string& path, ArmSpec& arm) {
  static const char* const kFields[] = {"ranks", "backend", "bucket_mb", "sync_bn", "zero"};
  if (arm.regime != "data_parallel") {
    for (const char* f : kFields)
      if (a.contains(f))
        throw SpecError(path + "." + f + ": only the data_parallel regime takes " + f + ", this arm is " + arm.regime);
    return;
  }
  if (!a.contains("ranks")) throw SpecError(path + ".ranks: the data_parallel regime needs ranks (an integer ≥ 1)");
  if (!a.contains("backend")) a["backend"] = "gloo";
  if (!a.contains("bucket_mb")) a["bucket_mb"] = 25.0;
  if (!a.contains("sync_bn")) a["sync_bn"] = false;
  if (!a.contains("zero")) a["zero"] = 0;
  if (!a.contains("compress")) a["compress"] = "none";
  if (!a.contains("micro_batches")) a["micro_batches"] = 1;
  const int64_t ranks = a.at("ranks").get<int64_t>();
  if (ranks > 1024) throw SpecError(path + ".ranks: expected at most 1024 ranks, got " + std::to_string(ranks));
  arm.ranks = static_cast<int>(ranks);
  arm.backend = a.at("backend").get<std::string>();
  arm.bucket_mb = a.at("bucket_mb").get<double>();
  arm.sync_bn = a.at("sync_bn").get<bool>();
  arm.zero = static_cast<int>(a.at("zero").get<int64_t>());
  arm.compress = a.at("compress").get<std::string>();
  if (arm.compress != "none" && arm.compress != "fp16")
    throw SpecError(path + ".compress: data_parallel compresses gradients as \"none\" or \"fp16\", got \"" +
                    arm.compress + "\"");
  if (arm.backend == "nccl")
    throw SpecError(path + ".backend: \"nccl\" needs CUDA GPUs and NCCL, which this build of Quartet lacks; use "
                    "\"gloo\" or \"shm\" (CPU)");
  const int64_t parts = arm.ranks * arm.micro_batches;
  if (arm.train.batch % parts != 0)
    throw SpecError(path + ".ranks: the batch " + std::to_string(arm.train.batch) + " does not split evenly over " +
                    std::to_string(arm.ranks) + " ranks x " + std::to_string(arm.micro_batches) +
                    " micro_batches; it must be a multiple of ranks x micro_batches (" + std::to_string(parts) + ")");
}

// Federated fields only on federated arms; their defaults filled, so the spec as run
// says what ran (processes: min(cores, clients) of the machine that parsed it).
void check_federated(json& a, const std::string& regime, const json& experiment_link, const std::string& path) {
  if (regime != "federated") {
    for (const std::string& f : kFederatedFields)
      if (a.contains(f) && !(f == "compress" && regime == "data_parallel") &&
          !(regime == "split" && std::find(kSplitShared.begin(), kSplitShared.end(), f) != kSplitShared.end()))
        throw SpecError(path + "." + f + ": only the " +
                        (std::find(kSplitShared.begin(), kSplitShared.end(), f) != kSplitShared.end()
                             ? "federated and split regimes take "
                             : "federated regime takes ") +
                        f + ", this arm is " + regime);
    return;
  }
  if (!a.contains("clients")) a["clients"] = 10;
  const int64_t clients = a.at("clients").get<int64_t>();
  if (!a.contains("fraction")) a["fraction"] = 1.0;
  if (!a.contains("local_epochs")) a["local_epochs"] = 1;
  if (!a.contains("rounds")) a["rounds"] = 1;
  if (!a.contains("partition")) a["partition"] = json::object();
  validate_and_fill(a["partition"], federated_fields()[4], path + ".partition");
  if (!a.contains("strategy")) a["strategy"] = "fedavg";
  if (!a.contains("mu")) a["mu"] = a.at("strategy") == "fedprox" ? 0.01 : 0.0;
  if (a.at("strategy") != "fedprox" && a.at("mu").get<double>() != 0.0)
    throw SpecError(path + ".mu: only the fedprox strategy has a proximal term, this arm's strategy is " +
                    a.at("strategy").get<std::string>());
  if (!a.contains("server_momentum")) a["server_momentum"] = a.at("strategy") == "fedavgm" ? 0.9 : 0.0;
  if (!a.contains("server_lr")) a["server_lr"] = 1.0;
  if (!a.contains("deadline_s")) a["deadline_s"] = 600.0;
  if (!a.contains("min_clients")) a["min_clients"] = 1;
  if (a.at("min_clients").get<int64_t>() > clients)
    throw SpecError(path + ".min_clients: expected at most clients (" + std::to_string(clients) + "), got " +
                    std::to_string(a.at("min_clients").get<int64_t>()));
  if (!a.contains("processes")) {
    const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
    a["processes"] = std::min(cores, clients);
  }
  if (a.at("processes").get<int64_t>() > clients)
    throw SpecError(path + ".processes: expected at most clients (" + std::to_string(clients) + "), got " +
                    std::to_string(a.at("processes").get<int64_t>()) + "; a pool process without clients idles");
  if (!a.contains("compress")) a["compress"] = "none";
  if (!a.contains("topk_fraction")) a["topk_fraction"] = 0.01;
  if (!a.contains("link")) a["link"] = experiment_link;
}

// Split fields only on split arms, their defaults filled; the cuts must be stages of
// the experiment's model.
void check_split(json& a, const std::string& regime, const ArmSpec& arm, const std::string& model,
                 const json& experiment_link, const std::string& path) {
  static const char* const kFields[] = {"variant", "cut", "cuts", "server_halves", "step_timeout_s"};
  if (regime != "split") {
    for (const char* f : kFields)
      if (a.contains(f))
        throw SpecError(path + "." + f + ": only the split regime takes " + f + ", this arm is " + regime);
    return;
  }
  if (!a.contains("clients")) a["clients"] = 1;
  const int64_t clients = a.at("clients").get<int64_t>();
  if (!a.contains("variant")) a["variant"] = "vanilla";
  const std::string variant = a.at("variant").get<std::string>();
  const std::vector<std::string> stages = workloads::model_info(model).stages;
  std::string known;
  for (const auto& st : stages) known += (known.empty() ? "\"" : ", \"") + st + "\"";
  auto check_stage = [&](const std::string& field, const std::string& name) {
    const auto it = std::find(stages.begin(), stages.end(), name);
    if (it == stages.end())
      throw SpecError(path + "." + field + ": \"" + name + "\" is not a stage of " + model + "; its stages are " + known);
    if (it + 1 == stages.end())
      throw SpecError(path + "." + field + ": \"" + name + "\" is the last stage, which leaves the server nothing "
                      "to run; a cut names the client's last stage before it, one of " + known);
    return it - stages.begin();
  };
  if (variant == "ushaped") {
    if (a.contains("cut")) throw SpecError(path + ".cut: the ushaped variant takes cuts: [a, b], not cut");
    if (!a.contains("cuts") || a.at("cuts").size() != 2)
      throw SpecError(path + ".cuts: the ushaped variant needs two stage names, cuts: [a, b], from " + known);
    const auto lo = check_stage("cuts[0]", a.at("cuts")[0].get<std::string>());
    const auto hi = check_stage("cuts[1]", a.at("cuts")[1].get<std::string>());
    if (hi <= lo)
      throw SpecError(path + ".cuts: the second cut must come after the first, with the server's stages between");
  } else {
    if (a.contains("cuts")) throw SpecError(path + ".cuts: only the ushaped variant takes cuts; use cut");
    if (!a.contains("cut")) throw SpecError(path + ".cut: the " + variant + " variant needs cut, one of " + known);
    check_stage("cut", a.at("cut").get<std::string>());
  }
  if (a.contains("server_halves") && variant != "splitfed")
    throw SpecError(path + ".server_halves: only the splitfed variant keeps server halves per client or shared");
  if (variant == "splitfed" && !a.contains("server_halves")) a["server_halves"] = "per_client";
  if (!a.contains("partition")) a["partition"] = json::object();
  validate_and_fill(a["partition"], federated_fields()[4], path + ".partition");
  if (!a.contains("processes")) {
    const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
    a["processes"] = variant == "splitfed" ? std::min(cores, clients) : int64_t{1};
  }
  if (a.at("processes").get<int64_t>() > clients)
    throw SpecError(path + ".processes: expected at most clients (" + std::to_string(clients) + "), got " +
                    std::to_string(a.at("processes").get<int64_t>()) + "; a pool process without clients idles");
  if (!a.contains("step_timeout_s")) a["step_timeout_s"] = 600.0;
  if (arm.train.clip_grad_norm > 0.0)
    throw SpecError(path + ".train.clip_grad_norm: the split regime does not clip (the norm spans both sides of the "
                    "cut); use 0");
  if (!a.contains("link")) a["link"] = experiment_link;
}

void check_model(const std::string& model, const std::string& path) {
  const std::vector<std::string> known = workloads::model_names();
  if (std::find(known.begin(), known.end(), model) != known.end()) return;
  std::string list;
  for (const auto& k : known) list += (list.empty() ? "\"" : ", \"") + k + "\"";
  throw SpecError(path + ": unknown model \"" + model + "\"; expected one of " + list);
}

// Images and volumes take different models (workloads::workload_model_names).
void check_model_fits(const std::string& workload, const std::string& model, const std::string& path) {
  try {
    workloads::check_workload_model(workload, model);
  } catch (const std::invalid_argument& e) {
    throw SpecError(path + ": " + e.what());
  }
}

// The volume workloads' fields: filled with their defaults on those workloads (so the
// spec as run says what ran), refused on the others; the model must fit the workload.
void check_workload(json& w, const std::string& path) {
  static const char* const kVolumeFields[] = {"volumes", "test_volumes", "volume_size", "patch"};
  const std::string name = w.at("name").get<std::string>();
  check_model_fits(name, w.at("model").get<std::string>(), path + ".model");
  if (!workloads::is_volume_workload(name)) {
    for (const char* f : kVolumeFields)
      if (w.contains(f))
        throw SpecError(path + "." + f + ": only the volume workloads take " + f + ", this one is " + name);
    return;
  }
  for (const char* f : {"train_samples", "test_samples"})
    if (w.at(f).get<int64_t>() != 0)
      throw SpecError(path + "." + f + ": " + name + " counts volumes; use volumes and test_volumes");
  if (name == "msd-folder") {
    // Real data: the folder says how many volumes there are and how large; volumes, when
    // given, takes the first ones (the workload checks it against the folder).
    if (w.contains("volume_size"))
      throw SpecError(path + ".volume_size: msd-folder's volumes keep their own sizes; only the phantom workloads "
                      "take volume_size");
    if (w.at("data_dir").get<std::string>().empty())
      throw SpecError(path + ".data_dir: msd-folder needs the dataset's folder (dataset.json, imagesTr/, labelsTr/)");
    if (!w.contains("test_volumes")) w["test_volumes"] = 4;
    if (!w.contains("patch")) w["patch"] = 32;
    if (w.contains("volumes") && w.at("test_volumes").get<int64_t>() >= w.at("volumes").get<int64_t>())
      throw SpecError(path + ".test_volumes: expected fewer than volumes (" + w.at("volumes").dump() + "), got " +
                      w.at("test_volumes").dump() + "; some must be left to train on");
    if (w.at("model") == "unet3d" && w.at("patch").get<int64_t>() % 4 != 0)
      throw SpecError(path + ".patch: unet3d pools twice, so the patch must be a multiple of 4, got " +
                      w.at("patch").dump());
    return;
  }
  if (!w.contains("volumes")) w["volumes"] = 20;
  if (!w.contains("test_volumes")) w["test_volumes"] = 4;
  if (!w.contains("volume_size")) w["volume_size"] = 32;
  if (!w.contains("patch")) w["patch"] = std::min<int64_t>(32, w.at("volume_size").get<int64_t>());
  const int64_t volumes = w.at("volumes").get<int64_t>(), size = w.at("volume_size").get<int64_t>();
  if (volumes > 10000) throw SpecError(path + ".volumes: expected at most 10000, got " + std::to_string(volumes));
  if (w.at("test_volumes").get<int64_t>() >= volumes)
    throw SpecError(path + ".test_volumes: expected fewer than volumes (" + std::to_string(volumes) + "), got " +
                    std::to_string(w.at("test_volumes").get<int64_t>()) + "; some must be left to train on");
  if (volumes * size * size * size > (int64_t{1} << 30))
    throw SpecError(path + ".volumes: " + std::to_string(volumes) + " volumes of " + std::to_string(size) +
                    "^3 voxels exceed 2^30 voxels in all");
  const int64_t patch = w.at("patch").get<int64_t>();
  if (patch > size)
    throw SpecError(path + ".patch: expected at most volume_size (" + std::to_string(size) + "), got " +
                    std::to_string(patch));
  if (w.at("model") == "unet3d" && patch % 4 != 0)
    throw SpecError(path + ".patch: unet3d pools twice, so the patch must be a multiple of 4, got " +
                    std::to_string(patch));
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
  check_model(spec.workload.model, "spec.workload.model");
  check_workload(j.at("workload"), "spec.workload");
  if (workloads::is_volume_workload(spec.workload.name)) {
    spec.workload.volumes = w.value("volumes", int64_t{0});  // msd-folder without it: all
    spec.workload.test_volumes = w.at("test_volumes").get<int64_t>();
    spec.workload.volume_size = w.value("volume_size", int64_t{0});
    spec.workload.patch = w.at("patch").get<int64_t>();
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
    arm.model = a.value("model", spec.workload.model);
    check_model(arm.model, path + ".model");
    check_model_fits(spec.workload.name, arm.model, path + ".model");
    if (a.contains("patch")) {
      arm.patch = a.at("patch").get<int64_t>();
      if (!workloads::is_volume_workload(spec.workload.name))
        throw SpecError(path + ".patch: only the volume workloads take patch, this one is " + spec.workload.name);
      if (spec.workload.volume_size > 0 && arm.patch > spec.workload.volume_size)
        throw SpecError(path + ".patch: expected at most volume_size (" + std::to_string(spec.workload.volume_size) +
                        "), got " + std::to_string(arm.patch));
      if (arm.model == "unet3d" && arm.patch % 4 != 0)
        throw SpecError(path + ".patch: unet3d pools twice, so the patch must be a multiple of 4, got " +
                        std::to_string(arm.patch));
    }

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
    if (a.contains("micro_batches") && arm.regime != "accumulate" && arm.regime != "data_parallel")
      throw SpecError(path + ".micro_batches: only the accumulate and data_parallel regimes take micro_batches, "
                      "this arm is " + arm.regime);
    if (arm.train.batch % arm.micro_batches != 0)
      throw SpecError(path + ".micro_batches: " + std::to_string(arm.micro_batches) + " does not divide the batch " +
                      std::to_string(arm.train.batch) + "; batches must split evenly");
    check_data_parallel(a, path, arm);
    arm.threads = static_cast<int>(a.contains("threads") ? a.at("threads").get<int64_t>() : j.at("threads").get<int64_t>());
    arm.device = a.contains("device") ? a.at("device").get<std::string>() : j.at("device").get<std::string>();
    if (arm.device != "cpu")
      throw SpecError(path + ".device: \"" + arm.device +
                      "\" is not available: this build of Quartet trains on \"cpu\" only (no CUDA backend)");
    check_federated(a, arm.regime, j.at("link"), path);
    check_split(a, arm.regime, arm, arm.model, j.at("link"), path);
    if (a.contains("remote")) {
      trainers::TrainConfig rc;
      rc.arm_settings = a;
      rc.ranks = arm.ranks;
      const std::vector<std::string> roles = trainers::make_regime(arm.regime)->roles(rc);
      for (const json& r : a.at("remote")) {
        const std::string role = r.get<std::string>();
        if (std::find(roles.begin(), roles.end(), role) == roles.end()) {
          std::string known;
          for (const auto& k : roles) known += (known.empty() ? "\"" : ", \"") + k + "\"";
          throw SpecError(path + ".remote: \"" + role + "\" is not a role of the " + arm.regime +
                          " regime; its roles are " + known);
        }
        arm.remote.push_back(role);
      }
      if (arm.backend == "shm" && !arm.remote.empty())
        throw SpecError(path + ".remote: backend \"shm\" needs every rank on this host; ranks on other hosts "
                        "need \"gloo\"");
    }
    spec.arms.push_back(std::move(arm));
  }
  spec.json = std::move(j);
  return spec;
}

json read_spec_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SpecError(path + ": cannot open the experiment file");
  std::stringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str(), nullptr, true, /*ignore_comments=*/true);
  } catch (const json::parse_error& e) {
    throw SpecError(path + ": not valid JSON: " + e.what());
  }
}

ExperimentSpec load_spec_file(const std::string& path) {
  json j = read_spec_json(path);
  try {
    return parse_spec(std::move(j));
  } catch (const SpecError& e) {
    throw SpecError(path + ": " + e.what());
  }
}

}  // namespace quartet::experiments
