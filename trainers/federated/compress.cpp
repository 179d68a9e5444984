#include "trainers/federated/compress.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>

namespace quartet::trainers::federated {

std::vector<std::string> codec_names() { return {"none", "fp16", "topk"}; }

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN (NaN stays NaN: keep a mantissa bit)
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504: inf
  if (abs < 0x38800000u) {  // below the smallest normal half: a subnormal or zero
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // under half the smallest subnormal
    const uint32_t mant = (abs & 0x007fffffu) | 0x00800000u;
    const uint32_t drop = 126u - (abs >> 23);  // half subnormal h = value * 2^24 = mant >> drop
    uint32_t h = mant >> drop;
    const uint32_t rem = mant & ((1u << drop) - 1u);
    const uint32_t half = 1u << (drop - 1u);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even.
  uint32_t h = ((abs - 0x38000000u) >> 13);
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is right
  return static_cast<uint16_t>(sign | h);
}

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t x;
  if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while (!(mant & 0x400u));
      x = sign | (static_cast<uint32_t>(112 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

std::vector<std::byte> encode_fp16(std::span<const float> values) {
  std::vector<std::byte> out(values.size() * 2);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t h = float_to_half(values[i]);
    out[2 * i] = static_cast<std::byte>(h & 0xff);
    out[2 * i + 1] = static_cast<std::byte>(h >> 8);
  }
  return out;
}

std::vector<float> decode_fp16(std::span<const std::byte> bytes, size_t n) {
  if (bytes.size() != 2 * n)
    throw std::invalid_argument("fp16 update: " + std::to_string(bytes.size()) + " bytes for " + std::to_string(n) +
                                " values (expected " + std::to_string(2 * n) + ")");
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i)
    out[i] = half_to_float(static_cast<uint16_t>(static_cast<uint16_t>(bytes[2 * i]) |
                                                 (static_cast<uint16_t>(bytes[2 * i + 1]) << 8)));
  return out;
}

size_t topk_count(size_t n, double fraction) {
  if (!(fraction > 0.0 && fraction <= 1.0))
    throw std::invalid_argument("topk_fraction must be in (0, 1], got " + std::to_string(fraction));
  if (n == 0) return 0;
  return std::clamp<size_t>(static_cast<size_t>(std::ceil(fraction * static_cast<double>(n))), 1, n);
}

namespace {
template <class T>
void put(std::vector<std::byte>& out, size_t at, T v) {
  std::memcpy(out.data() + at, &v, sizeof v);  // little-endian hosts only (x86-64, aarch64)
}
template <class T>
T get(std::span<const std::byte> in, size_t at) {
  T v;
  std::memcpy(&v, in.data() + at, sizeof v);
  return v;
}
}  // namespace

std::vector<std::byte> encode_topk(std::span<const float> delta, double fraction, std::vector<float>& residual) {
  const size_t n = delta.size();
  if (n >= (size_t{1} << 32)) throw std::invalid_argument("topk update: more than 2^32 values");
  if (residual.empty()) residual.assign(n, 0.0f);
  if (residual.size() != n) throw std::invalid_argument("topk update: residual size differs from the update's");
  for (size_t i = 0; i < n; ++i) residual[i] += delta[i];  // residual now holds the corrected update
  const size_t k = topk_count(n, fraction);
  std::vector<uint32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0u);
  auto larger = [&](uint32_t a, uint32_t b) {
    const float fa = std::fabs(residual[a]), fb = std::fabs(residual[b]);
    return fa != fb ? fa > fb : a < b;
  };
  std::nth_element(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(), larger);
  idx.resize(k);
  std::sort(idx.begin(), idx.end());
  std::vector<std::byte> out(16 + 8 * k);
  put<uint64_t>(out, 0, n);
  put<uint64_t>(out, 8, k);
  for (size_t j = 0; j < k; ++j) {
    put<uint32_t>(out, 16 + 4 * j, idx[j]);
    put<float>(out, 16 + 4 * k + 4 * j, residual[idx[j]]);
    residual[idx[j]] = 0.0f;  // sent: nothing of it is left over
  }
  return out;
}

std::vector<float> decode_topk(std::span<const std::byte> bytes, size_t n) {
  if (bytes.size() < 16) throw std::invalid_argument("topk update: shorter than its 16-byte header");
  const uint64_t got_n = get<uint64_t>(bytes, 0), k = get<uint64_t>(bytes, 8);
  if (got_n != n)
    throw std::invalid_argument("topk update: for " + std::to_string(got_n) + " values, expected " + std::to_string(n));
  if (k > n || bytes.size() != 16 + 8 * k)
    throw std::invalid_argument("topk update: " + std::to_string(bytes.size()) + " bytes do not hold k = " +
                                std::to_string(k) + " entries");
  std::vector<float> out(n, 0.0f);
  int64_t previous = -1;
  for (size_t j = 0; j < k; ++j) {
    const uint32_t i = get<uint32_t>(bytes, 16 + 4 * j);
    if (i >= n || static_cast<int64_t>(i) <= previous)
      throw std::invalid_argument("topk update: index " + std::to_string(i) + " out of range or order");
    previous = i;
    out[i] = get<float>(bytes, 16 + 4 * k + 4 * j);
  }
  return out;
}

}  // namespace quartet::trainers::federated
