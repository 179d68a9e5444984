#pragma once

// A workload bundles a dataset (train and test), a model factory, a loss and a quality
// metric. Trainers see only this interface, so every regime trains and evaluates the
// same way.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/model.h"
#include "workloads/dataset.h"

namespace quartet::workloads {

struct WorkloadConfig {
  std::string name = "fashion-mnist";  // see workload_names()
  std::string model = "cnn";           // the default for make_model(seed)
  std::string data_dir;                // fashion-mnist: an MNIST-format folder; empty: kFashionMnistDir
  int64_t synthetic_train = 2048;      // synthetic: sample counts
  int64_t synthetic_test = 512;
  uint64_t seed = 1;                   // synthetic: the data's seed (model seeds are separate)
  // Use only the first N samples of each split; 0: all. For synthetic data they set the
  // sizes generated. A limit past a split's size is refused.
  int64_t train_limit = 0;
  int64_t test_limit = 0;
};

class Workload {
 public:
  virtual ~Workload() = default;

  virtual const std::string& name() const = 0;
  virtual const ImageDataset& train_set() const = 0;
  virtual const ImageDataset& test_set() const = 0;

  virtual std::vector<std::string> model_names() const = 0;
  // The model the config named.
  virtual const std::string& default_model() const = 0;
  // Same seed, same initial weights. Throws std::invalid_argument listing this workload's
  // models for an unknown name.
  virtual std::shared_ptr<engine::Model> make_model(const std::string& model_name, uint64_t seed) const = 0;
  std::shared_ptr<engine::Model> make_model(uint64_t seed) const { return make_model(default_model(), seed); }

  // logits: (N, classes), one label per row; a scalar (shape [1]) to backpropagate from.
  virtual engine::Tensor loss(const engine::Tensor& logits, const std::vector<int32_t>& labels) const = 0;

  virtual std::string metric_name() const = 0;
  // The quality metric over every sample of `data` (no sample dropped), in batches of
  // `batch`, without recording a graph and in eval mode; the model's train/eval mode is
  // restored afterwards. requires batch >= 1 and a non-empty dataset.
  virtual double evaluate(engine::Model& model, const ImageDataset& data, int64_t batch) const = 0;
};

// Image classification: cross-entropy loss, accuracy metric, the 2D model zoo.
class ImageClassificationWorkload : public Workload {
 public:
  ImageClassificationWorkload(std::string name, DatasetSplits data, std::string default_model);

  const std::string& name() const override { return name_; }
  const ImageDataset& train_set() const override { return data_.train; }
  const ImageDataset& test_set() const override { return data_.test; }
  std::vector<std::string> model_names() const override;
  const std::string& default_model() const override { return default_model_; }
  using Workload::make_model;
  std::shared_ptr<engine::Model> make_model(const std::string& model_name, uint64_t seed) const override;
  engine::Tensor loss(const engine::Tensor& logits, const std::vector<int32_t>& labels) const override;
  std::string metric_name() const override { return "accuracy"; }
  double evaluate(engine::Model& model, const ImageDataset& data, int64_t batch) const override;

 private:
  std::string name_;
  DatasetSplits data_;
  std::string default_model_;
};

std::vector<std::string> workload_names();

// "fashion-mnist" loads data_dir (default kFashionMnistDir); "synthetic" generates
// synthetic_train/test samples from seed. Throws std::invalid_argument for an unknown
// workload or model (listing the known ones) and std::runtime_error for unreadable data.
std::unique_ptr<Workload> make_workload(const WorkloadConfig& config);

// Rows whose largest logit is at the label (the first maximum wins on ties).
// logits: (N, classes).
int64_t count_correct(const engine::Tensor& logits, const std::vector<int32_t>& labels);

}  // namespace quartet::workloads
