#pragma once

// Compression of federated updates (client -> server). An update is the change of the
// client's weights over the round, delta = local - global, flattened across tensors.
//   fp16: every value as IEEE half (round to nearest even), 2 bytes a value.
//   topk: the k values of largest magnitude with their flat indices (u32 index + f32
//         value, 8 bytes each), k = max(1, ceil(fraction * n)); with error feedback
//         (Stich et al. 2018): what was not sent is kept by the client and added to its
//         next update, so nothing is lost, only delayed.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace quartet::trainers::federated {

std::vector<std::string> codec_names();  // none, fp16, topk

uint16_t float_to_half(float f);
float half_to_float(uint16_t h);

// fp16: n values -> 2n bytes (little-endian) and back. decode requires bytes.size() == 2 * n.
std::vector<std::byte> encode_fp16(std::span<const float> values);
std::vector<float> decode_fp16(std::span<const std::byte> bytes, size_t n);

// How many values top-k keeps of n. requires 0 < fraction <= 1.
size_t topk_count(size_t n, double fraction);

// Top-k with error feedback. `residual` (empty: zeros) is added to `delta` first; the k
// largest |values| of the sum are encoded (ties: the lower index) and the rest becomes
// the new residual. Layout: u64 n, u64 k, k u32 indices ascending, k f32 values.
// requires n < 2^32.
std::vector<std::byte> encode_topk(std::span<const float> delta, double fraction, std::vector<float>& residual);
// The dense delta (zeros where nothing was sent). throws std::invalid_argument when the
// bytes are malformed (sizes, an index out of range or out of order).
std::vector<float> decode_topk(std::span<const std::byte> bytes, size_t n);

}  // namespace quartet::trainers::federated
