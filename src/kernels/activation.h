// Elementwise activation kernels of the forward pass (Highway, dispatched at run time) and their
// scalar references.
#pragma once

#include <cstddef>

namespace lowbit {

// out[i] = silu(gate[i]) * up[i], the SwiGLU product; silu(g) = g / (1 + exp(-g)). out may be gate.
void SiluMul(const float* gate, const float* up, size_t n, float* out);
void SiluMulRef(const float* gate, const float* up, size_t n, float* out);
// out[i] = gelu(gate[i]) * up[i], the GeGLU product with GELU's tanh approximation (PyTorch's
// gelu(approximate="tanh"), Gemma's gelu_pytorch_tanh): 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))).
void GeluTanhMul(const float* gate, const float* up, size_t n, float* out);
void GeluTanhMulRef(const float* gate, const float* up, size_t n, float* out);
// GPT-OSS's clamped SwiGLU: g = min(gate[i], limit), u = clamp(up[i], -limit, limit),
// out[i] = g sigmoid(alpha g) (u + 1). Scalar (its experts' few rows per token make it no hot spot).
void SwigluClampedMul(const float* gate, const float* up, size_t n, float alpha, float limit, float* out);

}  // namespace lowbit
