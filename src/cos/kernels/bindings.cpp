// The extension's Python module: every kernel of cos.kernels, compiled as one translation unit with
// the sources build.py lists before this file.

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("bf16_linear", &bf16_linear, "y = x @ w.T (+ bias), bf16 in and out, fp32 accumulation (AVX-512; native: vdpbf16ps, AVX512_BF16 CPUs only)",
        pybind11::arg("x"), pybind11::arg("w"), pybind11::arg("bias") = pybind11::none(),
        pybind11::arg("native") = false);
  m.def("f32_linear", &f32_linear, "y = x @ w.T (+ bias), fp32, each row in one fixed order (AVX-512)",
        pybind11::arg("x"), pybind11::arg("w"), pybind11::arg("bias") = pybind11::none());
  m.def("row_attention", &row_attention, "attention over a KV cache, each query row in one fixed order (AVX-512; bf16 or fp32)",
        pybind11::arg("q"), pybind11::arg("k"), pybind11::arg("v"), pybind11::arg("allowed") = pybind11::none(),
        pybind11::arg("scaling") = 1.0);
}
