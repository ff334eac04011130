// What both builds of the attention kernel share (row_attention.cpp for AVX-512, row_attention_avx2.cpp
// for AVX2): the problem's shape and strides, and the rounding of an fp32 output row to the output dtype.
// The torch-facing function is in row_attention_op.cpp.

#include <torch/extension.h>

#include <cstdint>
#include <cstring>

namespace cos_attention {

constexpr int kMaxHeadDim = 256;

struct Shape {
  int64_t B, Hq, Hkv, M, T, D;
  int64_t qs[3], ks[3], vs[3];  // strides of b, h, position (the last dim is contiguous)
  int64_t ms[3];                // strides of the mask's b, m, t (0 where broadcast); unused without a mask
};

inline void store_row(float* out, const float* v, int64_t n) { std::memcpy(out, v, n * sizeof(float)); }

inline void store_row(at::BFloat16* out, const float* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &v[i], sizeof u);
    uint16_t h;
    if ((u & 0x7fffffffu) > 0x7f800000u) h = static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN
    else h = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    std::memcpy(&out[i], &h, sizeof h);
  }
}

}  // namespace cos_attention
