#include "medical3d/inference.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "medical3d/transforms.h"

namespace quartet::medical3d {

std::vector<int64_t> window_starts(int64_t size, int64_t window, double overlap) {
  if (size < 1 || window < 1)
    throw std::invalid_argument("sliding window: size and window must be >= 1, got " + std::to_string(size) +
                                " and " + std::to_string(window));
  if (!(overlap >= 0.0 && overlap < 1.0))
    throw std::invalid_argument("sliding window: overlap must be in [0, 1), got " + std::to_string(overlap));
  if (window >= size) return {-((window - size) / 2)};
  const double stride = std::floor(static_cast<double>(window) * (1.0 - overlap));
  const int64_t step = std::max<int64_t>(1, static_cast<int64_t>(stride));
  std::vector<int64_t> starts;
  for (int64_t s = 0; s + window < size; s += step) starts.push_back(s);
  starts.push_back(size - window);
  return starts;
}

engine::Tensor sliding_window_logits(engine::Model& model, const Volume& image, const SlidingWindowOptions& o) {
  return sliding_window_logits(model, std::vector<const Volume*>{&image}, o)[0];
}

std::vector<engine::Tensor> sliding_window_logits(engine::Model& model, const std::vector<const Volume*>& images,
                                                  const SlidingWindowOptions& o) {
  if (o.batch < 1) throw std::invalid_argument("sliding window: batch must be >= 1, got " + std::to_string(o.batch));
  const Dims3& w = o.window;
  struct Window {
    size_t image;
    Box box;
  };
  std::vector<Window> windows;
  for (size_t i = 0; i < images.size(); ++i) {
    const Volume& image = *images[i];
    const auto xs = window_starts(image.nx(), w[0], o.overlap);
    const auto ys = window_starts(image.ny(), w[1], o.overlap);
    const auto zs = window_starts(image.nz(), w[2], o.overlap);
    for (int64_t z : zs)
      for (int64_t y : ys)
        for (int64_t x : xs) windows.push_back({i, Box{{x, y, z}, w}});
  }
  const int64_t window_voxels = w[0] * w[1] * w[2];
  // Per image: the sum of the logits of the windows over each voxel, and their count. The
  // sums become the means in place: a volume's logits are held once.
  std::vector<engine::Tensor> sums(images.size());
  std::vector<std::vector<int32_t>> counts(images.size());
  for (size_t i = 0; i < images.size(); ++i) counts[i].assign(static_cast<size_t>(images[i]->grid.voxel_count()), 0);
  int64_t classes = 0;
  for (size_t first = 0; first < windows.size(); first += static_cast<size_t>(o.batch)) {
    const size_t last = std::min(windows.size(), first + static_cast<size_t>(o.batch));
    const int64_t b = static_cast<int64_t>(last - first);
    engine::Tensor x = engine::Tensor::empty({b, 1, w[2], w[1], w[0]});
    for (size_t k = first; k < last; ++k) {
      const Volume patch = crop(*images[windows[k].image], windows[k].box, o.fill);
      std::copy(patch.voxels.begin(), patch.voxels.end(), x.data() + static_cast<int64_t>(k - first) * window_voxels);
    }
    const engine::Tensor y = model.forward(x.to(model.device())).to(engine::Device::cpu());
    if (y.dim() != 5 || y.size(0) != b || y.size(2) != w[2] || y.size(3) != w[1] || y.size(4) != w[0] ||
        (classes != 0 && y.size(1) != classes))
      throw std::invalid_argument("sliding window: the model maps " + engine::shape_str(x.shape()) + " to " +
                                  engine::shape_str(y.shape()) + "; expected (B, C, D, H, W) of the same size");
    if (classes == 0) {
      classes = y.size(1);
      for (size_t i = 0; i < images.size(); ++i)
        sums[i] = engine::Tensor::zeros({classes, images[i]->nz(), images[i]->ny(), images[i]->nx()});
    }
    const float* py = y.data();
    for (size_t k = first; k < last; ++k) {
      const Volume& image = *images[windows[k].image];
      const Box& box = windows[k].box;
      float* sum = sums[windows[k].image].data();
      int32_t* count = counts[windows[k].image].data();
      const int64_t nx = image.nx(), ny = image.ny(), nz = image.nz(), voxels = image.grid.voxel_count();
      const float* yk = py + static_cast<int64_t>(k - first) * classes * window_voxels;
      for (int64_t kz = 0; kz < w[2]; ++kz) {
        const int64_t z = box.start[2] + kz;
        if (z < 0 || z >= nz) continue;
        for (int64_t ky = 0; ky < w[1]; ++ky) {
          const int64_t yy = box.start[1] + ky;
          if (yy < 0 || yy >= ny) continue;
          for (int64_t kx = 0; kx < w[0]; ++kx) {
            const int64_t xx = box.start[0] + kx;
            if (xx < 0 || xx >= nx) continue;
            const int64_t v = (z * ny + yy) * nx + xx, wv = (kz * w[1] + ky) * w[0] + kx;
            for (int64_t c = 0; c < classes; ++c) sum[c * voxels + v] += yk[c * window_voxels + wv];
            count[v] += 1;
          }
        }
      }
    }
  }
  for (size_t i = 0; i < images.size(); ++i) {
    const int64_t voxels = images[i]->grid.voxel_count();
    float* mean = sums[i].data();
    const int32_t* count = counts[i].data();
    for (int64_t c = 0; c < classes; ++c)
      for (int64_t v = 0; v < voxels; ++v) mean[c * voxels + v] /= static_cast<float>(count[v]);
    std::vector<int32_t>().swap(counts[i]);
  }
  return sums;
}

LabelVolume argmax_labels(const engine::Tensor& logits, const Grid& grid) {
  const Dims3 dhw = grid.shape_dhw();
  if (logits.dim() != 4 || logits.size(1) != dhw[0] || logits.size(2) != dhw[1] || logits.size(3) != dhw[2] ||
      logits.size(0) > 256)
    throw std::invalid_argument("argmax_labels: logits " + engine::shape_str(logits.shape()) +
                                " do not match the grid's (D, H, W) = " + engine::shape_str({dhw[0], dhw[1], dhw[2]}) +
                                " with at most 256 classes");
  LabelVolume out(grid);
  const int64_t classes = logits.size(0), voxels = grid.voxel_count();
  const float* p = logits.data();
  for (int64_t v = 0; v < voxels; ++v) {
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c)
      if (p[c * voxels + v] > p[best * voxels + v]) best = c;
    out.voxels[static_cast<size_t>(v)] = static_cast<uint8_t>(best);
  }
  return out;
}

