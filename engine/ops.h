#pragma once

// Every differentiable op of the engine, declared once. Each op checks its inputs
// (throwing std::invalid_argument that names the op and the shapes), allocates its
// output on the inputs' device, runs that device's kernel (engine/cpu/, engine/cuda/)
// and records its backward when an input requires grad.
//
// Shapes: N = batch, C = channels, D/H/W = depth/height/width, F = features.

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "engine/random.h"
#include "engine/tensor.h"

namespace quartet::engine {

// ---- element-wise ----
// add and mul broadcast as sub and div below when the shapes differ.
Tensor add(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& a, float s);
Tensor relu(const Tensor& x);
// relu(x), written into x's storage when the caller hands over the only reference to it
// (no other handle, and no backward that saved it): one activation-sized buffer less
// while a layer's output turns into the next one's input. Else as relu(x).
Tensor relu_reusing(Tensor x);
Tensor leaky_relu(const Tensor& x, float negative_slope = 0.01f);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor erf(const Tensor& x);  // the error function: GELU's exact form as ONNX exports it
// Inverted dropout: zeroes each element with probability p and scales the rest by
// 1/(1-p); the mask comes from `gen`, so a seed fixes it. requires 0 <= p < 1.
Tensor dropout(const Tensor& x, float p, Generator& gen);

// ---- broadcasting and layout (NumPy's rules, as ONNX's and PyTorch's) ----
// Shapes aligned at the last dim; each size equal or 1, a size 1 repeated. Throws
// std::invalid_argument naming both shapes when they do not broadcast.
Shape broadcast_shape(const Shape& a, const Shape& b);
// a - b and a / b, broadcast; each input's gradient summed over the dims it was repeated on.
Tensor sub(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
// x repeated along its size-1 (and missing leading) dims to `shape`: NumPy's broadcast_to.
// Gradient: summed back (sum_to). x itself when the shape is x's already.
Tensor expand(const Tensor& x, const Shape& shape);
// x summed over the dims where `shape` has size 1 (or lacks, at the front): expand's adjoint.
Tensor sum_to(const Tensor& x, const Shape& shape);
// Dims permuted: out.size(d) = x.size(perm[d]); a new contiguous tensor.
Tensor transpose(const Tensor& x, const std::vector<int>& perm);
// x's values [start, start + length) along `dim`, the other dims whole; a new tensor.
// Gradient: zeros around the part (pad).
Tensor narrow(const Tensor& x, int dim, int64_t start, int64_t length);
// Constant padding: begin[d] cells of `value` before and end[d] after dim d's values,
// one size per dim of x, each >= 0. Gradient: the inner block.
Tensor pad(const Tensor& x, const std::vector<int64_t>& begin, const std::vector<int64_t>& end, float value);
// cond ? a : b element-wise, the three broadcast together (NumPy's rules): cond a float
// mask, nonzero meaning true (ONNX's Where, e.g. a causal mask). NaN and infinities in the
// branch not chosen do not leak. Gradients to a and b, each where it was chosen, summed
// back to its shape; none to cond.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// ONNX's Gather: x's entries along `axis` at `indices`, whole numbers in [-size, size)
// (a negative one counts from the end), laid out as `index_shape` (empty: one scalar
// index, the axis dropped) -> x.shape[:axis] + index_shape + x.shape[axis + 1:]. Gradient:
// each picked entry's gradient summed back where it was read (embedding's kernels).
// requires 0 <= axis < x.dim(), at least one index, and at most 2^24 rows of x before the
// axis's end (indices are kept as floats, as embedding's).
Tensor gather(const Tensor& x, int axis, const std::vector<int64_t>& indices, const Shape& index_shape);
// min(max(x, lo), hi), NaN passing through; gradient where lo <= x <= hi (PyTorch's
// clamp). ReLU6 is clip(x, 0, 6). requires lo <= hi.
Tensor clip(const Tensor& x, float lo, float hi);

// ---- reductions ----
Tensor sum(const Tensor& x);   // scalar, shape [1]
Tensor mean(const Tensor& x);  // scalar, shape [1]

// ---- shape ----
// Same storage, new shape; requires equal numel. One size may be -1 (inferred).
Tensor reshape(const Tensor& x, Shape shape);
// Collapses dims start_dim..end into one: (N, C, H, W) -> (N, C*H*W) for start_dim 1.
Tensor flatten(const Tensor& x, int start_dim = 1);
// Concatenates along `dim` (1: channels, for U-Net skips); other sizes must agree.
Tensor concat(const TensorList& xs, int dim = 1);

// ---- dense ----
Tensor matmul(const Tensor& a, const Tensor& b);  // a: (M, K), b: (K, N) -> (M, N)
// a: (..., M, K), b: (..., K, N) -> (..., M, N); the batch dims (...) broadcast, each
// pair of matrices multiplied as matmul. At most kMaxDims dims.
Tensor batched_matmul(const Tensor& a, const Tensor& b);
// x: (N, in), weight: (out, in) as PyTorch stores it, bias: (out) or undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);

// ---- convolution and pooling (1 to 3 spatial dims; 2D and 3D share one code path) ----
// Per spatial dim; a single value applies to every dim.
struct ConvOptions {
  std::vector<int64_t> stride{1};
  std::vector<int64_t> padding{0};
  std::vector<int64_t> dilation{1};
};
// x: (N, Cin, *spatial), weight: (Cout, Cin, *kernel) (OIHW / OIDHW), bias: (Cout) or
// undefined. Zero padding. Out size per dim: (in + 2p - d(k-1) - 1) / s + 1.
Tensor conv(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvOptions& opt);
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvOptions& opt = {});
Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvOptions& opt = {});

