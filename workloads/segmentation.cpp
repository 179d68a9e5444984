#include "workloads/segmentation.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "medical3d/inference.h"
#include "medical3d/io_support.h"
#include "medical3d/transforms.h"
#include "workloads/models.h"
#include "workloads/sampler.h"

#if QUARTET_WITH_MEDICAL_IO
#include "medical3d/msd.h"
#include "medical3d/nifti.h"
#endif

namespace quartet::workloads {
namespace {

std::vector<int32_t> lesion_burden(const std::vector<medical3d::Sample>& volumes, int classes) {
  std::vector<int64_t> lesion;
  for (const auto& s : volumes) lesion.push_back(medical3d::class_counts(s.labels)[static_cast<size_t>(classes - 1)]);
  std::vector<int64_t> sorted = lesion;
  std::sort(sorted.begin(), sorted.end());
  const int64_t median = sorted[sorted.size() / 2];
  std::vector<int32_t> out;
  for (int64_t v : lesion) out.push_back(v >= median ? 1 : 0);
  return out;
}

}  // namespace

SegmentationWorkload::SegmentationWorkload(std::string name, std::vector<medical3d::Sample> train,
                                           std::vector<medical3d::Sample> test, SegmentationOptions options,
                                           std::string default_model)
    : name_(std::move(name)),
      train_(std::move(train)),
      test_(std::move(test)),
      options_(options),
      default_model_(std::move(default_model)) {
  if (train_.empty() || test_.empty())
    throw std::invalid_argument("workload " + name_ + ": needs at least one training and one test volume");
  if (options_.classes < 2 || options_.classes > 256)
    throw std::invalid_argument("workload " + name_ + ": classes must be in [2, 256]");
  if (options_.patch < 1) throw std::invalid_argument("workload " + name_ + ": patch must be >= 1");
  if (options_.scanners < 1) throw std::invalid_argument("workload " + name_ + ": scanners must be >= 1");
  for (const auto* split : {&train_, &test_})
    for (const auto& s : *split) {
      if (s.image.grid.dims != s.labels.grid.dims)
        throw std::invalid_argument("workload " + name_ + ": an image and its labels differ in size");
      for (int64_t d : s.image.grid.dims)
        if (d < options_.patch)
          throw std::invalid_argument("workload " + name_ + ": patch " + std::to_string(options_.patch) +
                                      " is larger than a volume of " + std::to_string(d) + " voxels");
      const auto counts = medical3d::class_counts(s.labels);
      for (int c = options_.classes; c < 256; ++c)
        if (counts[static_cast<size_t>(c)] > 0)
          throw std::invalid_argument("workload " + name_ + ": a label volume holds class " + std::to_string(c) +
                                      ", outside [0, " + std::to_string(options_.classes) + ")");
    }
  check_workload_model(name_, default_model_);
  if (options_.patch % spatial_multiple(default_model_) != 0)
    throw std::invalid_argument("workload " + name_ + ": " + default_model_ + " takes sizes divisible by " +
                                std::to_string(spatial_multiple(default_model_)) + ", the patch is " +
                                std::to_string(options_.patch));
  burden_ = lesion_burden(train_, options_.classes);
}

Batch SegmentationWorkload::train_batch(const std::vector<int64_t>& indices, int64_t epoch) const {
  const int64_t p = options_.patch, voxels = p * p * p, n = static_cast<int64_t>(indices.size());
  Batch b;
  b.x = engine::Tensor::empty({n, 1, p, p, p});
  b.y.resize(static_cast<size_t>(n * voxels));
  float* px = b.x.data();
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = indices[static_cast<size_t>(k)];
    if (i < 0 || i >= train_size())
      throw std::out_of_range("workload " + name_ + ": sample " + std::to_string(i) + " outside [0, " +
                              std::to_string(train_size()) + ")");
    const medical3d::Sample& s = train_[static_cast<size_t>(i)];
    engine::Generator gen(mix_seed(mix_seed(mix_seed(options_.seed) ^ static_cast<uint64_t>(epoch)) ^
                                   static_cast<uint64_t>(i)));
    medical3d::Sample patch =
        medical3d::random_crop(s.image, s.labels, {p, p, p}, options_.foreground_probability, gen);
    medical3d::random_flip_(patch.image, patch.labels, options_.flip_probability, gen);
    std::copy(patch.image.voxels.begin(), patch.image.voxels.end(), px + k * voxels);
    std::copy(patch.labels.voxels.begin(), patch.labels.voxels.end(), b.y.begin() + k * voxels);
  }
  return b;
}

