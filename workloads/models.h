#pragma once

// The model zoo: the 2D models here, the 3D ones from medical3d/models.h. Model names, stage names and parameter names are interface: split
// learning cuts at stage names, safetensors files carry parameter names, and both match
// the PyTorch definitions in docs/models.md (state_dict keys and shapes identical).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/model.h"
#include "workloads/gpt.h"

namespace quartet::workloads {

// What a model maps: images to class logits, or volumes to a logit per class and voxel.
inline constexpr const char* kImageClassification = "image-classification";
inline constexpr const char* kVolumeSegmentation = "volume-segmentation";
// Byte sequences (N, T) to next-byte logits (N * T, 256), row n * T + t predicting the
// byte after position t of sample n.
inline constexpr const char* kLanguageModel = "language-model";

struct ModelInfo {
  std::string name;
  std::string description;
  std::string task;           // kImageClassification, kVolumeSegmentation or kLanguageModel
  engine::Shape input_shape;  // per sample: (C, H, W), (C, D, H, W) for volumes (a size they take), (T) for text
  int num_classes = 0;
  std::vector<std::string> stages;
  int64_t parameters = 0;     // trainable scalars
};

// Initialises every layer in order from one engine::Generator(seed) with PyTorch's default
// init, so the same seed gives the same weights in every regime and process.
// Throws std::invalid_argument listing the known models for an unknown name.
std::shared_ptr<engine::Model> make_model(const std::string& name, uint64_t seed);
// The same with `classes` outputs in place of the registered number, for data with its
// own label set (a Decathlon task): unet3d only, whose other settings stay the registered
// ones. throws std::invalid_argument for another model with other classes than its own,
// or classes outside [2, 256].
std::shared_ptr<engine::Model> make_model(const std::string& name, uint64_t seed, int classes);

// torchvision's ResNet-18 (BasicBlock, [2, 2, 2, 2], the 7x7/2 stem and 3x3/2 max pool)
// over (in_channels, H, W) images, H and W >= 32, built from the engine's modules as
// resnet-mini is: stages stem, layer1_0a, layer1_0b, ..., layer4_1b, head. Not a
// registered model (the image workloads' models take 1x28x28): the module-built twin
// that bench/onnx_speed.py times an imported ResNet-18 against. 11,181,642 parameters
// for 3 channels and 10 classes. Throws std::invalid_argument for a count below 1.
std::shared_ptr<engine::Model> make_resnet18(uint64_t seed, int64_t in_channels = 3, int classes = 10);

std::vector<std::string> model_names();
std::vector<ModelInfo> model_catalog();
// Throws like make_model for an unknown name.
ModelInfo model_info(const std::string& name);
// Throws like make_model for an unknown name; builds nothing.
void check_model_name(const std::string& name);
// The model's task (kImageClassification, ...); throws like make_model; builds nothing.
std::string model_task(const std::string& name);

// Tensor parallelism (workloads/gpt.h): the models that have a split, the most ranks one
// splits over (its heads), how each of its parameters is split, and one rank's slice,
// uninitialised (loaded next with its slices of the whole model's weights). Each throws
// std::invalid_argument naming the models that have a split, for any other model.
std::vector<std::string> tensor_parallel_models();
int64_t tensor_parallel_max_ranks(const std::string& name);
std::vector<std::pair<std::string, TensorSplit>> tensor_parallel_plan(const std::string& name);
std::shared_ptr<engine::Model> make_model_shard(const std::string& name, const TensorParallelGroup& group);

// Context parallelism (workloads/gpt.h): the context a model's sequences split (into
// 2 x ranks chunks), and one rank's model over `ring`, initialised as make_model(name,
// seed) is. Each throws std::invalid_argument naming the models that have a split, for any
// other model.
int64_t context_parallel_context(const std::string& name);
std::shared_ptr<engine::Model> make_context_parallel_model(const std::string& name, uint64_t seed,
                                                           engine::AttentionRing& ring);

// Mixtures of experts (workloads/moe.h): a model's number of experts, and the model with
// its experts spread over an expert-parallel group (each process holds its own; every
// parameter uninitialised, to be loaded by name), its routing counts going to `stats`
// (may be null). Each throws std::invalid_argument naming the models with experts, for
// any other model.
int64_t model_experts(const std::string& name);
std::shared_ptr<engine::Model> make_model_experts(const std::string& name, const ExpertGroup& group,
                                                  std::shared_ptr<MoeStats> stats);

// Trainable scalars of a module.
int64_t parameter_count(const engine::Module& m);

}  // namespace quartet::workloads
