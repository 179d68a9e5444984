#include "workloads/workload.h"

#include <algorithm>
#include <stdexcept>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "workloads/idx.h"
#include "workloads/models.h"
#include "workloads/onnx/model.h"
#include "workloads/segmentation.h"
#include "workloads/synthetic.h"
#include "workloads/text.h"

namespace quartet::workloads {
namespace {

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::vector<std::string> image_models() {
  std::vector<std::string> out;
  for (const auto& m : model_names())
    if (model_task(m) == kImageClassification) out.push_back(m);
  return out;
}

}  // namespace

ImageClassificationWorkload::ImageClassificationWorkload(std::string name, DatasetSplits data,
                                                         std::string default_model)
    : name_(std::move(name)), data_(std::move(data)), default_model_(std::move(default_model)) {
  check_model_name(default_model_);
  if (model_task(default_model_) != kImageClassification)
    throw std::invalid_argument("workload " + name_ + ": " + default_model_ + " does not classify images; models " +
                                "that do: " + join(image_models()));
  for (const ImageDataset* d : {&data_.train, &data_.test})
    if (d->channels() != 1 || d->height() != 28 || d->width() != 28 || d->num_classes() > 10)
      throw std::invalid_argument("workload " + name_ + ": the 2D models take 1x28x28 images of up to 10 classes, got " +
                                  std::to_string(d->channels()) + "x" + std::to_string(d->height()) + "x" +
                                  std::to_string(d->width()) + " with " + std::to_string(d->num_classes()) +
                                  " classes");
}

std::vector<std::string> ImageClassificationWorkload::model_names() const { return image_models(); }

std::shared_ptr<engine::Model> ImageClassificationWorkload::make_model(const std::string& model_name,
                                                                       uint64_t seed) const {
  return workloads::make_model(model_name, seed);
}

Batch ImageClassificationWorkload::train_batch(const std::vector<int64_t>& indices, int64_t) const {
  return gather(data_.train, indices);
}

engine::Tensor ImageClassificationWorkload::loss(const engine::Tensor& logits,
                                                 const std::vector<int32_t>& labels) const {
  return engine::cross_entropy(logits, labels);
}

int64_t count_correct(const engine::Tensor& logits, const std::vector<int32_t>& labels) {
  if (logits.dim() != 2 || logits.size(0) != static_cast<int64_t>(labels.size()))
    throw std::invalid_argument("count_correct: logits " + engine::shape_str(logits.shape()) + " for " +
                                std::to_string(labels.size()) + " labels; expected (N, classes)");
  const int64_t n = logits.size(0), k = logits.size(1);
  const float* p = logits.data();
  int64_t correct = 0;
  for (int64_t r = 0; r < n; ++r) {
    int64_t best = 0;
    for (int64_t c = 1; c < k; ++c)
      if (p[r * k + c] > p[r * k + best]) best = c;
    correct += best == labels[static_cast<size_t>(r)];
  }
  return correct;
}

double ImageClassificationWorkload::evaluate(engine::Model& model, const ImageDataset& data, int64_t batch) const {
  if (batch < 1) throw std::invalid_argument("evaluation batch: expected >= 1, got " + std::to_string(batch));
  if (data.empty()) throw std::invalid_argument("evaluate: the dataset is empty");
  const bool was_training = model.training();
  model.eval();
  engine::NoGradScope no_grad;
  int64_t correct = 0;
  try {
    for (int64_t begin = 0; begin < data.size(); begin += batch) {
      const Batch b = gather_range(data, begin, std::min(data.size(), begin + batch));
      correct += count_correct(model.forward(b.x.to(model.device())).to(engine::Device::cpu()), b.y);
    }
  } catch (...) {
    model.train(was_training);
    throw;
  }
  model.train(was_training);
  return static_cast<double>(correct) / static_cast<double>(data.size());
}

std::vector<std::string> workload_names() {
  return {"fashion-mnist", "synthetic", "phantom-ct-seg", "phantom-mri-seg", "msd-folder", "text-lm"};
}

bool higher_is_better(const std::string& metric) { return metric != "bpc"; }

std::string workload_metric(const std::string& workload) {
  const auto known = workload_names();
  if (std::find(known.begin(), known.end(), workload) == known.end())
    throw std::invalid_argument("unknown workload \"" + workload + "\"; known workloads: " + join(known));
  return is_volume_workload(workload) ? "dice" : workload == "text-lm" ? "bpc" : "accuracy";
}

bool is_volume_workload(const std::string& workload) {
  return workload == "phantom-ct-seg" || workload == "phantom-mri-seg" || workload == "msd-folder";
}

std::vector<std::string> workload_model_names(const std::string& workload) {
  const auto known = workload_names();
  if (std::find(known.begin(), known.end(), workload) == known.end())
    throw std::invalid_argument("unknown workload \"" + workload + "\"; known workloads: " + join(known));
  const char* task = is_volume_workload(workload) ? kVolumeSegmentation
                     : workload == "text-lm"      ? kLanguageModel
                                                  : kImageClassification;
  std::vector<std::string> out;
  for (const auto& m : model_names())
    if (model_task(m) == task) out.push_back(m);
  return out;
}

void check_workload_model(const std::string& workload, const std::string& model) {
  check_model_name(model);
  if (onnx::is_onnx_model(model)) {  // an imported graph classifies images of the right size
    const auto fit = workload_model_names(workload);
    const ModelInfo info = model_info(model);
    if (fit.empty() || model_task(fit.front()) != info.task)
      throw std::invalid_argument("model " + model + " classifies images; workload " + workload + " does not");
    const engine::Shape image{1, 28, 28};
    bool fits = info.input_shape.size() == image.size() && info.num_classes == 10;
    for (size_t d = 0; fits && d < image.size(); ++d) fits = info.input_shape[d] == image[d] || info.input_shape[d] < 0;
    if (!fits)
      throw std::invalid_argument("model " + model + " takes input " + engine::shape_str(info.input_shape) +
                                  " per sample and gives " + std::to_string(info.num_classes) + " classes; workload " +
                                  workload + " has " + engine::shape_str(image) + " images of 10 classes");
    return;
  }
  const auto fit = workload_model_names(workload);
  if (std::find(fit.begin(), fit.end(), model) == fit.end())
    throw std::invalid_argument("model " + model + " does not fit workload " + workload + " (it is for " +
                                model_task(model) + "); models that do: " + join(fit));
}

Partition make_partition(const PartitionSpec& spec, const Workload& workload) {
  if (spec.kind == "scanner") return partition_scanner(workload.sample_scanners(), workload.scanners(), spec.clients);
  return make_partition(spec, workload.sample_classes(), workload.num_classes());
}

namespace {

ImageDataset first_samples(const ImageDataset& data, int64_t limit, const char* field) {
  if (limit <= 0) return data;
  if (limit > data.size())
    throw std::invalid_argument(std::string(field) + ": " + std::to_string(limit) + " samples asked, the split has " +
                                std::to_string(data.size()));
  return data.take_first(limit);
}

DatasetSplits limited(DatasetSplits d, const WorkloadConfig& config) {
  return {first_samples(d.train, config.train_limit, "train_samples"),
          first_samples(d.test, config.test_limit, "test_samples")};
}

}  // namespace

int64_t train_size_of(const WorkloadConfig& config) {
  if (config.name == "msd-folder") return msd_train_volumes(config);
  if (is_volume_workload(config.name)) return phantom_train_volumes(config);
  if (config.name == "synthetic") {
    check_model_name(config.model.empty() ? "cnn" : config.model);
    return config.train_limit > 0 ? config.train_limit : config.synthetic_train;
  }
  return make_workload(config)->train_size();
}

std::unique_ptr<Workload> make_workload(const WorkloadConfig& config) {
  if (config.name == "msd-folder") return make_msd_workload(config);
  if (is_volume_workload(config.name)) return make_phantom_workload(config);
  if (config.name == "text-lm") return make_text_workload(config);
  const std::string model = config.model.empty() ? "cnn" : config.model;
  if (config.name == "fashion-mnist") {
    check_model_name(model);  // before the data is read
    const std::string dir = config.data_dir.empty() ? kFashionMnistDir : config.data_dir;
    return std::make_unique<ImageClassificationWorkload>(config.name, limited(load_idx_folder(dir, 10), config),
                                                         model);
  }
  if (config.name == "synthetic") {
    check_model_name(model);
    SyntheticOptions opt;
    opt.train = config.train_limit > 0 ? config.train_limit : config.synthetic_train;
    opt.test = config.test_limit > 0 ? config.test_limit : config.synthetic_test;
    opt.seed = config.seed;
    return std::make_unique<ImageClassificationWorkload>(config.name, make_synthetic(opt), model);
  }
  throw std::invalid_argument("unknown workload \"" + config.name + "\"; known workloads: " + join(workload_names()));
}

}  // namespace quartet::workloads