std::vector<int32_t> SegmentationWorkload::sample_scanners() const {
  std::vector<int32_t> out;
  for (int64_t i = 0; i < train_size(); ++i) out.push_back(static_cast<int32_t>(i % options_.scanners));
  return out;
}

std::vector<std::string> SegmentationWorkload::model_names() const { return workload_model_names(name_); }

std::shared_ptr<engine::Model> SegmentationWorkload::make_model(const std::string& model_name, uint64_t seed) const {
  check_workload_model(name_, model_name);
  return workloads::make_model(model_name, seed, options_.classes);
}

engine::Tensor SegmentationWorkload::loss(const engine::Tensor& logits, const std::vector<int32_t>& labels) const {
  return engine::add(engine::soft_dice_loss(logits, labels, false, 1e-5f, true),
                     engine::cross_entropy(logits, labels, {}));
}

double SegmentationWorkload::evaluate(engine::Model& model, int64_t batch) const {
  if (batch < 1) throw std::invalid_argument("evaluation batch: expected >= 1, got " + std::to_string(batch));
  const bool was_training = model.training();
  model.eval();
  engine::NoGradScope no_grad;
  double total = 0.0;
  try {
    medical3d::SlidingWindowOptions o;
    o.window = {options_.patch, options_.patch, options_.patch};
    o.overlap = options_.overlap;
    o.batch = batch;
    // Windows of every test volume share the batches: a forward pass of one window is
    // the slowest kind on CPUs (its GEMMs split across threads, not its samples).
    std::vector<const medical3d::Volume*> images;
    for (const medical3d::Sample& s : test_) images.push_back(&s.image);
    const std::vector<engine::Tensor> logits = medical3d::sliding_window_logits(model, images, o);
    for (size_t i = 0; i < test_.size(); ++i)
      total += medical3d::mean_foreground_dice(medical3d::argmax_labels(logits[i], test_[i].labels.grid),
                                               test_[i].labels, options_.classes);
  } catch (...) {
    model.train(was_training);
    throw;
  }
  model.train(was_training);
  return total / static_cast<double>(test_.size());
}

int64_t spatial_multiple(const std::string& model) { return model == "unet3d" ? 4 : 1; }

medical3d::LabelVolume segment_volume(engine::Model& model, const medical3d::Volume& image, int64_t patch,
                                      double overlap, int64_t batch) {
  if (patch < 1 || batch < 1)
    throw std::invalid_argument("segment_volume: patch and batch must be >= 1, got " + std::to_string(patch) +
                                " and " + std::to_string(batch));
  const bool was_training = model.training();
  model.eval();
  engine::NoGradScope no_grad;
  medical3d::SlidingWindowOptions o;
  o.window = {patch, patch, patch};
  o.overlap = overlap;
  o.batch = batch;
  try {
    medical3d::LabelVolume out =
        medical3d::argmax_labels(medical3d::sliding_window_logits(model, image, o), image.grid);
    model.train(was_training);
    return out;
  } catch (...) {
    model.train(was_training);
    throw;
  }
}

medical3d::Volume normalise_image(medical3d::PhantomKind kind, const medical3d::Volume& image) {
  return kind == medical3d::PhantomKind::ct ? medical3d::window(image, 40.0f, 400.0f)
                                             : medical3d::zscore(image, medical3d::ZScoreOver::all);
}

