// y[M,N] = x[M,K] @ W[N,K]^T (+ bias) for bf16 x, W, bias on an AVX-512 CPU, fp32 accumulation,
// output rounded to bf16 (round to nearest even, NaN kept quiet).
//
// Row independence: every output y[m][n] is one fp32 accumulator (16 lanes) that starts at zero and,
// for each 32-wide chunk of K in order (the last one zero-padded), takes fmadd with the chunk's 16 even
// elements of x[m] and W[n], then fmadd with the 16 odd ones; then a fixed horizontal reduction, the
// bias add and the rounding. Nothing in that sequence depends on M, on which rows share a tile or on
// the thread that runs it, so row m of a block product is bitwise the product of x[m:m+1] alone.
// Tiling only decides which accumulators live in registers together.
// Where the CPU has AVX512_BF16 (`native`), each chunk is instead one vdpbf16ps per accumulator: lane i
// adds x[2i+1] * W[2i+1], then x[2i] * W[2i] (fp32 products, denormals flushed). A different order
// from the path above, so the two differ in the last bits, but again nothing depends on M or on the
// thread: row independence holds on either path, and a machine always takes the same one.
//
// Speed: W is streamed once per call (at few rows the cost is reading W). Each 64-byte chunk of a W
// row is converted to fp32 once, without a shuffle (see chunk()), and used for all x rows of the
// tile; x is copied once per call into a zero-padded bf16 buffer laid out chunk-major, so the x rows a
// tile reads for one chunk are adjacent (one stream for the prefetcher, no cache set conflicts).

#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#pragma GCC push_options
#pragma GCC target("avx512bf16")  // only the explicit vdpbf16ps below uses it; run() takes it where the CPU has it

namespace {

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

struct Problem {
  const uint16_t* x;    // x as bf16, zero-padded to Kp = K rounded up to 32, chunk-major: the 32 elements
                        // of row m in chunk c at (c * M + m) * 32, so a tile's rows are adjacent
  const uint16_t* w;    // [N, K] bf16 bits
  const uint16_t* bias; // [N] bf16 bits or nullptr
  uint16_t* y;          // [M, N] bf16 bits
  int64_t M, N, K, Kp, Kfull;
  __mmask32 tail;       // elements of the last, partial chunk (0 when K % 32 == 0)
};

// One 32-wide chunk of MB x rows against NB W rows: for every accumulator an FMA with the even
// elements, then one with the odd elements. Done as two passes (even for all, then odd for all), so
// only one half of W is live at a time: MB * NB accumulators + NB W + 1 x registers fit in 32 zmm for
// the tiles below. x is kept in bf16 and split like W (every tile reads all of x again, so half the
// bytes keep more of it in L1; measured faster than an fp32 copy of x at every M). The empty asm keeps
// each x vector in a register instead of being folded into NB FMAs as a memory operand.
template <int MB, int NB>
inline void chunk_split(const uint16_t* x, const uint16_t* w, int64_t K, __mmask32 mask, __m512 (&acc)[MB][NB]) {
  const __m512i hi = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  auto load = [&](const uint16_t* p) {
    return mask ? _mm512_maskz_loadu_epi16(mask, p) : _mm512_loadu_si512(p);
  };
  __m512 wv[NB];
  for (int j = 0; j < NB; ++j) wv[j] = _mm512_castsi512_ps(_mm512_slli_epi32(load(w + j * K), 16));
  for (int m = 0; m < MB; ++m) {
    __m512 xe = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_loadu_si512(x + m * 32), 16));
    asm("" : "+v"(xe));
    for (int j = 0; j < NB; ++j) acc[m][j] = _mm512_fmadd_ps(xe, wv[j], acc[m][j]);
  }
  for (int j = 0; j < NB; ++j) wv[j] = _mm512_castsi512_ps(_mm512_and_si512(load(w + j * K), hi));  // L1 hit
  for (int m = 0; m < MB; ++m) {
    __m512 xo = _mm512_castsi512_ps(_mm512_and_si512(_mm512_loadu_si512(x + m * 32), hi));
    asm("" : "+v"(xo));
    for (int j = 0; j < NB; ++j) acc[m][j] = _mm512_fmadd_ps(xo, wv[j], acc[m][j]);
  }
}

// The same chunk with native bf16 dot products: W and x stay bf16, one instruction per accumulator.
template <int MB, int NB>
inline void chunk_native(const uint16_t* x, const uint16_t* w, int64_t K, __mmask32 mask, __m512 (&acc)[MB][NB]) {
  __m512i wv[NB];
  for (int j = 0; j < NB; ++j) wv[j] = mask ? _mm512_maskz_loadu_epi16(mask, w + j * K) : _mm512_loadu_si512(w + j * K);
  for (int m = 0; m < MB; ++m) {
    __m512i xv = _mm512_loadu_si512(x + m * 32);
    asm("" : "+v"(xv));
    for (int j = 0; j < NB; ++j) acc[m][j] = _mm512_dpbf16_ps(acc[m][j], (__m512bh)xv, (__m512bh)wv[j]);
  }
}

template <int MB, int NB, bool Native>
inline void chunk(const uint16_t* x, const uint16_t* w, int64_t K, __mmask32 mask, __m512 (&acc)[MB][NB]) {
  if constexpr (Native) chunk_native<MB, NB>(x, w, K, mask, acc);
  else chunk_split<MB, NB>(x, w, K, mask, acc);
}