struct PoolOptions {
  std::vector<int64_t> kernel{2};
  std::vector<int64_t> stride{};   // empty: equal to kernel (PyTorch's default)
  std::vector<int64_t> padding{0}; // padded cells never win (-inf)
};
// x: (N, C, *spatial). Gradient goes to the first maximum of each window.
Tensor max_pool(const Tensor& x, const PoolOptions& opt);
Tensor max_pool2d(const Tensor& x, const PoolOptions& opt = {});
// Average over each window; padded cells count as zeros (PyTorch's count_include_pad).
Tensor avg_pool(const Tensor& x, const PoolOptions& opt);
// (N, C, *spatial) -> (N, C): the mean over all spatial positions (2D and 3D).
Tensor global_avg_pool(const Tensor& x);

struct ConvTransposeOptions {
  std::vector<int64_t> stride{1};
  std::vector<int64_t> padding{0};
  std::vector<int64_t> output_padding{0};  // < stride or < dilation, as in PyTorch
  std::vector<int64_t> dilation{1};
};
// The gradient of conv with respect to its input, as an op. x: (N, Cin, *spatial),
// weight: (Cin, Cout, *kernel) (PyTorch's ConvTranspose layout), bias: (Cout) or
// undefined. Out size: (in - 1)s - 2p + d(k - 1) + output_padding + 1.
Tensor conv_transpose(const Tensor& x, const Tensor& weight, const Tensor& bias,
                      const ConvTransposeOptions& opt);
Tensor conv_transpose3d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const ConvTransposeOptions& opt = {});

enum class UpsampleMode { nearest, linear };  // linear: bilinear in 2D, trilinear in 3D
// x: (N, C, *spatial) scaled by an integer factor per spatial dim (one value: all).
// linear uses align_corners=false, as PyTorch's default.
Tensor upsample(const Tensor& x, const std::vector<int64_t>& scale, UpsampleMode mode);

