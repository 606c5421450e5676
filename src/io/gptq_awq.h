// The "qweight" checkpoint family: GPTQ (AutoGPTQ / GPTQModel, v1 and v2 zero conventions) and
// AWQ GEMM (AutoAWQ), as vLLM, transformers and GPTQModel load them (docs/formats.md sections 3
// and 4). Both store a linear [N = out, K = in] input-major, in int32 words, with fp16 scales:
//
//   GPTQ  P.qweight I32 [K*b/32, N]   codes packed along K (a dense LSB-first bitstream per column)
//         P.qzeros  I32 [n_g, N*b/32] zero points packed along N; v1 stores zero - 1
//         P.scales  F16 [n_g, N]      P.g_idx I32 [K] (group of each input channel)
//   AWQ   P.qweight I32 [K, N/8]      codes packed along N in the interleaved nibble order
//         P.qzeros  I32 [K/G, N/8]    true zero points, same order;  P.scales F16 [K/G, N]
//
// Packing moves lowbit's codes without touching them: a lowbit integer code is the unsigned
// offset-binary value these formats store, its zero point the integer they store, its scale the
// fp16 they store, so W = scale * (q - z) is the same number in every reader.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "io/checkpoint_folder.h"
#include "io/safetensors.h"
#include "quant/column_order.h"
#include "quant/quantized_tensor.h"

namespace lowbit {

// The quantization_config fields of one GPTQ or AWQ linear.
struct QweightParams {
  int bits = 4;
  int64_t group_size = 128;  // -1: one group over all of K (per channel)
  bool sym = true;
  bool gptq_v2 = false;  // GPTQ: zero points stored as-is (checkpoint_format "gptq_v2") instead of zero - 1
  DType scale_dtype = DType::kF16;

  bool operator==(const QweightParams&) const = default;
};

// The GPTQ / AWQ parameters that express `scheme` exactly; throws Error naming the field that has
// no GPTQ / AWQ counterpart (element format, bits, granularity, scale type, zero type). `where`
// names the tensor or recipe for the message.
QweightParams GptqParamsOf(const QuantScheme& scheme, const std::string& where);
QweightParams AwqParamsOf(const QuantScheme& scheme, const std::string& where);

// Appends P.qweight, P.qzeros, P.scales and (GPTQ) P.g_idx for linear `prefix`. Throws Error when
// the shape cannot be packed (K*b or N*b not a multiple of 32, AWQ ragged groups) or, for GPTQ v1,
// when a zero point of 0 occurs (v1 stores zero - 1, which every reader turns into 2^b). A stored
// column order (act-order) goes out as GPTQ's desc_act form: codes in input order, g_idx the group
// of each input channel.
void AddGptqLinear(TensorList& out, const std::string& prefix, const QuantizedTensor& q,
                   std::span<const uint32_t> order, bool v2);
void AddAwqLinear(TensorList& out, const std::string& prefix, const QuantizedTensor& q);

// Reads linear `prefix` [rows x cols] back into a QuantizedTensor, validating every dtype and
// shape. Symmetric tensors (every zero point 2^(b-1)) load as symmetric schemes; a GPTQ v1 zero
// field of 2^b - 1 (the historic asymmetric defect: it means 2^b) loads exactly through fp32
// zero points. Act-order (desc_act: a g_idx that is not column / group) loads as a stored column
// order with each group contiguous; a g_idx whose groups are not all group_size columns is an Error.
OrderedTensor ReadGptqLinear(const SafetensorsModel& st, const std::string& prefix, uint64_t rows, uint64_t cols,
                             const QweightParams& params);
QuantizedTensor ReadAwqLinear(const SafetensorsModel& st, const std::string& prefix, uint64_t rows, uint64_t cols,
                              const QweightParams& params);

}  // namespace lowbit
