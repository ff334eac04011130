// Attention over a KV cache with every query row computed on its own, in one fixed order: the AVX2 + FMA
// build of row_attention.cpp (same definition, same steps; read its header), with 8-lane vectors.
//
// Row invariance: the j-th key a row sees gets score s_j = scaling * (an 8-lane fp32 FMA chain over
// 8-wide chunks of D, in order, then the fixed horizontal reduction of bf16_linear_avx2.cpp). Then
// max_j s_j, p_j = exp(s_j - max) (the same polynomial as the AVX-512 build), sum_j p_j in 8 lanes by
// j mod 8 in increasing j, and out = (sum_j p_j v_j, FMAs in increasing j per 8-wide chunk of D) *
// (1 / sum), rounded to the output dtype. Every step depends only on the row's own q, the keys it sees
// and their order, never on M, on the other rows of the call or on the thread.

#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace cos_attention {

// exp(x) for x <= 0, elementwise: x = n ln2 + r, |r| <= ln2 / 2, exp(r) by a degree-6 polynomial
// (Horner, FMAs), times 2^n built in the exponent bits (n >= -126 after the clamp, so 2^n is normal).
// Below -87.3 the result flushes to 0.
inline __m256 exp_nonpositive(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.3f);
  const __m256 tiny = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_max_ps(x, lo);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);        // ln2 split in two: hi
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);            //                   lo
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i two_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, _mm256_castsi256_ps(two_n)));
}

// 8 elements of a row from p (`valid` < 8 of them on the last chunk of D, the rest zero), widened to fp32.
inline __m256 load8(const float* p, int valid) {
  if (valid == 8) return _mm256_loadu_ps(p);
  alignas(32) float buf[8] = {};
  std::memcpy(buf, p, valid * sizeof(float));
  return _mm256_load_ps(buf);
}

inline __m256 load8(const at::BFloat16* p, int valid) {
  alignas(16) uint16_t buf[8] = {};
  std::memcpy(buf, p, valid * sizeof(uint16_t));
  const __m128i h = _mm_load_si128(reinterpret_cast<const __m128i*>(buf));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

inline float reduce8(__m256 v) {  // (0+4, 1+5, 2+6, 3+7), then (0+2, 1+3), then 0+1
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

constexpr int kMaxChunks = kMaxHeadDim / 8;

template <typename T>
void one_row(const Shape& s, const T* q, const T* k, const T* v, const bool* allowed, float scaling,
             int64_t b, int64_t h, int64_t m, T* out, std::vector<int64_t>& keys, std::vector<float>& p) {
  const int64_t hk = h / (s.Hq / s.Hkv);
  const int64_t chunks = (s.D + 7) / 8;
  auto valid = [&](int64_t c) { return static_cast<int>(std::min<int64_t>(8, s.D - 8 * c)); };
  const T* qr = q + b * s.qs[0] + h * s.qs[1] + m * s.qs[2];
  const T* kb = k + b * s.ks[0] + hk * s.ks[1];
  const T* vb = v + b * s.vs[0] + hk * s.vs[1];

  // 1. the keys this row sees, in increasing position
  const int64_t last_key = s.T - s.M + m;
  keys.clear();
  for (int64_t t = 0; t <= last_key; ++t)
    if (!allowed || allowed[b * s.ms[0] + m * s.ms[1] + t * s.ms[2]]) keys.push_back(t);
  const int64_t n = static_cast<int64_t>(keys.size());
  std::vector<float> o(static_cast<size_t>(chunks * 8), 0.0f);
  if (n == 0) {  // a fully masked row (padding): zeros, as SDPA's math path gives after its NaN guard
    store_row(out, o.data(), s.D);
    return;
  }

  // 2. scores, one fixed-order dot product each
  __m256 qv[kMaxChunks];
  for (int64_t c = 0; c < chunks; ++c) qv[c] = load8(qr + 8 * c, valid(c));
  p.assign(static_cast<size_t>((n + 7) / 8 * 8), -std::numeric_limits<float>::infinity());
  float best = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    const T* kr = kb + keys[j] * s.ks[2];
    __m256 acc = _mm256_mul_ps(qv[0], load8(kr, valid(0)));
    for (int64_t c = 1; c < chunks; ++c) acc = _mm256_fmadd_ps(qv[c], load8(kr + 8 * c, valid(c)), acc);
    p[j] = reduce8(acc) * scaling;
    best = std::max(best, p[j]);
  }

  // 3. p_j = exp(s_j - max), summed in 8 lanes by j mod 8 (the padding past n is exp(-inf) = 0)
  const __m256 shift = _mm256_set1_ps(best);
  __m256 lanes = _mm256_setzero_ps();
  for (int64_t j = 0; j < n; j += 8) {
    const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(&p[j]), shift));
    _mm256_storeu_ps(&p[j], e);
    lanes = _mm256_add_ps(lanes, e);
  }
  const float inv = 1.0f / reduce8(lanes);

  // 4. the weighted sum of values, in increasing j, then the normalisation
  __m256 acc[kMaxChunks];
  for (int64_t c = 0; c < chunks; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    const __m256 w = _mm256_set1_ps(p[j]);
    const T* vr = vb + keys[j] * s.vs[2];
    for (int64_t c = 0; c < chunks; ++c) acc[c] = _mm256_fmadd_ps(w, load8(vr + 8 * c, valid(c)), acc[c]);
  }
  const __m256 scale = _mm256_set1_ps(inv);
  for (int64_t c = 0; c < chunks; ++c) _mm256_storeu_ps(&o[8 * c], _mm256_mul_ps(acc[c], scale));
  store_row(out, o.data(), s.D);
}

}  // namespace cos_attention
