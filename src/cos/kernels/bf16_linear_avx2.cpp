// y[M,N] = x[M,K] @ W[N,K]^T (+ bias) for bf16 x, W, bias on an AVX2 + FMA CPU (no AVX-512): the
// sibling of bf16_linear.cpp for the CPUs that lack it (Zen 2/3, client Intel parts), fp32
// accumulation, output rounded to bf16 (round to nearest even, NaN kept quiet).
//
// Row independence: every output y[m][n] is one 8-lane fp32 accumulator that starts at zero and, for
// each 16-wide chunk of K in order (the last one zero-padded), takes an FMA with the chunk's 8 even
// elements of x[m] and W[n], then one with the 8 odd ones; then a fixed horizontal reduction (the two
// 128-bit halves added, then lanes 0+2 / 1+3, then 0+1), the bias add and the rounding. Nothing in that
// sequence depends on M, on which rows share a tile or on the thread that runs it, so row m of a block
// product is bitwise the product of x[m:m+1] alone. The order differs from the AVX-512 kernel's (8 lanes,
// not 16), so the two kinds of machine differ in the last bits; a machine always takes the same one.
//
// Speed: W is streamed once per call (at few rows the cost is reading W), each chunk of a W row is
// widened once per tile and used for all its x rows; x is copied once per call into a zero-padded
// chunk-major buffer, so a tile's x rows for one chunk are adjacent. torch's bf16 GEMM on such CPUs
// widens W for every call of more than one row: a 6-row block costs several one-row steps there.

#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace cos_bf16_avx2 {

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// lanes (0+4, 1+5, 2+6, 3+7), then (0+2, 1+3), then 0+1: one fixed order
inline float reduce(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

struct Problem {
  const uint16_t* x;    // x as bf16, zero-padded to a multiple of 16, chunk-major: the 16 elements of
                        // row m in chunk c at (c * M + m) * 16
  const uint16_t* w;    // [N, K] bf16 bits
  const uint16_t* bias; // [N] bf16 bits or nullptr
  uint16_t* y;          // [M, N] bf16 bits
  int64_t M, N, K, Kfull;
};

// One 16-wide chunk of MB x rows against NB W rows (W rows `w_stride` apart): every accumulator takes
// an FMA with the even elements, then one with the odd elements (two passes, so only one half of W is
// live at a time).
template <int MB, int NB>
inline void chunk(const uint16_t* x, const uint16_t* w, int64_t w_stride, __m256 (&acc)[MB][NB]) {
  const __m256i hi = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  auto load = [](const uint16_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); };
  __m256 wv[NB];
  for (int j = 0; j < NB; ++j) wv[j] = _mm256_castsi256_ps(_mm256_slli_epi32(load(w + j * w_stride), 16));
  for (int m = 0; m < MB; ++m) {
    __m256 xe = _mm256_castsi256_ps(_mm256_slli_epi32(load(x + m * 16), 16));
    asm("" : "+x"(xe));
    for (int j = 0; j < NB; ++j) acc[m][j] = _mm256_fmadd_ps(xe, wv[j], acc[m][j]);
  }
  for (int j = 0; j < NB; ++j) wv[j] = _mm256_castsi256_ps(_mm256_and_si256(load(w + j * w_stride), hi));  // L1 hit
  for (int m = 0; m < MB; ++m) {
    __m256 xo = _mm256_castsi256_ps(_mm256_and_si256(load(x + m * 16), hi));
    asm("" : "+x"(xo));
    for (int j = 0; j < NB; ++j) acc[m][j] = _mm256_fmadd_ps(xo, wv[j], acc[m][j]);
  }
}

