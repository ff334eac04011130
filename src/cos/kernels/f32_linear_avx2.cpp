// y[M,N] = x[M,K] @ W[N,K]^T (+ bias) for fp32 x, W, bias on an AVX2 + FMA CPU: the sibling of
// f32_linear.cpp for CPUs without AVX-512.
//
// Row independence: every output y[m][n] is one 8-lane fp32 accumulator that starts at zero, takes an
// FMA with x[m] and W[n] for each 8-wide chunk of K in order (the last one zero-filled by a masked
// load), then the fixed horizontal reduction of bf16_linear_avx2.cpp and the bias add. Nothing depends
// on M, on which rows share a tile or on the thread, so row m of a block product is bitwise the
// product of x[m:m+1] alone.

#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace cos_f32_avx2 {

struct Problem {
  const float* x;  // [M, K]
  const float* w;  // [N, K]
  const float* bias;  // [N] or nullptr
  float* y;  // [M, N]
  int64_t M, N, K, Kfull;
  __m256i tail;  // lanes of the last, partial chunk (all-ones bits), for masked loads
};

template <int MB, int NB, bool Tail>
inline void chunk(const float* x, int64_t xs, const float* w, int64_t K, __m256i mask, __m256 (&acc)[MB][NB]) {
  __m256 wv[NB];
  for (int j = 0; j < NB; ++j) wv[j] = Tail ? _mm256_maskload_ps(w + j * K, mask) : _mm256_loadu_ps(w + j * K);
  for (int m = 0; m < MB; ++m) {
    __m256 xv = Tail ? _mm256_maskload_ps(x + m * xs, mask) : _mm256_loadu_ps(x + m * xs);
    asm("" : "+x"(xv));
    for (int j = 0; j < NB; ++j) acc[m][j] = _mm256_fmadd_ps(xv, wv[j], acc[m][j]);
  }
}

template <int MB, int NB>
inline void tile(const Problem& p, int64_t m0, int64_t n0) {
  __m256 acc[MB][NB];
  for (int m = 0; m < MB; ++m)
    for (int j = 0; j < NB; ++j) acc[m][j] = _mm256_setzero_ps();
  const float* w = p.w + n0 * p.K;
  const float* x = p.x + m0 * p.K;
  int64_t k = 0;
  for (; k < p.Kfull; k += 8) {
    if (k % 16 == 0)  // the next tile's W rows, a 64-byte line each per two chunks
      for (int j = 0; j < NB; ++j) _mm_prefetch(reinterpret_cast<const char*>(w + (NB + j) * p.K + k), _MM_HINT_T1);
    chunk<MB, NB, false>(x + k, p.K, w + k, p.K, p.tail, acc);
  }
  if (k < p.K) chunk<MB, NB, true>(x + k, p.K, w + k, p.K, p.tail, acc);
  for (int m = 0; m < MB; ++m) {
    float* y = p.y + (m0 + m) * p.N + n0;
    for (int j = 0; j < NB; ++j) {
      float v = cos_bf16_avx2::reduce(acc[m][j]);
      if (p.bias) v += p.bias[n0 + j];
      y[j] = v;
    }
  }
}

template <int MB, int NB>
inline void strip(const Problem& p, int64_t m0, int64_t n_begin, int64_t n_end) {
  int64_t n = n_begin;
  for (; n + NB <= n_end; n += NB) tile<MB, NB>(p, m0, n);
  for (; n < n_end; ++n) tile<MB, 1>(p, m0, n);
}

// accumulators + W registers + one x register within 16 ymm
void strip_for(int mb, const Problem& p, int64_t m0, int64_t n_begin, int64_t n_end) {
  switch (mb) {
    case 1: strip<1, 6>(p, m0, n_begin, n_end); break;
    case 2: strip<2, 4>(p, m0, n_begin, n_end); break;
    case 3: strip<3, 3>(p, m0, n_begin, n_end); break;
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

}  // namespace cos_f32_avx2

torch::Tensor f32_linear(torch::Tensor x, torch::Tensor w, c10::optional<torch::Tensor> bias) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2, "f32_linear: x [M, K] and w [N, K]");
  TORCH_CHECK(x.scalar_type() == at::kFloat && w.scalar_type() == at::kFloat, "f32_linear: fp32 only");
  TORCH_CHECK(x.device().is_cpu() && w.device().is_cpu(), "f32_linear: CPU tensors only");
  TORCH_CHECK(x.is_contiguous() && w.is_contiguous(), "f32_linear: contiguous x and w");
  TORCH_CHECK(x.size(1) == w.size(1), "f32_linear: x and w disagree on K");
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  cos_f32_avx2::Problem p{};
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK(bias->scalar_type() == at::kFloat && bias->is_contiguous() && bias->numel() == N,
                "f32_linear: contiguous fp32 bias of N elements");
    p.bias = bias->data_ptr<float>();
  }
  auto y = torch::empty({M, N}, x.options());
  if (M == 0 || N == 0) return y;
  p.x = x.data_ptr<float>();
  p.w = w.data_ptr<float>();
  p.y = y.data_ptr<float>();
  p.M = M; p.N = N; p.K = K;
  p.Kfull = K / 8 * 8;
  const int r = static_cast<int>(K % 8);
  p.tail = _mm256_setr_epi32(r > 0 ? -1 : 0, r > 1 ? -1 : 0, r > 2 ? -1 : 0, r > 3 ? -1 : 0,
                             r > 4 ? -1 : 0, r > 5 ? -1 : 0, r > 6 ? -1 : 0, 0);
  pybind11::gil_scoped_release no_gil;
  cos_f32_avx2::run(p);
  return y;
}
