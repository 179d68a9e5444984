#include "runner/spec.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "engine/threads.h"
#include "medical3d/inference.h"
#include "medical3d/phantom.h"
#include "transport/link.h"
#include "workloads/models.h"
#include "workloads/onnx/model.h"
#include "workloads/workload.h"

namespace quartet::runner {
namespace {

using nlohmann::json;
using trainers::Field;
using trainers::FieldType;
using trainers::field;

Field link_field() {
  return field("link", FieldType::string, "emulated link for Asio traffic (transport/link.h presets)")
      .allowed(transport::link_profile_names());
}

Field threads_field() {
  return field("threads", FieldType::integer,
               "compute threads per process; 0: cores / processes of the arm, fewer when other work keeps cores busy "
               "as the arm starts")
      .at_least(0)
      .at_most(engine::kMaxComputeThreads);
}

Field device_field() { return field("device", FieldType::string, "\"cpu\" or \"cuda:N\""); }

Field override_limits_field() {
  return field("override_limits", FieldType::boolean,
               "start more role processes, compute threads or virtual clients than this machine's limits allow "
               "(derived from its cores and ulimit -u; a refused spec names them)");
}

Field train_field(const std::string& description) {
  return field("train", FieldType::object, description).with_fields(trainers::TrainConfig::table().fields());
}

// The workloads of volumes (or of images): the workload fields that apply to them alone
// say so (Field::applies_when), so an editor shows them only there.
std::vector<std::string> workloads_of(bool volumes) {
  std::vector<std::string> out;
  for (const std::string& w : workloads::workload_names())
    if (workloads::is_volume_workload(w) == volumes) out.push_back(w);
  return out;
}

Field workload_field() {
  const std::vector<std::string> phantoms = {"phantom-ct-seg", "phantom-mri-seg"};
  return field("workload", FieldType::object, "dataset, model, loss and metric")
      .needed()
      .with_fields({
          field("name", FieldType::string, "the workload (quartet list workloads)")
              .allowed(workloads::workload_names())
              .needed(),
          field("model", FieldType::string, "the model (quartet list models)").needed().names_a("model"),
          field("model_made_by", FieldType::string,
                "an onnx: model's file is written by this command: named when the file is missing")
              .defaults_to(""),
          field("data_dir", FieldType::string,
                "dataset folder (text-lm: a folder of fortune files); empty: the workload's default")
              .defaults_to("")
              .applies_when("name", {"fashion-mnist", "msd-folder", "text-lm"}),
          field("train_samples", FieldType::integer, "use only the first N training samples; 0: all")
              .at_least(0)
              .defaults_to(0)
              .applies_when("name", workloads_of(false)),
          field("test_samples", FieldType::integer, "evaluate on the first N test samples; 0: all")
              .at_least(0)
              .defaults_to(0)
              .applies_when("name", workloads_of(false)),
          field("volumes", FieldType::integer,
                "phantom workloads: phantoms made from the seed, the test ones included; default 20. msd-folder: use "
                "the first N cases; default all")
              .at_least(2)
              .applies_when("name", workloads_of(true)),
          field("test_volumes", FieldType::integer,
                "volume workloads: the last ones, held out for the metric; default 4")
              .at_least(1)
              .defaults_elsewhere_to(4)
              .applies_when("name", workloads_of(true)),
          field("volume_size", FieldType::integer, "phantom workloads: voxels per side of each volume; default 32")
              .at_least(32)
              .defaults_elsewhere_to(32)
              .at_most(256)
              .applies_when("name", phantoms),
          field("patch", FieldType::integer,
                "volume workloads: voxels per side of a training patch and of an inference window; default 32")
              .at_least(1)
              .defaults_elsewhere_to(32)
              .applies_when("name", workloads_of(true)),
          field("scanners", FieldType::integer,
                "phantom workloads: scanners the volumes are acquired on, volume i on scanner i mod scanners, each "
                "with its own noise, calibration and blur (docs/medical3d.md); default 1, the reference scanner")
              .at_least(1)
              .defaults_elsewhere_to(1)
              .at_most(medical3d::kPhantomScanners)
              .applies_when("name", phantoms),
      });
}

// The fields every arm has, whatever its regime. Open: the regime's own fields are
// checked against its table (parse_arm).
Field arm_field() {
  Field remote = field("remote", FieldType::array,
                       "roles this run does not start: they join from other hosts with quartet role --coordinator")
                     .of(field("role", FieldType::string, "a role of the arm's regime"));
  // Merged over the experiment's train object, then checked whole (parse_arm).
  Field arm_train = field("train", FieldType::object, "overrides of the experiment's train fields for this arm");
  arm_train.open = true;
  Field arm = field("arm", FieldType::object, "one regime and its settings")
                  .with_fields({
                      field("name", FieldType::string, "the arm's name: a folder name in the run").needed(),
                      field("regime", FieldType::string, "how the model is trained")
                          .allowed(trainers::regime_names())
                          .needed(),
                      field("model", FieldType::string,
                            "the model this arm trains (quartet list models); default: workload.model")
                          .names_a("model"),
                      field("patch", FieldType::integer,
                            "volume workloads: this arm's patch and inference window, voxels per side (memory "
                            "against size); default: workload.patch")
                          .at_least(1)
                          .applies_when("/workload/name", workloads_of(true)),
                      arm_train,
                      threads_field(),
                      device_field(),
                      remote,
                      link_field(),
                      override_limits_field(),
                  });
  arm.open = true;
  return arm;
}

Field make_schema() {
  Field train = train_field("training settings").needed();
  Field arms = field("arms", FieldType::array, "the arms, run one after another").needed().at_least(1).of(arm_field());
  Field root = field("spec", FieldType::object, "a Quartet experiment");
  root.fields = {
      field("name", FieldType::string, "the experiment's name").needed(),
      workload_field(),
      field("seed", FieldType::integer, "seed of the initial weights, shuffling and partitions").at_least(0).defaults_to(1),
      field("repeats", FieldType::integer,
            "runs of every arm, one after another; repeat k uses seed + k - 1, and the summary and the report give "
            "each figure's mean and 95 % interval over them (docs/results.md)")
          .at_least(1)
          .at_most(kMaxRepeats)
          .defaults_to(1),
      threads_field().defaults_to(0),
      device_field().defaults_to("cpu"),
      link_field().defaults_to("loopback"),
      override_limits_field().defaults_to(false),
      train,
      arms,
  };
  return root;
}

bool safe_folder_name(const std::string& s) {
  if (s.empty() || s == "." || s == ".." || s.size() > 64) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
  return true;
}

// made_by: the command that writes an onnx: model's file (spec.workload.model_made_by),
// named when the file is not there yet; empty: none known.
void check_model(const std::string& model, const std::string& path, const std::string& made_by = "") {
  if (workloads::onnx::is_onnx_model(model)) {  // read, checked and compiled: what it cannot run is refused here
    const std::filesystem::path file = model.substr(std::strlen(workloads::onnx::kPrefix));
    if (!made_by.empty() && !std::filesystem::exists(file))
      throw SpecError(path + ": model " + model + ": no such file; it is written by `" + made_by + "`: run that first");
    try {
      workloads::check_model_name(model);
    } catch (const std::invalid_argument& e) {
      throw SpecError(path + ": " + e.what());
    }
    return;
  }
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
void check_workload(json& w, const std::string& path, const std::optional<trainers::MachineLimits>& limits) {
  static const char* const kVolumeFields[] = {"volumes", "test_volumes", "volume_size", "patch", "scanners"};
  const std::string name = w.at("name").get<std::string>();
  check_model_fits(name, w.at("model").get<std::string>(), path + ".model");
  if (!workloads::is_volume_workload(name)) {
    for (const char* f : kVolumeFields)
      if (w.contains(f))
        throw SpecError(path + "." + f + ": only the volume workloads take " + f + ", this one is " + name);
    if (name == "synthetic" && limits) {  // every sample is made up front: 28x28 bytes and a label
      const workloads::WorkloadConfig defaults;
      const int64_t train = w.at("train_samples").get<int64_t>(), test = w.at("test_samples").get<int64_t>();
      const int64_t samples = (train > 0 ? train : defaults.synthetic_train) + (test > 0 ? test : defaults.synthetic_test);
      constexpr int64_t kSampleBytes = 28 * 28 + 4;
      const int64_t bytes = samples > INT64_MAX / kSampleBytes ? INT64_MAX : samples * kSampleBytes;
      trainers::check_limit(path + ".train_samples", bytes, limits->memory,
                            "bytes of synthetic samples (" + std::to_string(samples) + " of " +
                                std::to_string(kSampleBytes) + " bytes each, made up front)",
                            limits->basis + ", half its memory");
    }
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
    if (w.contains("scanners"))
      throw SpecError(path + ".scanners: msd-folder's volumes come from their own scanners; only the phantom "
                      "workloads take scanners");
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
  if (!w.contains("scanners")) w["scanners"] = 1;
  if (!w.contains("patch")) w["patch"] = std::min<int64_t>(32, w.at("volume_size").get<int64_t>());
  const int64_t volumes = w.at("volumes").get<int64_t>(), size = w.at("volume_size").get<int64_t>();
  if (volumes > 10000) throw SpecError(path + ".volumes: expected at most 10000, got " + std::to_string(volumes));
  if (w.at("test_volumes").get<int64_t>() >= volumes)
    throw SpecError(path + ".test_volumes: expected fewer than volumes (" + std::to_string(volumes) + "), got " +
                    std::to_string(w.at("test_volumes").get<int64_t>()) + "; some must be left to train on");
  if (volumes * size * size * size > (int64_t{1} << 30))
    throw SpecError(path + ".volumes: " + std::to_string(volumes) + " volumes of " + std::to_string(size) +
                    "^3 voxels exceed 2^30 voxels in all");
  if (limits)  // every phantom is made up front: a float image and a label a voxel
    trainers::check_limit(path + ".volumes", volumes * size * size * size * 8, limits->memory,
                          "bytes of phantoms (" + std::to_string(volumes) + " of " + std::to_string(size) +
                              "^3 voxels, 8 bytes each)",
                          limits->basis + ", half its memory");
  const int64_t patch = w.at("patch").get<int64_t>();
  if (patch > size)
    throw SpecError(path + ".patch: expected at most volume_size (" + std::to_string(size) + "), got " +
                    std::to_string(patch));
  if (w.at("model") == "unet3d" && patch % 4 != 0)
    throw SpecError(path + ".patch: unet3d pools twice, so the patch must be a multiple of 4, got " +
                    std::to_string(patch));
}

// An arm (as run) whose partition is by scanner: the workload must have scanners to deal,
// at least one per client, each client's first scanner with a training volume.
void check_scanner_partition(const json& a, const WorkloadSpec& w, const std::string& path) {
  if (!a.contains("partition") || a.at("partition").value("kind", "") != "scanner") return;
  if (!workloads::is_volume_workload(w.name))
    throw SpecError(path + ".partition.kind: scanner splits a volume workload's volumes by the scanner that "
                    "acquired them; " + w.name + " has no volumes (use iid, dirichlet or shards)");
  const int64_t clients = a.at("clients").get<int64_t>();
  if (clients > w.scanners)
    throw SpecError(path + ".clients: the scanner partition gives each client whole scanners (scanner s to client s "
                    "mod clients), so at most workload.scanners (" + std::to_string(w.scanners) + "), got " +
                    std::to_string(clients) + "; raise workload.scanners or lower clients");
  const int64_t train = w.volumes - w.test_volumes;
  if (w.volumes > 0 && clients > train)
    throw SpecError(path + ".clients: with the scanner partition client k holds training volumes of scanner k, and "
                    "there are " + std::to_string(train) + " training volumes for " + std::to_string(clients) +
                    " clients; raise workload.volumes");
}

// The regimes that take a field of an arm, by name.
std::vector<std::string> regimes_taking(const std::string& key) {
  std::vector<std::string> out;
  for (const trainers::Regime* r : trainers::regime_table())
    for (const Field& f : r->fields())
      if (f.name == key) out.emplace_back(r->name());
  return out;
}

// Splits an arm's keys into the common ones (checked by the schema) and the regime's
// own, refusing a key that is neither, with the regimes that would take it.
json regime_fields_of(const json& a, const trainers::Regime& regime, const std::string& path) {
  static const Field common = arm_field();
  json own = json::object();
  for (const auto& [key, value] : a.items()) {
    if (std::any_of(common.fields.begin(), common.fields.end(), [&](const Field& f) { return f.name == key; }))
      continue;
    const auto& mine = regime.fields();
    if (std::any_of(mine.begin(), mine.end(), [&](const Field& f) { return f.name == key; })) {
      own[key] = value;
      continue;
    }
    const std::vector<std::string> takers = regimes_taking(key);
    if (!takers.empty())
      throw SpecError(path + "." + key + ": only the " + trainers::joined_words(takers) +
                      (takers.size() == 1 ? " regime takes " : " regimes take ") + key + ", this arm is " +
                      std::string(regime.name()));
    std::string names;
    for (const Field& f : common.fields) names += (names.empty() ? "" : ", ") + f.name;
    for (const Field& f : mine) names += ", " + f.name;
    throw SpecError(path + ": unknown field \"" + key + "\"; allowed fields: " + names);
  }
  return own;
}

engine::Device arm_device(const std::string& text, const std::string& path) {
  engine::Device device;
  try {
    device = engine::Device::parse(text);
  } catch (const std::invalid_argument& e) {
    throw SpecError(path + ": " + e.what());
  }
  if (!engine::device_available(device)) throw SpecError(path + ": " + engine::device_unavailable_reason(device));
  return device;
}

// What a forward pass of unet3d without gradients holds a window voxel at its peak: its
// full-resolution activations (1000 windows of 32^3 held 7.3 GB, about 220 bytes a voxel).
constexpr int64_t kInferenceBytesPerWindowVoxel = 256;

// A phantom arm's evaluation: eval_batch windows of the test volumes a pass, and the test
// volumes' logits and window counts (4 bytes a class and 4 a voxel), beside the phantoms
// (8 bytes a voxel, made up front by each of the arm's `processes`), must fit the memory
// a workload may take. 2 phantoms of 256^3 with the default eval_batch of 1000 windows
// validated, then held 7.3 GB in one process. Refused naming eval_batch, with the most
// that fits.
void check_phantom_evaluation(const ArmSpec& arm, const WorkloadSpec& w, int64_t processes,
                              const std::string& eval_batch_path, const trainers::MachineLimits& limits) {
  const int64_t patch = arm.patch > 0 ? arm.patch : w.patch;
  const int64_t per_axis = static_cast<int64_t>(medical3d::window_starts(w.volume_size, patch, 0.5).size());
  const int64_t windows = w.test_volumes * per_axis * per_axis * per_axis;
  const int64_t per_window = patch * patch * patch * kInferenceBytesPerWindowVoxel;
  const int64_t voxels = w.volume_size * w.volume_size * w.volume_size;
  const int64_t phantoms = std::max<int64_t>(1, processes) * w.volumes * voxels * 8 +
                           w.test_volumes * voxels * 4 * (medical3d::kPhantomClasses + 1);
  const int64_t batch = std::min(arm.train.eval_batch, windows);
  if (phantoms + batch * per_window <= limits.memory) return;
  const int64_t fits = std::max<int64_t>(0, (limits.memory - phantoms) / per_window);
  throw SpecError(eval_batch_path + ": " + std::to_string(batch) + " windows of " + std::to_string(patch) +
                  "^3 voxels a forward pass (of the " + std::to_string(windows) + " the test volumes hold) take " +
                  std::to_string((batch * per_window) >> 20) + " MiB beside " + std::to_string(phantoms >> 20) +
                  " MiB of phantoms and logits, more than " + std::to_string(limits.memory >> 20) + " MiB (" + limits.basis +
                  ", half its memory); allowed: " +
                  (fits > 0 ? "eval_batch at most " + std::to_string(fits) : std::string("a smaller volume_size")) +
                  " here, or \"override_limits\": true");
}

// Accuracy and Dice lie in [0, 1]; bits per character have no ceiling.
void check_target(const trainers::TrainConfig& train, const std::string& workload, const std::string& path) {
  const std::string metric = workloads::workload_metric(workload);
  if (train.target && workloads::higher_is_better(metric) && *train.target > 1.0)
    throw SpecError(path + ": " + workload + "'s metric (" + metric + ") lies in [0, 1]; expected a target in (0, 1], "
                    "got " + json(*train.target).dump());
}

// One arm: its common fields, its train settings (the experiment's patched by its own),
// then its regime's fields parsed by the regime; `a` is rewritten as run.
ArmSpec parse_arm(json& a, const json& spec, const WorkloadSpec& workload, const std::string& path,
                  bool machine_limits) {
  ArmSpec arm;
  arm.name = a.at("name").get<std::string>();
  if (!safe_folder_name(arm.name))
    throw SpecError(path + ".name: expected letters, digits, '-', '_' or '.' (at most 64), got \"" + arm.name + "\"");
  arm.regime = a.at("regime").get<std::string>();
  const trainers::Regime& regime = trainers::find_regime(arm.regime);
  json own = regime_fields_of(a, regime, path);
  arm.model = a.value("model", workload.model);
  check_model(arm.model, path + ".model");
  check_model_fits(workload.name, arm.model, path + ".model");
  if (a.contains("patch")) {
    arm.patch = a.at("patch").get<int64_t>();
    if (!workloads::is_volume_workload(workload.name))
      throw SpecError(path + ".patch: only the volume workloads take patch, this one is " + workload.name);
    if (workload.volume_size > 0 && arm.patch > workload.volume_size)
      throw SpecError(path + ".patch: expected at most volume_size (" + std::to_string(workload.volume_size) +
                      "), got " + std::to_string(arm.patch));
    if (arm.model == "unet3d" && arm.patch % 4 != 0)
      throw SpecError(path + ".patch: unet3d pools twice, so the patch must be a multiple of 4, got " +
                      std::to_string(arm.patch));
  }

  const std::string eval_batch_path = a.contains("train") && a.at("train").contains("eval_batch")
                                          ? path + ".train.eval_batch"
                                          : "spec.train.eval_batch";
  json train = spec.at("train");
  if (a.contains("train")) train.merge_patch(a.at("train"));
  arm.train = trainers::TrainConfig::parse(train, path + ".train");
  arm.train.seed = spec.at("seed").get<uint64_t>();
  check_target(arm.train, workload.name, a.contains("train") && a.at("train").contains("target")
                                             ? path + ".train.target"
                                             : "spec.train.target");
  a["train"] = train;

  std::optional<trainers::MachineLimits> limits;
  if (machine_limits && !a.value("override_limits", spec.at("override_limits").get<bool>()))
    limits = trainers::MachineLimits::of_this_machine();
  const int64_t threads = a.value("threads", spec.at("threads").get<int64_t>());
  if (limits)  // named where it was written: the arm's field or the experiment's
    trainers::check_limit(a.contains("threads") ? path + ".threads" : "spec.threads", threads, limits->threads,
                          "compute threads per process", limits->basis);
  arm.threads = static_cast<int>(threads);
  // An arm without its own device takes the experiment's: errors name the field written.
  arm.device = a.contains("device") ? arm_device(a.at("device").get<std::string>(), path + ".device")
                                    : arm_device(spec.at("device").get<std::string>(), "spec.device");
  arm.link = a.value("link", spec.at("link").get<std::string>());
  a["link"] = arm.link;
  if (a.contains("remote"))
    for (const json& r : a.at("remote")) arm.remote.push_back(r.get<std::string>());

  trainers::ArmFacts facts;
  facts.path = path;
  facts.train = arm.train;
  facts.model = arm.model;
  facts.stages = workloads::model_info(arm.model).stages;
  facts.device = arm.device;
  facts.remote = arm.remote;
  facts.cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  facts.limits = limits;
  arm.settings = regime.parse(std::move(own), facts);
  const json as_run = regime.to_json(*arm.settings);
  for (const auto& [key, value] : as_run.items()) a[key] = value;

  const std::vector<std::string> roles = regime.roles(*arm.settings);
  if (limits && workloads::is_volume_workload(workload.name) && workload.name != "msd-folder")
    check_phantom_evaluation(arm, workload, static_cast<int64_t>(roles.size() - arm.remote.size()), eval_batch_path,
                             *limits);
  for (const std::string& role : arm.remote)
    if (std::find(roles.begin(), roles.end(), role) == roles.end()) {
      std::string known;
      for (const auto& k : roles) known += (known.empty() ? "\"" : ", \"") + k + "\"";
      throw SpecError(path + ".remote: \"" + role + "\" is not a role of the " + arm.regime + " regime; its roles are " +
                      known);
    }
  return arm;
}

}  // namespace

const trainers::Field& spec_schema() {
  static const Field schema = make_schema();
  return schema;
}

json spec_json_schema() {
  json s = trainers::to_json_schema(spec_schema(), "Quartet experiment");
  json& arm = s["properties"]["arms"]["items"];
  // Each regime's own fields apply when the arm names it; any other key is refused.
  arm.erase("additionalProperties");
  json branches = json::array();
  for (const trainers::Regime* r : trainers::regime_table()) {
    trainers::Field own = trainers::field("", FieldType::object, std::string(r->summary())).with_fields(r->fields());
    json then = trainers::schema_of(own);
    then.erase("type");
    then.erase("additionalProperties");
    json condition = {{"properties", {{"regime", {{"const", std::string(r->name())}}}}}, {"required", {"regime"}}};
    branches.push_back({{"if", condition}, {"then", then}});
  }
  arm["allOf"] = branches;
  arm["unevaluatedProperties"] = false;
  return s;
}

std::string spec_markdown() {
  using trainers::Field;
  const Field& root = spec_schema();
  std::vector<Field> experiment, arm_fields;
  for (const Field& f : root.fields)
    if (f.name != "arms") experiment.push_back(f);
  for (const Field& f : root.fields)
    if (f.name == "arms") arm_fields = f.items[0].fields;
  std::string out = "### The experiment\n\n" + trainers::to_markdown_table(experiment);
  out += "\n### Every arm\n\n" + trainers::to_markdown_table(arm_fields, "arms[].");
  for (const trainers::Regime* r : trainers::regime_table()) {
    out += "\n### `" + std::string(r->name()) + "` arms\n\n" + std::string(r->summary()) + ".\n\n";
    out += r->fields().empty() ? std::string("No fields of its own.\n")
                               : trainers::to_markdown_table(r->fields(), "arms[].");
  }
  return out;
}

const ArmSpec& ExperimentSpec::arm(const std::string& arm_name) const {
  for (const ArmSpec& a : arms)
    if (a.name == arm_name) return a;
  throw SpecError("no arm named \"" + arm_name + "\" in experiment " + name);
}

ExperimentSpec parse_spec(json j, bool machine_limits) {
  trainers::validate_and_fill(j, spec_schema(), "spec");
  ExperimentSpec spec;
  spec.name = j.at("name").get<std::string>();
  if (!safe_folder_name(spec.name))
    throw SpecError("spec.name: expected letters, digits, '-', '_' or '.' (at most 64), got \"" + spec.name + "\"");
  spec.seed = j.at("seed").get<uint64_t>();
  const json& w = j.at("workload");
  spec.workload = {w.at("name").get<std::string>(), w.at("model").get<std::string>(),
                   w.at("data_dir").get<std::string>(), w.at("train_samples").get<int64_t>(),
                   w.at("test_samples").get<int64_t>()};
  check_model(spec.workload.model, "spec.workload.model", w.at("model_made_by").get<std::string>());
  std::optional<trainers::MachineLimits> limits;
  if (machine_limits && !j.at("override_limits").get<bool>()) limits = trainers::MachineLimits::of_this_machine();
  check_workload(j.at("workload"), "spec.workload", limits);
  if (workloads::is_volume_workload(spec.workload.name)) {
    spec.workload.volumes = w.value("volumes", int64_t{0});  // msd-folder without it: all
    spec.workload.test_volumes = w.at("test_volumes").get<int64_t>();
    spec.workload.volume_size = w.value("volume_size", int64_t{0});
    spec.workload.patch = w.at("patch").get<int64_t>();
    spec.workload.scanners = w.value("scanners", int64_t{1});
  }
  // The experiment's own train settings are checked whole even where every arm overrides them.
  {
    json train = j.at("train");
    trainers::TrainConfig::parse(train, "spec.train");
    j["train"] = train;
  }

  std::set<std::string> seen;
  json& arms = j.at("arms");
  for (size_t i = 0; i < arms.size(); ++i) {
    const std::string path = "spec.arms[" + std::to_string(i) + "]";
    ArmSpec arm = parse_arm(arms[i], j, spec.workload, path, machine_limits);
    check_scanner_partition(arms[i], spec.workload, path);
    if (!seen.insert(arm.name).second) throw SpecError(path + ".name: \"" + arm.name + "\" is used by another arm");
    spec.arms.push_back(std::move(arm));
  }
  spec.repeats = static_cast<int>(j.at("repeats").get<int64_t>());
  for (size_t i = 0; i < spec.arms.size() && spec.repeats > 1; ++i) {
    if (spec.arms[i].name == "repeats")
      throw SpecError("spec.arms[" + std::to_string(i) + "].name: \"repeats\" is the folder of the run's repeats "
                      "(spec.repeats " + std::to_string(spec.repeats) + "); choose another name");
    if (!spec.arms[i].remote.empty())
      throw SpecError("spec.repeats: " + std::to_string(spec.repeats) + " with remote roles (spec.arms[" +
                      std::to_string(i) + "].remote): repeats run on this machine only; use repeats 1, or run the "
                      "experiment again with another seed");
  }
  spec.json = std::move(j);
  return spec;
}

std::string json_error_text(const json::exception& e) {
  std::string text = e.what();
  if (text.rfind("[json.exception.", 0) == 0) {
    const size_t end = text.find("] ");
    if (end != std::string::npos) text.erase(0, end + 2);
  }
  for (const char* lead : {"parse error at ", "parse error: "})
    if (text.rfind(lead, 0) == 0) text.erase(0, std::string(lead).size());
  return text;
}

json read_spec_json(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw SpecError(path + ": a folder, not an experiment file (a run folder continues with quartet run --resume " +
                    path + ")");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SpecError(path + ": cannot open the experiment file");
  std::stringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str(), nullptr, true, /*ignore_comments=*/true);
  } catch (const json::parse_error& e) {
    throw SpecError(path + ": not valid JSON: " + json_error_text(e));
  }
}

// "onnx:PATH" models with a relative PATH are read from the spec's folder: made absolute
// here, so the spec as run names the file wherever it runs from.
void resolve_onnx_paths(json& j, const std::string& spec_path) {
  const std::filesystem::path folder = std::filesystem::absolute(spec_path).parent_path();
  auto resolve = [&](json& holder) {
    if (!holder.is_object() || !holder.contains("model") || !holder["model"].is_string()) return;
    const std::string model = holder["model"].get<std::string>();
    if (!workloads::onnx::is_onnx_model(model)) return;
    const std::filesystem::path file = model.substr(std::strlen(workloads::onnx::kPrefix));
    if (file.is_relative()) holder["model"] = workloads::onnx::kPrefix + (folder / file).lexically_normal().string();
  };
  if (j.contains("workload")) resolve(j["workload"]);
  if (j.contains("arms") && j["arms"].is_array())
    for (json& arm : j["arms"]) resolve(arm);
}

ExperimentSpec load_spec_file(const std::string& path) {
  json j = read_spec_json(path);
  if (j.is_object()) resolve_onnx_paths(j, path);
  try {
    return parse_spec(std::move(j));
  } catch (const SpecError& e) {
    throw SpecError(path + ": " + e.what());
  }
}

}  // namespace quartet::runner
