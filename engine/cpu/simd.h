#pragma once

// The float vector of the ISA this file is compiled for, for the few hand-vectorised
// kernels (engine/cpu/conv.cpp's one-channel direct convolution, engine/cpu/pool.cpp's
// 2x2 max pooling): 16 lanes under
// AVX-512, 8 under AVX2 with FMA. QUARTET_SIMD is defined where there are lanes;
// elsewhere callers keep their scalar loop. A mask covers the first n lanes of a load
// or store, so a row's tail is read and written without touching memory past its end
// (masked-out lanes are not accessed: AVX-512's masked moves and AVX's vmaskmovps both
// suppress their faults).

#include <cstdint>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#define QUARTET_SIMD 1
#endif

namespace quartet::engine::cpu::simd {

// The widest vector ISA this build's code (Eigen's packets, the kernels here) was
// compiled for: -march decides it, not the machine that runs it.
#if defined(__AVX512F__)
inline constexpr const char* kBuildIsa = "AVX-512";
#elif defined(__AVX2__) && defined(__FMA__)
inline constexpr const char* kBuildIsa = "AVX2";
#else
inline constexpr const char* kBuildIsa = "SSE2";
#endif

#if defined(__AVX512F__)

inline constexpr int kSimdLanes = 16;
using Vec = __m512;
using Mask = __mmask16;

inline Mask first_lanes(int64_t n) { return n >= 16 ? Mask(0xFFFF) : Mask((1u << n) - 1); }
inline Vec load(const float* p) { return _mm512_loadu_ps(p); }
inline Vec load(const float* p, Mask m) { return _mm512_maskz_loadu_ps(m, p); }
inline void store(float* p, Mask m, Vec v) { _mm512_mask_storeu_ps(p, m, v); }
inline Vec splat(float x) { return _mm512_set1_ps(x); }
inline Vec zero() { return _mm512_setzero_ps(); }
inline Vec fmadd(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline float sum(Vec v) { return _mm512_reduce_add_ps(v); }

// A lane-wise condition.
using Pred = __mmask16;
// Where `cell` takes over from `best` in a max: best is a number and cell is not <= it
// (greater, or NaN over a number).
inline Pred takes_over(Vec cell, Vec best) {
  return _mm512_cmp_ps_mask(best, best, _CMP_ORD_Q) & _mm512_cmp_ps_mask(cell, best, _CMP_NLE_UQ);
}
inline Vec select(Pred p, Vec if_false, Vec if_true) { return _mm512_mask_blend_ps(p, if_false, if_true); }
// g where w == k, +0 elsewhere.
inline Vec where_equal(Vec w, float k, Vec g) {
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(w, _mm512_set1_ps(k), _CMP_EQ_OQ), g);
}
// The even and the odd elements of the 2 * kSimdLanes floats lo, hi.
inline void deinterleave(Vec lo, Vec hi, Vec& even, Vec& odd) {
  const __m512i e = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i o = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  even = _mm512_permutex2var_ps(lo, e, hi);
  odd = _mm512_permutex2var_ps(lo, o, hi);
}
// a0 b0 a1 b1 ...: the first kSimdLanes in lo, the rest in hi.
inline void interleave(Vec a, Vec b, Vec& lo, Vec& hi) {
  const __m512i l = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i h = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  lo = _mm512_permutex2var_ps(a, l, b);
  hi = _mm512_permutex2var_ps(a, h, b);
}

#elif defined(__AVX2__) && defined(__FMA__)

inline constexpr int kSimdLanes = 8;
using Vec = __m256;
using Mask = __m256i;

inline Mask first_lanes(int64_t n) {
  const int k = n >= 8 ? 8 : static_cast<int>(n);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline Vec load(const float* p) { return _mm256_loadu_ps(p); }
inline Vec load(const float* p, Mask m) { return _mm256_maskload_ps(p, m); }
inline void store(float* p, Mask m, Vec v) { _mm256_maskstore_ps(p, m, v); }
inline Vec splat(float x) { return _mm256_set1_ps(x); }
inline Vec zero() { return _mm256_setzero_ps(); }
inline Vec fmadd(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline float sum(Vec v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// A lane-wise condition: all ones where it holds.
using Pred = __m256;
// Where `cell` takes over from `best` in a max: best is a number and cell is not <= it
// (greater, or NaN over a number).
inline Pred takes_over(Vec cell, Vec best) {
  return _mm256_and_ps(_mm256_cmp_ps(best, best, _CMP_ORD_Q), _mm256_cmp_ps(cell, best, _CMP_NLE_UQ));
}
inline Vec select(Pred p, Vec if_false, Vec if_true) { return _mm256_blendv_ps(if_false, if_true, p); }
// g where w == k, +0 elsewhere.
inline Vec where_equal(Vec w, float k, Vec g) {
  return _mm256_and_ps(_mm256_cmp_ps(w, _mm256_set1_ps(k), _CMP_EQ_OQ), g);
}
// The even and the odd elements of the 2 * kSimdLanes floats lo, hi. shuffle_ps works
// within 128-bit halves (lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6); the 64-bit permute puts
// the pairs in order.
inline void deinterleave(Vec lo, Vec hi, Vec& even, Vec& odd) {
  const auto order = [](__m256 v) {
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), _MM_SHUFFLE(3, 1, 2, 0)));
  };
  even = order(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0)));
  odd = order(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1)));
}
// a0 b0 a1 b1 ...: the first kSimdLanes in lo, the rest in hi.
inline void interleave(Vec a, Vec b, Vec& lo, Vec& hi) {
  const __m256 l = _mm256_unpacklo_ps(a, b), h = _mm256_unpackhi_ps(a, b);  // within halves
  lo = _mm256_permute2f128_ps(l, h, 0x20);
  hi = _mm256_permute2f128_ps(l, h, 0x31);
}

#endif

}  // namespace quartet::engine::cpu::simd
