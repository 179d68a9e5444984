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
#include "workloads/partition.h"

namespace quartet::workloads {

struct WorkloadConfig {
  std::string name = "fashion-mnist";  // see workload_names()
  std::string model = "cnn";           // the default for make_model(seed)
  std::string data_dir;                // fashion-mnist: an MNIST-format folder; empty: kFashionMnistDir;
                                       // text-lm: a folder of fortune files; empty: kFortunesDir
  int64_t synthetic_train = 2048;      // synthetic: sample counts
  int64_t synthetic_test = 512;
  uint64_t seed = 1;                   // synthetic, phantoms: the data's seed; text-lm: its split (model seeds are separate)
  // Use only the first N samples of each split; 0: all. For synthetic data they set the
  // sizes generated. A limit past a split's size is refused.
  int64_t train_limit = 0;
  int64_t test_limit = 0;
  // Phantom segmentation (workloads/segmentation.h): phantoms 0..volumes-1 of the seed
  // (medical3d/phantom.h's phantom_case_seed), the last test_volumes held out; cubic volumes
  // of volume_size voxels, trained on patches of patch voxels. msd-folder: the first
  // `volumes` cases of data_dir (0: all), the last test_volumes held out; volume_size
  // unused.
  int64_t volumes = 20;
  int64_t test_volumes = 4;
  int64_t volume_size = 32;
  int64_t patch = 32;
  // Phantoms: volume i is acquired on scanner i mod scanners (medical3d/phantom.h's
  // profiles; 1: every volume on the reference scanner).
  int64_t scanners = 1;
};

// A workload's training samples, test set and quality metric, behind one interface:
// trainers ask for batches by sample index and for an evaluation, and never see the
// data's form (images, volumes) or how it is augmented.
class Workload {
 public:
  virtual ~Workload() = default;

  virtual const std::string& name() const = 0;

  // Training samples; train_batch takes indices in [0, train_size()).
  virtual int64_t train_size() const = 0;
  // Samples (images, held-out volumes) evaluate() scores.
  virtual int64_t test_size() const = 0;
  // The batch of training samples `indices`, in that order, as seen in `epoch`. Any random
  // augmentation (crops, flips) is drawn from the workload's seed, `epoch` and the sample
  // index alone, so every regime, rank, client and process builds the same batch from
  // the same indices and epoch. x is allocated under the current memory tag.
  // ensures x: (N, *input shape), y: N * labels_per_sample() labels, sample-major.
  // throws std::out_of_range naming an index outside [0, train_size()).
  virtual Batch train_batch(const std::vector<int64_t>& indices, int64_t epoch) const = 0;
  // Labels per sample in Batch::y: 1 for classification, the voxels of a patch for
  // segmentation (one class per voxel, x fastest).
  virtual int64_t labels_per_sample() const = 0;
  // Every label in Batch::y lies in [0, label_classes()).
  virtual int label_classes() const = 0;

  // One class per training sample, for partitioners (label skew, shards, the histograms
  // recorded with a run): a classification sample's label; what a segmentation
  // workload uses is documented with it. Values in [0, num_classes()).
  virtual std::vector<int32_t> sample_classes() const = 0;
  virtual int num_classes() const = 0;
  // The scanner each training sample was acquired on, for the scanner partition: values
  // in [0, scanners()). A workload without scanners has one, and every sample on it.
  virtual int scanners() const { return 1; }
  virtual std::vector<int32_t> sample_scanners() const {
    return std::vector<int32_t>(static_cast<size_t>(train_size()), 0);
  }

  virtual std::vector<std::string> model_names() const = 0;
  // The model the config named.
  virtual const std::string& default_model() const = 0;
  // Same seed, same initial weights. Throws std::invalid_argument listing this workload's
  // models for an unknown name.
  virtual std::shared_ptr<engine::Model> make_model(const std::string& model_name, uint64_t seed) const = 0;
  std::shared_ptr<engine::Model> make_model(uint64_t seed) const { return make_model(default_model(), seed); }

  // The loss of a batch's model output against its y; a scalar (shape [1]) to
  // backpropagate from. Classification: logits (N, classes), one label per row.
  virtual engine::Tensor loss(const engine::Tensor& logits, const std::vector<int32_t>& labels) const = 0;

