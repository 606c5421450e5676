// Elementwise activation kernels of the forward pass (Highway, dispatched at run time) and their
// scalar references.
#pragma once

#include <cstddef>

namespace lowbit {

// out[i] = silu(gate[i]) * up[i], the SwiGLU product; silu(g) = g / (1 + exp(-g)). out may be gate.
void SiluMul(const float* gate, const float* up, size_t n, float* out);
void SiluMulRef(const float* gate, const float* up, size_t n, float* out);

}  // namespace lowbit
