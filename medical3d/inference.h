#pragma once

// Sliding-window inference: a segmentation model trained on patches, run over a whole
// volume in overlapping windows whose logits are averaged (MONAI's
// sliding_window_inference with constant blending), and the Dice score of the result.

#include <cstdint>
#include <vector>

#include "engine/model.h"
#include "engine/tensor.h"
#include "medical3d/volume.h"

namespace quartet::medical3d {

struct SlidingWindowOptions {
  Dims3 window{32, 32, 32};  // voxels along x, y, z
  double overlap = 0.5;      // fraction of a window shared with the next, in [0, 1)
  int64_t batch = 1;         // windows per forward pass
  float fill = 0;            // image value outside the volume, where a window overhangs
};

// Window starts along an axis of `size` voxels: 0, step, 2 step, ... with
// step = max(1, floor(window * (1 - overlap))), and the last one moved back to end at the
// volume's edge, so every voxel is covered and no window overhangs. A window larger than
// the volume gets one start, centred (negative: it overhangs both ends).
// requires size, window >= 1 and 0 <= overlap < 1 (else std::invalid_argument).
std::vector<int64_t> window_starts(int64_t size, int64_t window, double overlap);

// The model's logits over the whole image: (C, D, H, W) with (D, H, W) = (nz, ny, nx),
// each voxel the mean of the logits of the windows that cover it.
// requires the model to map (B, 1, wz, wy, wx) to (B, C, wz, wy, wx); the caller picks its
// mode (eval) and grad mode (engine::NoGradScope), which this leaves as they are.
// throws std::invalid_argument for a bad option or a model output of another shape.
engine::Tensor sliding_window_logits(engine::Model& model, const Volume& image, const SlidingWindowOptions& options);
// The same for several images, their windows batched together (`options.batch` per forward
// pass, across images): one window per volume still fills a batch. Results in order.
std::vector<engine::Tensor> sliding_window_logits(engine::Model& model, const std::vector<const Volume*>& images,
                                                  const SlidingWindowOptions& options);

// The class with the largest logit at each voxel (the first on ties): logits (C, D, H, W)
// on `grid` (grid.shape_dhw() == (D, H, W)).
LabelVolume argmax_labels(const engine::Tensor& logits, const Grid& grid);

// Dice per class c in [0, classes): 2 |P_c and T_c| / (|P_c| + |T_c|), 1 when the class
// is in neither. requires both masks on grids of the same dims (std::invalid_argument).
std::vector<double> dice_per_class(const LabelVolume& predicted, const LabelVolume& truth, int classes);

// The mean over classes 1..classes-1 of dice_per_class (background not scored).
// requires classes >= 2.
double mean_foreground_dice(const LabelVolume& predicted, const LabelVolume& truth, int classes);

}  // namespace quartet::medical3d