int64_t phantom_train_volumes(const WorkloadConfig& c) {
  if (c.name != "phantom-ct-seg" && c.name != "phantom-mri-seg")
    throw std::invalid_argument("make_phantom_workload: \"" + c.name + "\" is not a phantom workload");
  const std::string model = c.model.empty() ? "unet3d" : c.model;
  check_workload_model(c.name, model);  // before any phantom is made
  if (c.volumes < 2 || c.volumes > 10000)
    throw std::invalid_argument("volumes: expected 2 to 10000 phantoms, got " + std::to_string(c.volumes));
  if (c.test_volumes < 1 || c.test_volumes >= c.volumes)
    throw std::invalid_argument("test_volumes: expected 1 to volumes - 1 (" + std::to_string(c.volumes - 1) +
                                "), got " + std::to_string(c.test_volumes));
  if (c.volume_size < medical3d::kMinPhantomSize || c.volume_size > medical3d::kMaxPhantomSize)
    throw std::invalid_argument("volume_size: expected " + std::to_string(medical3d::kMinPhantomSize) + " to " +
                                std::to_string(medical3d::kMaxPhantomSize) + " voxels, got " +
                                std::to_string(c.volume_size));
  if (c.volumes * c.volume_size * c.volume_size * c.volume_size > medical3d::kMaxVoxels)
    throw std::invalid_argument("volumes: " + std::to_string(c.volumes) + " phantoms of " +
                                std::to_string(c.volume_size) + "^3 voxels exceed " +
                                std::to_string(medical3d::kMaxVoxels) + " voxels in all");
  if (c.patch < 1 || c.patch > c.volume_size)
    throw std::invalid_argument("patch: expected 1 to volume_size (" + std::to_string(c.volume_size) + "), got " +
                                std::to_string(c.patch));
  if (c.train_limit != 0 || c.test_limit != 0)
    throw std::invalid_argument("train_samples, test_samples: " + c.name + " counts volumes; use volumes and "
                                "test_volumes");
  if (c.scanners < 1 || c.scanners > medical3d::kPhantomScanners)
    throw std::invalid_argument("scanners: expected 1 to " + std::to_string(medical3d::kPhantomScanners) +
                                " (the phantom scanner profiles), got " + std::to_string(c.scanners));
  return c.volumes - c.test_volumes;
}

std::unique_ptr<Workload> make_phantom_workload(const WorkloadConfig& c) {
  phantom_train_volumes(c);  // every setting checked before any phantom is made
  const medical3d::PhantomKind kind =
      c.name == "phantom-ct-seg" ? medical3d::PhantomKind::ct : medical3d::PhantomKind::mri;
  const std::string model = c.model.empty() ? "unet3d" : c.model;
  std::vector<medical3d::Sample> train, test;
  for (int64_t i = 0; i < c.volumes; ++i) {
    medical3d::Sample s = medical3d::make_phantom(kind, c.volume_size, medical3d::phantom_case_seed(c.seed, i),
                                                  static_cast<int>(i % c.scanners));
    s.image = normalise_image(kind, s.image);
    (i < c.volumes - c.test_volumes ? train : test).push_back(std::move(s));
  }
  SegmentationOptions o;
  o.patch = c.patch;
  o.classes = medical3d::kPhantomClasses;
  o.seed = c.seed;
  o.scanners = static_cast<int>(c.scanners);
  return std::make_unique<SegmentationWorkload>(c.name, std::move(train), std::move(test), o, model);
}

#if QUARTET_WITH_MEDICAL_IO
namespace {

// msd-folder's dataset.json, its cases and the settings checked against them: the first
// `used` training cases are read, the last test_volumes of them held out.
struct MsdPlan {
  medical3d::MsdDataset ds;
  std::string json_path;
  int64_t used = 0;
};

MsdPlan plan_msd(const WorkloadConfig& c) {
  const std::string model = c.model.empty() ? "unet3d" : c.model;
  check_workload_model(c.name, model);
  if (c.data_dir.empty())
    throw std::invalid_argument("data_dir: msd-folder needs the dataset's folder (Medical Segmentation Decathlon "
                                "layout: dataset.json, imagesTr/, labelsTr/)");
  if (c.train_limit != 0 || c.test_limit != 0)
    throw std::invalid_argument("train_samples, test_samples: msd-folder counts volumes; use volumes and test_volumes");
  if (c.scanners != 1)
    throw std::invalid_argument("scanners: msd-folder's volumes come from their own scanners; only the phantom "
                                "workloads take scanners");
  const medical3d::MsdDataset ds = medical3d::read_msd_dataset(c.data_dir);
  const std::string json_path = c.data_dir + "/dataset.json";
  if (ds.modality.size() > 1)
    throw std::runtime_error(json_path + ": " + std::to_string(ds.modality.size()) +
                             " modalities; the volume models take one channel");
  const int64_t listed = static_cast<int64_t>(ds.training.size());
  const int64_t used = c.volumes > 0 ? c.volumes : listed;
  if (used > listed)
    throw std::invalid_argument("volumes: " + std::to_string(used) + " asked, " + json_path + " lists " +
                                std::to_string(listed) + " training cases");
  if (c.test_volumes < 1 || c.test_volumes >= used)
    throw std::invalid_argument("test_volumes: expected 1 to " + std::to_string(used - 1) + " of the " +
                                std::to_string(used) + " cases (some must be left to train on), got " +
                                std::to_string(c.test_volumes));
  if (c.patch < 1 || c.patch % spatial_multiple(model) != 0)
    throw std::invalid_argument("patch: expected a positive multiple of " + std::to_string(spatial_multiple(model)) +
                                " for " + model + ", got " + std::to_string(c.patch));
  return {ds, json_path, used};
}

}  // namespace
#endif

