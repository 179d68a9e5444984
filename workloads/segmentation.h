#pragma once

// Volume segmentation: training on random patches, scoring whole held-out volumes.
//
// Training sample i is training volume i. Its batch entry in `epoch` is a random crop of
// `patch` voxels per side (centred on a foreground voxel with foreground_probability,
// medical3d::random_crop), then random flips along each axis (flip_probability each),
// all drawn from one engine::Generator seeded from (seed, epoch, i). Loss: soft Dice
// per sample over the foreground classes plus per-voxel cross-entropy (nnU-Net's
// Dice + CE). Metric: the mean over test volumes of the mean Dice over the foreground
// classes, each volume segmented by sliding-window inference (windows of `patch` voxels,
// `overlap` shared, logits averaged) and argmax.
//
// For partitioners a training volume's class is its lesion burden: 1 when its lesion
// voxels (class 2, or the last class) are at least the median over the training
// volumes, else 0; so a Dirichlet partition skews clients towards small or large lesions.

#include <cstdint>
#include <string>
#include <vector>

#include "medical3d/phantom.h"
#include "medical3d/volume.h"
#include "workloads/workload.h"

namespace quartet::workloads {

struct SegmentationOptions {
  int64_t patch = 32;                   // voxels per side of a training patch and an inference window
  float foreground_probability = 0.67f; // a patch centred on a labelled voxel (nnU-Net oversamples a third)
  float flip_probability = 0.5f;        // per axis
  double overlap = 0.5;                 // of inference windows
  int classes = 3;                      // labels in [0, classes)
  uint64_t seed = 1;                    // augmentation
  int scanners = 1;                     // training volume i was acquired on scanner i mod scanners
};

class SegmentationWorkload : public Workload {
 public:
  // Volumes already normalised (windowed CT, z-scored MRI), each image with its labels on
  // one grid. requires non-empty splits, labels in [0, classes), a patch >= 1 that fits
  // in every volume, and a default model that segments volumes into `classes` classes
  // (else std::invalid_argument).
  SegmentationWorkload(std::string name, std::vector<medical3d::Sample> train, std::vector<medical3d::Sample> test,
                       SegmentationOptions options, std::string default_model);

  const std::string& name() const override { return name_; }
  int64_t train_size() const override { return static_cast<int64_t>(train_.size()); }
  int64_t test_size() const override { return static_cast<int64_t>(test_.size()); }
  // x: (N, 1, patch, patch, patch); y: N * patch^3 voxel classes.
  Batch train_batch(const std::vector<int64_t>& indices, int64_t epoch) const override;
  int64_t labels_per_sample() const override { return options_.patch * options_.patch * options_.patch; }
  int label_classes() const override { return options_.classes; }
  // Lesion burden, 0 (below the median) or 1; see above.
  std::vector<int32_t> sample_classes() const override { return burden_; }
  int num_classes() const override { return 2; }
  int scanners() const override { return options_.scanners; }
  // i mod options().scanners.
  std::vector<int32_t> sample_scanners() const override;
  std::vector<std::string> model_names() const override;
  const std::string& default_model() const override { return default_model_; }
  using Workload::make_model;
  std::shared_ptr<engine::Model> make_model(const std::string& model_name, uint64_t seed) const override;
  // logits (N, classes, D, H, W), labels N*D*H*W: soft Dice (per sample) + cross-entropy.
  engine::Tensor loss(const engine::Tensor& logits, const std::vector<int32_t>& labels) const override;
  std::string metric_name() const override { return "dice"; }
  // batch: windows per forward pass.
  double evaluate(engine::Model& model, int64_t batch) const override;

  const std::vector<medical3d::Sample>& train_volumes() const { return train_; }
  const std::vector<medical3d::Sample>& test_volumes() const { return test_; }
  const SegmentationOptions& options() const { return options_; }

 private:
  std::string name_;
  std::vector<medical3d::Sample> train_, test_;
  SegmentationOptions options_;
  std::string default_model_;
  std::vector<int32_t> burden_;
};

// An image as the network sees it, phantom or real: CT windowed to the abdomen (centre
// 40 HU, width 400) onto [0, 1]; MRI z-scored over every voxel.
medical3d::Volume normalise_image(medical3d::PhantomKind kind, const medical3d::Volume& image);

// Spatial sizes (patches, windows) `model` takes are multiples of this: 4 for unet3d,
// which pools twice; 1 otherwise.
int64_t spatial_multiple(const std::string& model);

// The segmentation of one normalised image, as evaluate() makes it: sliding windows of
// `patch` voxels per side overlapping by `overlap`, `batch` windows a forward pass, the
// windows' logits averaged, argmax; on the image's grid. Runs in eval mode without grad
// and leaves the model's mode as it was.
// requires a model that maps (B, 1, P, P, P) to (B, classes, P, P, P), classes <= 256;
// patch >= 1, batch >= 1, 0 <= overlap < 1 (else std::invalid_argument).
medical3d::LabelVolume segment_volume(engine::Model& model, const medical3d::Volume& image, int64_t patch,
                                      double overlap, int64_t batch);

// "phantom-ct-seg" or "phantom-mri-seg" from config: phantoms
// make_phantom(kind, volume_size, phantom_case_seed(seed, i), i mod scanners) for i in
// [0, volumes), with one scanner the same cases `quartet phantom --seed` writes; the last
// test_volumes are held out.
// throws std::invalid_argument unless 1 <= test_volumes < volumes <= 10000, volume_size is
// a phantom size, 1 <= patch <= volume_size, 1 <= scanners <= kPhantomScanners, and the
// model fits.
std::unique_ptr<Workload> make_phantom_workload(const WorkloadConfig& config);
// The training volumes make_phantom_workload(config) would make, after its checks,
// without making any. Throws as it does.
int64_t phantom_train_volumes(const WorkloadConfig& config);

// "msd-folder": the Medical Segmentation Decathlon folder config.data_dir
// (medical3d/msd.h), trained and scored as the phantoms are. Its training cases in
// dataset.json's order, the first `volumes` of them (0: all), the last test_volumes held
// out (the Decathlon's imagesTs have no labels). A "CT" modality is windowed like the CT
// phantoms, any other z-scored like the MRI ones; volumes keep their own sizes and
// spacings (no resampling). Classes: 1 + the largest index dataset.json's "labels" names
// (else the largest class in the masks); unet3d gets that many outputs.
// throws std::invalid_argument for a missing data_dir, volumes past the listed cases, a
// bad test_volumes or patch (a multiple of 4 for unet3d, at most every volume's size), or
// more than kMaxVoxels voxels in all; std::runtime_error naming the file for an unreadable
// folder or volume, an image with voxels that are not finite (NaN or infinite), an image
// and mask of different sizes, several modalities, or one class,
// and saying what is missing when Quartet was built without NIfTI support
// (medical3d/io_support.h).
std::unique_ptr<Workload> make_msd_workload(const WorkloadConfig& config);
// The training volumes make_msd_workload(config) would read, after its checks of the
// settings and of dataset.json (every file it lists exists), without reading any volume.
// Throws as it does.
int64_t msd_train_volumes(const WorkloadConfig& config);

}  // namespace quartet::workloads
