#pragma once

// The 3D models: a U-Net for segmenting volumes and a small CNN for classifying them.
// Like the 2D zoo (workloads/models.h), stage names and parameter names are interface:
// split learning cuts at stage names and safetensors files carry PyTorch's state_dict
// names and shapes (docs/models.md has the PyTorch definitions).

#include <cstdint>
#include <memory>
#include <string>

#include "engine/model.h"
#include "engine/random.h"

namespace quartet::medical3d {

enum class UNetNorm { instance, batch };

// "instance" or "batch"; throws std::invalid_argument naming the choices otherwise.
UNetNorm parse_unet_norm(const std::string& name);
const char* to_string(UNetNorm norm);

struct UNet3dOptions {
  int depth = 3;                         // resolution levels, the bottleneck's included; >= 2
  int64_t base_channels = 8;             // at the first level, doubled at each level below
  UNetNorm norm = UNetNorm::instance;    // instance: InstanceNorm3d(affine=True); batch: BatchNorm3d
  int64_t in_channels = 1;
  int64_t classes = 3;                   // output channels: one logit per class and voxel
};

// A 3D U-Net (Çiçek et al. 2016) in nnU-Net's plain form. Each level's block is twice
// conv 3x3x3 (padding 1, no bias) -> norm -> LeakyReLU(0.01); down is max-pool 2, up a
// transposed conv 2x2x2 with stride 2, and the decoder concatenates [skip, up] on the
// channels; a 1x1x1 conv with bias gives the logits.
//
// Stages, for depth L (levels 1..L, level k at 1/2^(k-1) of the input size, with
// c_k = base_channels * 2^(k-1) channels):
//   enc1         {x}                  -> {e1}
//   enc2..encL-1 {e1..e(k-1)}         -> {e1..ek}, ek = block(pool(e(k-1)))
//   bottleneck   {e1..e(L-1)}         -> {e1..e(L-1), b}
//   decL-1..dec1 {e1..ek, h}          -> {e1..e(k-1), block(concat(ek, up(h)))}
//   head         {d1}                 -> {logits}
// so a cut after enc2 sends {e1, e2}: the skip tensors travel with the main path.
// x: (N, in_channels, D, H, W) with D, H, W divisible by 2^(L-1); logits: (N, classes, D, H, W).
// Initialised in stage order from `gen` with PyTorch's default init (engine/nn.h).
// throws std::invalid_argument when depth < 2 or a channel count < 1.
std::shared_ptr<engine::Model> make_unet3d(const UNet3dOptions& options, engine::Generator& gen);

}  // namespace quartet::medical3d
