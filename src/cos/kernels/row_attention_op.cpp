// The torch-facing attention kernel: checks, the mask's layout, then the ISA build's cos_attention::run
// (row_attention.cpp or row_attention_avx2.cpp, whichever the extension was built from).

namespace cos_attention {

// Every (batch, head, query row) on its own (one_row, from the ISA build), rows split between threads whole.
template <typename T>
void run(const Shape& s, const T* q, const T* k, const T* v, const bool* allowed, float scaling, T* out) {
  const int64_t rows = s.B * s.Hq * s.M;
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> keys;
    std::vector<float> p;
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / (s.Hq * s.M), h = (r / s.M) % s.Hq, m = r % s.M;
      one_row<T>(s, q, k, v, allowed, scaling, b, h, m, out + ((b * s.M + m) * s.Hq + h) * s.D, keys, p);
    }
  });
}

}  // namespace cos_attention

// q [B, Hq, M, D], k and v [B, Hkv, T, D] (T >= M; the query block is the last M positions), allowed: None
// or bool broadcastable to [B, M, T]. Returns [B, M, Hq, D] in q's dtype.
torch::Tensor row_attention(torch::Tensor q, torch::Tensor k, torch::Tensor v, c10::optional<torch::Tensor> allowed,
                            double scaling) {
  using cos_attention::Shape;
  using cos_attention::kMaxHeadDim;
  using cos_attention::run;
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "row_attention: q, k, v must be [B, H, L, D]");
  TORCH_CHECK(q.device().is_cpu() && k.device().is_cpu() && v.device().is_cpu(), "row_attention: CPU tensors only");
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type() &&
                  (q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kFloat),
              "row_attention: q, k, v of one dtype, bf16 or fp32");
  TORCH_CHECK(q.stride(3) == 1 && k.stride(3) == 1 && v.stride(3) == 1, "row_attention: head_dim must be contiguous");
  Shape s{};
  s.B = q.size(0); s.Hq = q.size(1); s.M = q.size(2); s.D = q.size(3);
  s.Hkv = k.size(1); s.T = k.size(2);
  TORCH_CHECK(k.size(0) == s.B && v.size(0) == s.B && v.size(1) == s.Hkv && v.size(2) == s.T, "row_attention: k/v shapes");
  TORCH_CHECK(k.size(3) == s.D && v.size(3) == s.D, "row_attention: q, k, v must share head_dim");
  TORCH_CHECK(s.D <= kMaxHeadDim, "row_attention: head_dim above 256");
  TORCH_CHECK(s.Hkv > 0 && s.Hq % s.Hkv == 0, "row_attention: query heads must be a multiple of key/value heads");
  TORCH_CHECK(s.T >= s.M, "row_attention: fewer keys than queries");
  for (int i = 0; i < 3; ++i) { s.qs[i] = q.stride(i == 0 ? 0 : i); s.ks[i] = k.stride(i == 0 ? 0 : i); s.vs[i] = v.stride(i == 0 ? 0 : i); }
  torch::Tensor mask;
  const bool* allowed_ptr = nullptr;
  if (allowed.has_value() && allowed->defined()) {
    TORCH_CHECK(allowed->scalar_type() == at::kBool, "row_attention: the mask must be bool (True = may attend)");
    mask = allowed->dim() == 4 ? allowed->select(1, 0) : *allowed;  // [B, 1, M, T] -> [B, M, T]
    TORCH_CHECK(mask.dim() == 3, "row_attention: mask must be [B, M, T] or [B, 1, M, T]");
    mask = mask.expand({s.B, s.M, s.T});
    for (int i = 0; i < 3; ++i) s.ms[i] = mask.stride(i);
    allowed_ptr = mask.data_ptr<bool>();
  }
  auto out = torch::empty({s.B, s.M, s.Hq, s.D}, q.options());
  if (out.numel() == 0) return out;
  pybind11::gil_scoped_release no_gil;
  if (q.scalar_type() == at::kFloat)
    run<float>(s, q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), allowed_ptr,
               static_cast<float>(scaling), out.data_ptr<float>());
  else
    run<at::BFloat16>(s, q.data_ptr<at::BFloat16>(), k.data_ptr<at::BFloat16>(), v.data_ptr<at::BFloat16>(),
                      allowed_ptr, static_cast<float>(scaling), out.data_ptr<at::BFloat16>());
  return out;
}