// ---- normalisation ----
// Sums tensors across a group of processes: the data-parallel ranks' per-channel
// statistics, which makes batch_norm a SyncBatchNorm, or the tensor-parallel ranks'
// partial activations and gradients (below). The engine only calls it; the regimes
// implement it over their collectives.
class StatsReducer {
 public:
  virtual ~StatsReducer() = default;
  // Replaces `t` (a host or device tensor) with its element-wise sum over all processes.
  virtual void all_reduce_sum(Tensor& t) = 0;
  // Sequence parallelism's pair (below); a group without them throws std::logic_error.
  // part: k values on every process; whole: size x k, process r's part at [r k, (r+1) k).
  virtual void all_gather(const Tensor& part, Tensor& whole);
  // whole: size x k values on every process; part: k, the sum over the processes of
  // their whole's chunk [rank k, (rank+1) k).
  virtual void reduce_scatter_sum(const Tensor& whole, Tensor& part);
};

struct BatchNormOptions {
  float momentum = 0.1f;  // running = (1 - momentum) running + momentum batch statistic
  float eps = 1e-5f;
  StatsReducer* reducer = nullptr;  // null: statistics of this process's batch only
};
// x: (N, C, *spatial); weight, bias: (C) or undefined; running_mean, running_var: (C).
// Training: normalises with the batch's mean and biased variance (over N and every
// spatial position, across processes when a reducer is given) and updates the running
// statistics with the unbiased variance, as PyTorch does. Eval: uses the running ones.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                  Tensor& running_var, bool training, const BatchNormOptions& opt = {});
// x: (N, C, *spatial); C divisible by groups; weight, bias: (C) or undefined.
// Instance norm is group_norm with groups == C.
Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias,
                  float eps = 1e-5f);

// ---- transformer ----
// Rows of `weight` (rows, F) picked by `indices`: whole numbers in [0, rows) stored as
// floats, any shape -> (*indices.shape, F). Gradient: each picked row's output gradient
// summed into that row of weight's gradient; none to the indices. PyTorch's F.embedding.
Tensor embedding(const Tensor& indices, const Tensor& weight);
// Normalises over the last dim (F = its size): x (..., F); weight, bias (F) or undefined.
// Biased variance, as PyTorch's LayerNorm.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps = 1e-5f);
// x * Phi(x), the exact (erf) form: PyTorch's nn.GELU() default.
Tensor gelu(const Tensor& x);
// Causal multi-head scaled dot-product attention. q, k, v: (B, T, H * Dh), the H heads
// side by side in the last dim (what a Linear of H * Dh outputs); returns (B, T, H * Dh)
// with head h's slice softmax(q_h k_h^T / sqrt(Dh), s <= t only) v_h. Backward recomputes
// the probabilities from the rows' saved log-sum-exp: no (T, T) tensor lives between
// forward and backward. PyTorch's scaled_dot_product_attention(is_causal=True) on the
// (B, H, T, Dh) views.
Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads);

// ---- mixture of experts ----
// Softmax over the last dim, x (..., F): a router's probabilities over its experts.
Tensor softmax(const Tensor& x);
// log sum exp over the last dim, x (..., F) -> (...) ((1) for a vector): a router's
// z-loss (ST-MoE, Zoph et al. 2022) squares it. Its gradient is softmax(x).
Tensor logsumexp(const Tensor& x);
// Each row's k largest probabilities: experts (R * K, row-major) the chosen columns in
// falling order (the lower index first on a tie), gates (R, K) their probabilities,
// divided by the row's sum of the k when normalize (GShard's top-2). The gradient flows
// to the chosen entries of probs; none to the choice. probs (R, E), 1 <= k <= E.
struct TopKGates {
  Tensor gates;
  std::vector<int32_t> experts;
};
TopKGates top_k_gates(const Tensor& probs, int64_t k, bool normalize);
// x (R, F) -> (S, F): row i is x's row rows[i] (in [0, R)); a row may be picked again.
// Gradient: each picked row's gradient summed into its row of x (embedding's kernels).
Tensor gather_rows(const Tensor& x, const std::vector<int32_t>& rows);
// y (S, F), gates (R, K), slots (R * K, row-major) -> (R, F): row r = sum over k of
// gates[r, k] * y[slots[r * K + k]], a slot of -1 (a dropped choice) adding nothing.
// Slots other than -1 are distinct rows of y. Gradients to y and gates.
Tensor combine_rows(const Tensor& y, const Tensor& gates, const std::vector<int32_t>& slots);
// x unchanged, with `loss` (one element) added to what backward minimises: backward
// passes x's gradient on and gives loss the gradient side_loss_weight() (autograd.h),
// the weight the trainer gave this backward's main loss. A layer's auxiliary loss (the
// load-balancing loss of a mixture of experts) so enters every regime's gradient as the
// main loss does, wherever the layer runs.
Tensor add_side_loss(const Tensor& x, const Tensor& loss);