// MB rows of x against NB rows of W starting at (m0, n0).
template <int MB, int NB, bool Native>
inline void tile(const Problem& p, int64_t m0, int64_t n0) {
  __m512 acc[MB][NB];
  for (int m = 0; m < MB; ++m)
    for (int j = 0; j < NB; ++j) acc[m][j] = _mm512_setzero_ps();
  const uint16_t* w = p.w + n0 * p.K;
  const uint16_t* x = p.x + m0 * 32;  // this tile's x rows in the first chunk
  const int64_t x_step = p.M * 32;     // to the next chunk
  int64_t k = 0;
  for (; k < p.Kfull; k += 32, x += x_step) {
    // The next tile's W rows, one line each per chunk: the hardware prefetcher needs a few misses to
    // pick up each new row, which costs most on short rows (K = 1536: ~25% at M = 6, 1 thread).
    for (int j = 0; j < NB; ++j)
      _mm_prefetch(reinterpret_cast<const char*>(w + ((Native ? 2 : 1) * NB + j) * p.K + k), _MM_HINT_T1);
    chunk<MB, NB, Native>(x, w + k, p.K, 0, acc);
  }
  if (p.tail) chunk<MB, NB, Native>(x, w + k, p.K, p.tail, acc);
  for (int m = 0; m < MB; ++m) {
    uint16_t* y = p.y + (m0 + m) * p.N + n0;
    for (int j = 0; j < NB; ++j) {
      float v = _mm512_reduce_add_ps(acc[m][j]);
      if (p.bias) v += bf16_to_f32(p.bias[n0 + j]);
      y[j] = f32_to_bf16(v);
    }
  }
}

// Rows [n_begin, n_end) of W for the MB rows of x from m0: NB at a time, then one at a time.
template <int MB, int NB, bool Native>
inline void strip(const Problem& p, int64_t m0, int64_t n_begin, int64_t n_end) {
  int64_t n = n_begin;
  for (; n + NB <= n_end; n += NB) tile<MB, NB, Native>(p, m0, n);
  for (; n < n_end; ++n) tile<MB, 1, Native>(p, m0, n);
}

// W rows per tile for a given number of x rows: accumulators + W registers stay within 32 zmm (one
// row on the native path: 16, measured at parity with the split path's 8 where W streams from memory).
template <bool Native>
void strip_for(int mb, const Problem& p, int64_t m0, int64_t n_begin, int64_t n_end) {
  switch (mb) {
    case 1: strip<1, Native ? 16 : 8, Native>(p, m0, n_begin, n_end); break;
    case 2: strip<2, 8, Native>(p, m0, n_begin, n_end); break;
    case 3: strip<3, 6, Native>(p, m0, n_begin, n_end); break;
    case 4: strip<4, 6, Native>(p, m0, n_begin, n_end); break;
    case 5: strip<5, 4, Native>(p, m0, n_begin, n_end); break;
    case 6: strip<6, 4, Native>(p, m0, n_begin, n_end); break;
    case 7: strip<7, 3, Native>(p, m0, n_begin, n_end); break;
    default: strip<8, 3, Native>(p, m0, n_begin, n_end); break;
  }
}


void run(const Problem& p, bool native) {
  cos_tiles::for_each_tile(p.M, p.N, [&](int mb, int64_t m0, int64_t n_begin, int64_t n_end) {
    (native ? strip_for<true> : strip_for<false>)(mb, p, m0, n_begin, n_end);
  });
}

}  // namespace

#pragma GCC pop_options

torch::Tensor bf16_linear(torch::Tensor x, torch::Tensor w, c10::optional<torch::Tensor> bias, bool native) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2, "bf16_linear: x [M, K] and w [N, K]");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 && w.scalar_type() == at::kBFloat16, "bf16_linear: bf16 only");
  TORCH_CHECK(x.device().is_cpu() && w.device().is_cpu(), "bf16_linear: CPU tensors only");
  TORCH_CHECK(x.is_contiguous() && w.is_contiguous(), "bf16_linear: contiguous x and w");
  TORCH_CHECK(x.size(1) == w.size(1), "bf16_linear: x and w disagree on K");
  TORCH_CHECK(!native || __builtin_cpu_supports("avx512bf16"), "bf16_linear: native=True needs a CPU with AVX512_BF16");
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  const uint16_t* b = nullptr;
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK(bias->scalar_type() == at::kBFloat16 && bias->is_contiguous() && bias->numel() == N,
                "bf16_linear: contiguous bf16 bias of N elements");
    b = reinterpret_cast<const uint16_t*>(bias->data_ptr<at::BFloat16>());
  }
  auto y = torch::empty({M, N}, x.options());
  if (M == 0 || N == 0) return y;
  const int64_t Kp = (K + 31) / 32 * 32;
  const uint16_t* xs = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
  std::vector<uint16_t> xh(static_cast<size_t>(M * Kp), 0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) xh[((k / 32) * M + m) * 32 + k % 32] = xs[m * K + k];
  Problem p;
  p.x = xh.data();
  p.w = reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>());
  p.bias = b;
  p.y = reinterpret_cast<uint16_t*>(y.data_ptr<at::BFloat16>());
  p.M = M; p.N = N; p.K = K; p.Kp = Kp;
  p.Kfull = K / 32 * 32;
  p.tail = static_cast<__mmask32>((1ull << (K % 32)) - 1u);
  {
    pybind11::gil_scoped_release no_gil;
    run(p, native);
  }
  return y;
}
