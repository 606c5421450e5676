// Elementwise activation kernels of the forward pass (Highway, dispatched at run time) and their
// scalar references.
#pragma once

#include <cstddef>

namespace lowbit {

// gate[i] = silu(gate[i]) * up[i], the SwiGLU product; silu(g) = g / (1 + exp(-g)).
void SiluMul(float* gate, const float* up, size_t n);
void SiluMulRef(float* gate, const float* up, size_t n);

}  // namespace lowbit