// MB rows of x against NB rows of W starting at (m0, n0).
template <int MB, int NB>
inline void tile(const Problem& p, int64_t m0, int64_t n0) {
  __m256 acc[MB][NB];
  for (int m = 0; m < MB; ++m)
    for (int j = 0; j < NB; ++j) acc[m][j] = _mm256_setzero_ps();
  const uint16_t* w = p.w + n0 * p.K;
  const uint16_t* x = p.x + m0 * 16;  // this tile's x rows in the first chunk
  const int64_t x_step = p.M * 16;     // to the next chunk
  int64_t k = 0;
  for (; k < p.Kfull; k += 16, x += x_step) {
    if (k % 32 == 0)  // the next tile's W rows, a 64-byte line each per two chunks
      for (int j = 0; j < NB; ++j) _mm_prefetch(reinterpret_cast<const char*>(w + (NB + j) * p.K + k), _MM_HINT_T1);
    chunk<MB, NB>(x, w + k, p.K, acc);
  }
  if (k < p.K) {  // the last, partial chunk: W's tail copied into zeros (no 16-bit masked loads in AVX2)
    alignas(32) uint16_t tail[NB][16] = {};
    for (int j = 0; j < NB; ++j) std::memcpy(tail[j], w + j * p.K + k, (p.K - k) * sizeof(uint16_t));
    chunk<MB, NB>(x, tail[0], 16, acc);
  }
  for (int m = 0; m < MB; ++m) {
    uint16_t* y = p.y + (m0 + m) * p.N + n0;
    for (int j = 0; j < NB; ++j) {
      float v = reduce(acc[m][j]);
      if (p.bias) v += bf16_to_f32(p.bias[n0 + j]);
      y[j] = f32_to_bf16(v);
    }
  }
}

// Rows [n_begin, n_end) of W for the MB rows of x from m0: NB at a time, then one at a time.
template <int MB, int NB>
inline void strip(const Problem& p, int64_t m0, int64_t n_begin, int64_t n_end) {
  int64_t n = n_begin;
  for (; n + NB <= n_end; n += NB) tile<MB, NB>(p, m0, n);
  for (; n < n_end; ++n) tile<MB, 1>(p, m0, n);
}

// W rows per tile for a given number of x rows: MB * NB accumulators + NB W + 1 x within 16 ymm.
void strip_for(int mb, const Problem& p, int64_t m0, int64_t n_begin, int64_t n_end) {
  switch (mb) {
    case 1: strip<1, 6>(p, m0, n_begin, n_end); break;
    case 2: strip<2, 4>(p, m0, n_begin, n_end); break;
    case 3: strip<3, 2>(p, m0, n_begin, n_end); break;
    case 4: strip<4, 2>(p, m0, n_begin, n_end); break;
    case 5: strip<5, 2>(p, m0, n_begin, n_end); break;
    case 6: strip<6, 2>(p, m0, n_begin, n_end); break;
    case 7: strip<7, 1>(p, m0, n_begin, n_end); break;
    default: strip<8, 1>(p, m0, n_begin, n_end); break;
  }
}

void run(const Problem& p) {
  cos_tiles::for_each_tile(p.M, p.N, [&](int mb, int64_t m0, int64_t n_begin, int64_t n_end) {
    strip_for(mb, p, m0, n_begin, n_end);
  });
}

}  // namespace cos_bf16_avx2

torch::Tensor bf16_linear(torch::Tensor x, torch::Tensor w, c10::optional<torch::Tensor> bias, bool native) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2, "bf16_linear: x [M, K] and w [N, K]");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 && w.scalar_type() == at::kBFloat16, "bf16_linear: bf16 only");
  TORCH_CHECK(x.device().is_cpu() && w.device().is_cpu(), "bf16_linear: CPU tensors only");
  TORCH_CHECK(x.is_contiguous() && w.is_contiguous(), "bf16_linear: contiguous x and w");
  TORCH_CHECK(x.size(1) == w.size(1), "bf16_linear: x and w disagree on K");
  TORCH_CHECK(!native, "bf16_linear: native=True needs the AVX-512 build and a CPU with AVX512_BF16");
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  cos_bf16_avx2::Problem p{};
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK(bias->scalar_type() == at::kBFloat16 && bias->is_contiguous() && bias->numel() == N,
                "bf16_linear: contiguous bf16 bias of N elements");
    p.bias = reinterpret_cast<const uint16_t*>(bias->data_ptr<at::BFloat16>());
  }
  auto y = torch::empty({M, N}, x.options());
  if (M == 0 || N == 0) return y;
  const int64_t Kp = (K + 15) / 16 * 16;
  const uint16_t* xs = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
  std::vector<uint16_t> xh(static_cast<size_t>(M * Kp), 0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) xh[((k / 16) * M + m) * 16 + k % 16] = xs[m * K + k];
  p.x = xh.data();
  p.w = reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>());
  p.y = reinterpret_cast<uint16_t*>(y.data_ptr<at::BFloat16>());
  p.M = M; p.N = N; p.K = K;
  p.Kfull = K / 16 * 16;
  pybind11::gil_scoped_release no_gil;
  cos_bf16_avx2::run(p);
  return y;
}