// ---- tensor parallelism: Megatron-LM's f and g ----
// Each process of a tensor-parallel group holds a slice of a layer's matrices; these two
// ops join the slices, with every process of the group calling them in the same order.
// f, where a replicated activation enters a split region: the identity forward; backward
// sums the gradient over the group (each slice contributed a part of it).
Tensor all_reduce_backward(const Tensor& x, StatsReducer& group);
// g, where a split region's partial sums leave: sums x over the group forward; backward
// passes the gradient on unchanged (every process needs all of it).
Tensor all_reduce_forward(const Tensor& x, StatsReducer& group);

// ---- sequence parallelism (Korthikanti et al. 2022): f and g split by the sequence ----
// Between the split regions each of the group's `ranks` processes holds a slice of the
// sequence: process r the positions [r S, (r+1) S) of x (B, S, W).
// Where the slices enter a split region, the column-parallel linears, as Megatron-LM runs
// them: gathers
// x (B, S, W) into (B, ranks S, W) and returns each layer's (weight (out, in), bias or
// undefined) output (B, ranks S, out), keeping only this process's slice for backward.
// The first output's backward all-gathers the sequence again for the weights'
// gradients; the last reduce-scatters the input's gradient, summed over the outputs.
// So the whole sequence lives only while it is used, at one more all-gather.
// requires: every output reaches the loss (its backward runs), else x gets no gradient.
TensorList gathered_linears(const Tensor& x, const std::vector<std::pair<Tensor, Tensor>>& layers, StatsReducer& group,
                            int ranks);
// Where a split region's partial sums x (B, T, W) leave: sums them over the group and
// keeps this process's slice (B, T / ranks, W) forward; backward all-gathers the gradient.
Tensor scatter_sequence(const Tensor& x, StatsReducer& group, int ranks);

// ---- context parallelism: ring attention ----
// The processes a context-parallel group splits every sequence over, in a ring: each
// holds some positions of every sequence and passes blocks of keys and values on to the
// next. ring_attention calls it; the regimes implement it over their collectives.
class AttentionRing {
 public:
  virtual ~AttentionRing() = default;
  virtual int rank() const = 0;  // this process's place in the ring, 0 .. size() - 1
  virtual int size() const = 0;
  // The positions of every sequence that process `rank` holds, ascending; as many on
  // every process.
  virtual const std::vector<int64_t>& positions(int rank) const = 0;
  // Starts passing `send` to the next process of the ring while the previous one's
  // block of as many floats arrives in `recv` (both flat); the function returned waits
  // for both. Shifts complete in the order started; `send` and `recv` must live, and
  // `send` stay unchanged, until then.
  virtual std::function<void()> shift(const Tensor& send, Tensor& recv) = 0;
};

// Causal multi-head attention over sequences split across the processes of `ring` (ring
// attention, Liu et al. 2023). q, k, v (B, L, H * Dh) hold this process's L positions of
// every sequence (ring.positions(ring.rank())); returns this process's rows of
// causal_attention over the whole sequences: a query at position p sees every key at a
// position <= p, wherever it is held. Forward passes each process's keys and values, one
// block of 2 B L H Dh floats, round the ring (size - 1 shifts), computing on the block it
// holds while the next arrives and folding the blocks together by their log-sum-exp (an
// online softmax); blocks a process's queries see nothing of are not computed. Backward
// passes the blocks round again (size - 1 shifts) and, behind them, each block's key and
// value gradients as the processes add their parts (size shifts: the last brings each
// process its own block's), recomputing the probabilities from the saved log-sum-exp.
// Every process of the ring calls it in the same order; `ring` must outlive the backward.
// cpu tensors (no CUDA kernels for its blocks yet).
Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, AttentionRing& ring);