std::vector<double> dice_per_class(const LabelVolume& predicted, const LabelVolume& truth, int classes) {
  if (predicted.grid.dims != truth.grid.dims)
    throw std::invalid_argument("dice: the masks' grids differ in size");
  if (classes < 1 || classes > 256) throw std::invalid_argument("dice: classes must be in [1, 256]");
  std::vector<int64_t> both(static_cast<size_t>(classes), 0), p(static_cast<size_t>(classes), 0),
      t(static_cast<size_t>(classes), 0);
  for (size_t v = 0; v < truth.voxels.size(); ++v) {
    const int a = predicted.voxels[v], b = truth.voxels[v];
    if (a < classes) ++p[a];
    if (b < classes) ++t[b];
    if (a == b && a < classes) ++both[a];
  }
  std::vector<double> out(static_cast<size_t>(classes));
  for (int c = 0; c < classes; ++c)
    out[c] = p[c] + t[c] == 0 ? 1.0 : 2.0 * static_cast<double>(both[c]) / static_cast<double>(p[c] + t[c]);
  return out;
}

double mean_foreground_dice(const LabelVolume& predicted, const LabelVolume& truth, int classes) {
  if (classes < 2) throw std::invalid_argument("dice: no foreground class among " + std::to_string(classes));
  const std::vector<double> d = dice_per_class(predicted, truth, classes);
  double s = 0.0;
  for (int c = 1; c < classes; ++c) s += d[c];
  return s / static_cast<double>(classes - 1);
}

}  // namespace quartet::medical3d
