// Attention over a KV cache with every query row computed on its own, in one fixed order (AVX-512).
//
// out[b, m, h, :] = sum_t softmax_t(scaling * q[b, h, m] . k[b, h / G, t]) v[b, h / G, t], over the keys
// t that row m may see: t <= T - M + m (causal, the block being the last M positions), further
// restricted by `allowed[b, m, t]` when a mask is given (padding, draft trees).
//
// Row invariance: the keys a row sees are listed in increasing t; the j-th of them gets score s_j =
// scaling * (a 16-lane fp32 FMA chain over 16-wide chunks of D, in order, then a fixed horizontal
// reduction). Then max_j s_j (exact in any order), p_j = exp(s_j - max) (an elementwise polynomial),
// sum_j p_j in 16 lanes by j mod 16 in increasing j, a fixed horizontal reduction, and out =
// (sum_j p_j v_j, FMAs in increasing j per 16-wide chunk of D) * (1 / sum), rounded to the output
// dtype (bf16: round to nearest even). Every step depends only on the row's own q, the keys it sees
// and their order: not on M, on which rows share the call, on where in the block a key sits (so a
// draft tree's node, whose ancestors are not adjacent, gets what the same path laid out as a chain
// gets), or on the thread that computes it. Rows are split between threads whole.
//
// Inputs may be bf16 or fp32 (q, k, v of one dtype); accumulation is fp32 either way.

#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace cos_attention {

// exp(x) for x <= 0 (scores minus their max), elementwise: x = n ln2 + r, |r| <= ln2 / 2, exp(r) by
// a degree-6 polynomial (Horner, FMAs), times 2^n. Below -87.3 the result flushes to 0 (as exp does
// in fp32 up to denormals, which carry no weight next to the max's exp(0) = 1).
inline __m512 exp_nonpositive(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.3f);
  const __mmask16 tiny = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  x = _mm512_max_ps(x, lo);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);        // ln2 split in two: hi
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);            //                   lo
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~tiny), _mm512_scalef_ps(p, n));
}

// 16 elements from d0 of a row (fewer under `mask`, zero-filled), widened to fp32.
template <typename T>
inline __m512 load16(const T* p, __mmask16 mask);

template <>
inline __m512 load16<float>(const float* p, __mmask16 mask) {
  return _mm512_maskz_loadu_ps(mask, p);
}

template <>
inline __m512 load16<at::BFloat16>(const at::BFloat16* p, __mmask16 mask) {
  const __m256i h = _mm256_maskz_loadu_epi16(mask, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

constexpr int kMaxChunks = kMaxHeadDim / 16;

template <typename T>
void one_row(const Shape& s, const T* q, const T* k, const T* v, const bool* allowed, float scaling,
             int64_t b, int64_t h, int64_t m, T* out, std::vector<int64_t>& keys, std::vector<float>& p) {
  const int64_t hk = h / (s.Hq / s.Hkv);
  const int64_t chunks = (s.D + 15) / 16;
  const __mmask16 last = static_cast<__mmask16>(s.D % 16 ? (1u << (s.D % 16)) - 1u : 0xffffu);
  auto mask_of = [&](int64_t c) { return c + 1 == chunks ? last : static_cast<__mmask16>(0xffff); };
  const T* qr = q + b * s.qs[0] + h * s.qs[1] + m * s.qs[2];
  const T* kb = k + b * s.ks[0] + hk * s.ks[1];
  const T* vb = v + b * s.vs[0] + hk * s.vs[1];

  // 1. the keys this row sees, in increasing position
  const int64_t last_key = s.T - s.M + m;
  keys.clear();
  for (int64_t t = 0; t <= last_key; ++t)
    if (!allowed || allowed[b * s.ms[0] + m * s.ms[1] + t * s.ms[2]]) keys.push_back(t);
  const int64_t n = static_cast<int64_t>(keys.size());
  std::vector<float> o(static_cast<size_t>(chunks * 16), 0.0f);
  if (n == 0) {  // a fully masked row (padding): zeros, as SDPA's math path gives after its NaN guard
    store_row(out, o.data(), s.D);
    return;
  }

  // 2. scores, one fixed-order dot product each
  __m512 qv[kMaxChunks];
  for (int64_t c = 0; c < chunks; ++c) qv[c] = load16<T>(qr + 16 * c, mask_of(c));
  p.assign(static_cast<size_t>((n + 15) / 16 * 16), -std::numeric_limits<float>::infinity());
  float best = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    const T* kr = kb + keys[j] * s.ks[2];
    __m512 acc = _mm512_mul_ps(qv[0], load16<T>(kr, mask_of(0)));
    for (int64_t c = 1; c < chunks; ++c) acc = _mm512_fmadd_ps(qv[c], load16<T>(kr + 16 * c, mask_of(c)), acc);
    p[j] = _mm512_reduce_add_ps(acc) * scaling;
    best = std::max(best, p[j]);
  }

  // 3. p_j = exp(s_j - max), summed in 16 lanes by j mod 16 (the padding past n is exp(-inf) = 0)
  const __m512 shift = _mm512_set1_ps(best);
  __m512 lanes = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) {
    const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(&p[j]), shift));
    _mm512_storeu_ps(&p[j], e);
    lanes = _mm512_add_ps(lanes, e);
  }
  const float inv = 1.0f / _mm512_reduce_add_ps(lanes);

  // 4. the weighted sum of values, in increasing j, then the normalisation
  __m512 acc[kMaxChunks];
  for (int64_t c = 0; c < chunks; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    const __m512 w = _mm512_set1_ps(p[j]);
    const T* vr = vb + keys[j] * s.vs[2];
    for (int64_t c = 0; c < chunks; ++c) acc[c] = _mm512_fmadd_ps(w, load16<T>(vr + 16 * c, mask_of(c)), acc[c]);
  }
  const __m512 scale = _mm512_set1_ps(inv);
  for (int64_t c = 0; c < chunks; ++c) _mm512_storeu_ps(&o[16 * c], _mm512_mul_ps(acc[c], scale));
  store_row(out, o.data(), s.D);
}

}  // namespace cos_attention