// ---- expert parallelism: tokens to the process that holds their expert ----
// Moves float buffers between the processes of a group by all-to-all (variable counts
// per peer, transport/collectives.h); the regimes implement it over their collectives.
class RowExchanger {
 public:
  virtual ~RowExchanger() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // `in` holds send[p] floats for rank p in rank order; `out` (allocated by the caller,
  // on the host) receives recv[p] floats from rank p in rank order. Every process of the
  // group calls it in the same order, recv[p] equal to rank p's send[rank()].
  virtual void all_to_all(const std::vector<float>& in, const std::vector<int64_t>& send, std::vector<float>& out,
                          const std::vector<int64_t>& recv) = 0;
};
// x (S, F) -> (sum recv_rows, F): send_rows[p] rows of x (in order) to rank p, recv_rows[p]
// rows from rank p. Backward: the gradient rows travel back, counts swapped.
Tensor all_to_all_rows(const Tensor& x, const std::vector<int64_t>& send_rows, const std::vector<int64_t>& recv_rows,
                       RowExchanger& group);

// ---- losses ----
// logits: (N, classes); targets: N class indices in [0, classes). Mean over the batch
// of -log softmax(logits)[target], computed stably.
Tensor cross_entropy(const Tensor& logits, const std::vector<int32_t>& targets);
// Per-voxel and class-weighted form: logits (N, C) or (N, C, *spatial), targets one
// class per (n, *spatial) position in that order. With weights w (C values, or empty
// for all ones): sum_i w[t_i] * nll_i / sum_i w[t_i], PyTorch's weighted mean.
Tensor cross_entropy(const Tensor& logits, const std::vector<int32_t>& targets,
                     const std::vector<float>& class_weights);
// Mean of the element-wise binary cross-entropy of sigmoid(logits) against targets in
// [0, 1], computed stably (log-sum-exp form). Same shapes.
Tensor bce_with_logits(const Tensor& logits, const Tensor& targets);
// Mean of (input - target)^2. Same shapes.
Tensor mse_loss(const Tensor& input, const Tensor& target);
// Soft Dice loss on softmax(logits) over channels: 1 - mean over the scored classes of
// (2 sum p t + smooth) / (sum p + sum t + smooth), sums over the batch and all spatial
// positions. logits (N, C, *spatial); targets as for cross_entropy. Background (class
// 0) is scored only when include_background is true.
// per_sample: the sums run over each sample's positions only and the loss is 1 - the
// mean over samples and scored classes (MONAI's DiceLoss(batch=False), nnU-Net's
// default), so the loss of a batch is the mean of its samples' losses and k micro-batches
// accumulate to the loss of the whole batch.
Tensor soft_dice_loss(const Tensor& logits, const std::vector<int32_t>& targets,
                      bool include_background = false, float smooth = 1e-5f, bool per_sample = false);

// ---- flat buffers: ranges of a tensor's storage, no autograd ----
// Communication buffers (gradient buckets, shards) are flat: these run on the tensors'
// device. Ranges must lie inside the tensors; copies need both on one device.
// dst[dst_offset, +count) = src[src_offset, +count).
void copy_range(Tensor& dst, int64_t dst_offset, const Tensor& src, int64_t src_offset, int64_t count);
// t[offset, +count) = value.
void fill_range(Tensor& t, int64_t offset, int64_t count, float value);
// t[offset, +count) rounded to the nearest IEEE half and back: what an fp16 wire keeps.
void round_to_half_(Tensor& t, int64_t offset, int64_t count);
// The sum of t's squares in double, in index order (clipping by a global norm).
double sum_squares(const Tensor& t);
// t *= s, in place.
void scale_(Tensor& t, float s);

}  // namespace quartet::engine
