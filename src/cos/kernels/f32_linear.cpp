// y[M,N] = x[M,K] @ W[N,K]^T (+ bias) for fp32 x, W, bias on an AVX-512 CPU: the fp32 sibling of
// bf16_linear, for members run in fp32.
//
// Row independence: every output y[m][n] is one 16-lane fp32 accumulator that starts at zero, takes
// an FMA with x[m] and W[n] for each 16-wide chunk of K in order (the last one zero-padded), then a
// fixed horizontal reduction and the bias add. Nothing depends on M, on which rows share a tile or on
// the thread, so row m of a block product is bitwise the product of x[m:m+1] alone (torch's sgemm
// picks its blocking by M, and its rows differ in the last bits between a 1-row and a 6-row call).
//
// Speed: at a few rows the cost is reading W once; each 64-byte chunk of a W row is loaded once per
// tile and used for all its x rows (x, a few KB, stays in L1).

#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace cos_f32_linear {

struct Problem {
  const float* x;  // [M, K]
  const float* w;  // [N, K]
  const float* bias;  // [N] or nullptr
  float* y;  // [M, N]
  int64_t M, N, K, Kfull;
  __mmask16 tail;  // elements of the last, partial chunk (0 when K % 16 == 0)
};

template <int MB, int NB>
inline void chunk(const float* x, int64_t xs, const float* w, int64_t K, __mmask16 mask, __m512 (&acc)[MB][NB]) {
  __m512 wv[NB];
  for (int j = 0; j < NB; ++j) wv[j] = mask ? _mm512_maskz_loadu_ps(mask, w + j * K) : _mm512_loadu_ps(w + j * K);
  for (int m = 0; m < MB; ++m) {
    __m512 xv = mask ? _mm512_maskz_loadu_ps(mask, x + m * xs) : _mm512_loadu_ps(x + m * xs);
    asm("" : "+v"(xv));
    for (int j = 0; j < NB; ++j) acc[m][j] = _mm512_fmadd_ps(xv, wv[j], acc[m][j]);
  }
}

template <int MB, int NB>
inline void tile(const Problem& p, int64_t m0, int64_t n0) {
  __m512 acc[MB][NB];
  for (int m = 0; m < MB; ++m)
    for (int j = 0; j < NB; ++j) acc[m][j] = _mm512_setzero_ps();
  const float* w = p.w + n0 * p.K;
  const float* x = p.x + m0 * p.K;
  int64_t k = 0;
  for (; k < p.Kfull; k += 16) {
    for (int j = 0; j < NB; ++j) _mm_prefetch(reinterpret_cast<const char*>(w + (NB + j) * p.K + k), _MM_HINT_T1);
    chunk<MB, NB>(x + k, p.K, w + k, p.K, 0, acc);
  }
  if (p.tail) chunk<MB, NB>(x + k, p.K, w + k, p.K, p.tail, acc);
  for (int m = 0; m < MB; ++m) {
    float* y = p.y + (m0 + m) * p.N + n0;
    for (int j = 0; j < NB; ++j) {
      float v = _mm512_reduce_add_ps(acc[m][j]);
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

// accumulators + W registers + one x register within 32 zmm
void strip_for(int mb, const Problem& p, int64_t m0, int64_t n_begin, int64_t n_end) {
  switch (mb) {
    case 1: strip<1, 12>(p, m0, n_begin, n_end); break;
    case 2: strip<2, 8>(p, m0, n_begin, n_end); break;
    case 3: strip<3, 6>(p, m0, n_begin, n_end); break;
    case 4: strip<4, 6>(p, m0, n_begin, n_end); break;
    case 5: strip<5, 4>(p, m0, n_begin, n_end); break;
    case 6: strip<6, 4>(p, m0, n_begin, n_end); break;
    case 7: strip<7, 3>(p, m0, n_begin, n_end); break;
    default: strip<8, 3>(p, m0, n_begin, n_end); break;
  }
}

void run(const Problem& p) {
  cos_tiles::for_each_tile(p.M, p.N, [&](int mb, int64_t m0, int64_t n_begin, int64_t n_end) {
    strip_for(mb, p, m0, n_begin, n_end);
  });
}

}  // namespace cos_f32_linear

torch::Tensor f32_linear(torch::Tensor x, torch::Tensor w, c10::optional<torch::Tensor> bias) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2, "f32_linear: x [M, K] and w [N, K]");
  TORCH_CHECK(x.scalar_type() == at::kFloat && w.scalar_type() == at::kFloat, "f32_linear: fp32 only");
  TORCH_CHECK(x.device().is_cpu() && w.device().is_cpu(), "f32_linear: CPU tensors only");
  TORCH_CHECK(x.is_contiguous() && w.is_contiguous(), "f32_linear: contiguous x and w");
  TORCH_CHECK(x.size(1) == w.size(1), "f32_linear: x and w disagree on K");
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  cos_f32_linear::Problem p{};
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
  p.Kfull = K / 16 * 16;
  p.tail = static_cast<__mmask16>((1u << (K % 16)) - 1u);
  pybind11::gil_scoped_release no_gil;
  cos_f32_linear::run(p);
  return y;
}