  virtual std::string metric_name() const = 0;
  // The quality metric over every test sample (none dropped), `batch` samples or windows
  // per forward pass, without recording a graph and in eval mode; the model's train/eval
  // mode is restored afterwards. requires batch >= 1.
  virtual double evaluate(engine::Model& model, int64_t batch) const = 0;
};

// Image classification: cross-entropy loss, accuracy metric, the 2D model zoo.
class ImageClassificationWorkload : public Workload {
 public:
  ImageClassificationWorkload(std::string name, DatasetSplits data, std::string default_model);

  const std::string& name() const override { return name_; }
  const ImageDataset& train_set() const { return data_.train; }
  const ImageDataset& test_set() const { return data_.test; }
  int64_t train_size() const override { return data_.train.size(); }
  int64_t test_size() const override { return data_.test.size(); }
  // gather(train_set(), indices): images are not augmented, so `epoch` is unused.
  Batch train_batch(const std::vector<int64_t>& indices, int64_t epoch) const override;
  int64_t labels_per_sample() const override { return 1; }
  int label_classes() const override { return data_.train.num_classes(); }
  // The labels.
  std::vector<int32_t> sample_classes() const override { return data_.train.labels(); }
  int num_classes() const override { return data_.train.num_classes(); }
  std::vector<std::string> model_names() const override;
  const std::string& default_model() const override { return default_model_; }
  using Workload::make_model;
  std::shared_ptr<engine::Model> make_model(const std::string& model_name, uint64_t seed) const override;
  engine::Tensor loss(const engine::Tensor& logits, const std::vector<int32_t>& labels) const override;
  std::string metric_name() const override { return "accuracy"; }
  double evaluate(engine::Model& model, int64_t batch) const override { return evaluate(model, data_.test, batch); }
  // Accuracy over every sample of `data`. requires a non-empty dataset.
  double evaluate(engine::Model& model, const ImageDataset& data, int64_t batch) const;

 private:
  std::string name_;
  DatasetSplits data_;
  std::string default_model_;
};

std::vector<std::string> workload_names();

// Whether a larger value of the workload metric `metric` (Workload::metric_name) is a
// better model: true for accuracy and Dice (both in [0, 1]), false for bits per
// character ("bpc"). Best evaluations, targets ("reached" at or past them) and chart
// scales follow it. An empty or unknown name counts as higher-is-better, as records
// written before the metric was recorded were.
bool higher_is_better(const std::string& metric);
// The metric_name() of `workload`'s workloads, without making one: "accuracy", "dice" or
// "bpc". Throws std::invalid_argument for an unknown workload, listing the known ones.
std::string workload_metric(const std::string& workload);

// Whether `workload` takes images or volumes (or the phantom-specific config fields).
bool is_volume_workload(const std::string& workload);

// The registered models (workloads/models.h) that fit `workload`: the 2D zoo for image
// classification, unet3d for the segmentation workloads, the language models for text-lm.
// Throws std::invalid_argument for an unknown workload, listing the known ones.
std::vector<std::string> workload_model_names(const std::string& workload);
// Throws std::invalid_argument naming the models that fit when `model` is not one.
void check_workload_model(const std::string& workload, const std::string& model);

// "fashion-mnist" loads data_dir (default kFashionMnistDir); "synthetic" generates
// synthetic_train/test samples from seed; "msd-folder" reads a Decathlon folder
// (data_dir); "phantom-ct-seg" and "phantom-mri-seg" make
// `volumes` phantoms from seed (workloads/segmentation.h); "text-lm" reads fortune files
// (data_dir, default kFortunesDir; workloads/text.h). Throws std::invalid_argument
// for an unknown workload or model (listing the known ones) or bad sizes, and
// std::runtime_error for unreadable data.
std::unique_ptr<Workload> make_workload(const WorkloadConfig& config);

// make_workload(config)->train_size() with make_workload's checks, but without making
// what is made from the seed: the phantoms and synthetic samples are counted, not made,
// and msd-folder's dataset.json and the files it lists are checked, not read. The data
// on disk of fashion-mnist and text-lm is read. Throws as make_workload does.
int64_t train_size_of(const WorkloadConfig& config);

// make_partition over the workload's sample_classes(); the scanner kind partitions its
// sample_scanners() instead (partition_scanner).
Partition make_partition(const PartitionSpec& spec, const Workload& workload);

// Rows whose largest logit is at the label (the first maximum wins on ties).
// logits: (N, classes).
int64_t count_correct(const engine::Tensor& logits, const std::vector<int32_t>& labels);

}  // namespace quartet::workloads