int64_t msd_train_volumes(const WorkloadConfig& c) {
  if (c.name != "msd-folder") throw std::invalid_argument("msd_train_volumes: \"" + c.name + "\" is not msd-folder");
#if !QUARTET_WITH_MEDICAL_IO
  throw std::runtime_error(medical3d::no_medical_io_message("msd-folder"));
#else
  const MsdPlan plan = plan_msd(c);
  return plan.used - c.test_volumes;
#endif
}

std::unique_ptr<Workload> make_msd_workload(const WorkloadConfig& c) {
  if (c.name != "msd-folder") throw std::invalid_argument("make_msd_workload: \"" + c.name + "\" is not msd-folder");
#if !QUARTET_WITH_MEDICAL_IO
  throw std::runtime_error(medical3d::no_medical_io_message("msd-folder"));
#else
  const std::string model = c.model.empty() ? "unet3d" : c.model;
  const MsdPlan plan = plan_msd(c);
  const medical3d::MsdDataset& ds = plan.ds;
  const std::string& json_path = plan.json_path;
  const int64_t used = plan.used;
  std::string modality = ds.modality.empty() ? "" : ds.modality.begin()->second;
  std::transform(modality.begin(), modality.end(), modality.begin(), [](unsigned char ch) { return std::toupper(ch); });
  const medical3d::PhantomKind kind = modality == "CT" ? medical3d::PhantomKind::ct : medical3d::PhantomKind::mri;

  std::vector<medical3d::Sample> train, test;
  int64_t voxels = 0;
  int max_class = 0;
  for (int64_t i = 0; i < used; ++i) {
    const medical3d::MsdCase& mc = ds.training[static_cast<size_t>(i)];
    medical3d::Sample s{medical3d::read_nifti(mc.image), medical3d::read_nifti_labels(mc.label)};
    if (const int64_t bad = medical3d::non_finite_voxels(s.image); bad > 0)
      throw std::runtime_error(mc.image + ": " + std::to_string(bad) + " of " +
                               std::to_string(s.image.grid.voxel_count()) +
                               " voxels are not finite (NaN or infinite); allowed: finite voxels");
    if (s.image.grid.dims != s.labels.grid.dims)
      throw std::runtime_error(mc.label + ": " + std::to_string(s.labels.nx()) + "x" + std::to_string(s.labels.ny()) +
                               "x" + std::to_string(s.labels.nz()) + " voxels, its image " + mc.image + " has " +
                               std::to_string(s.image.nx()) + "x" + std::to_string(s.image.ny()) + "x" +
                               std::to_string(s.image.nz()));
    voxels += s.image.grid.voxel_count();
    if (voxels > medical3d::kMaxVoxels)
      throw std::invalid_argument("volumes: the first " + std::to_string(i + 1) + " cases of " + c.data_dir +
                                  " exceed " + std::to_string(medical3d::kMaxVoxels) +
                                  " voxels in all; use fewer (volumes)");
    const auto counts = medical3d::class_counts(s.labels);
    for (int k = 255; k > max_class; --k)
      if (counts[static_cast<size_t>(k)] > 0) max_class = k;
    s.image = normalise_image(kind, s.image);
    (i < used - c.test_volumes ? train : test).push_back(std::move(s));
  }
  // The classes dataset.json names, or those the masks hold when it names none.
  const int classes = ds.labels.empty() ? max_class + 1 : ds.labels.rbegin()->first + 1;
  if (classes < 2)
    throw std::runtime_error(json_path + ": one class only; segmentation needs background and at least one more");
  SegmentationOptions o;
  o.patch = c.patch;
  o.classes = classes;
  o.seed = c.seed;
  return std::make_unique<SegmentationWorkload>(c.name, std::move(train), std::move(test), o, model);
#endif
}

}  // namespace quartet::workloads
