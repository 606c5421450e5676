// Calibrated GGUF: the decoder blocks quantized in order with GPTQ onto the ggml types the export
// chose (gguf_gptq.h), each block calibrated on the outputs of the already-quantized blocks before
// it (layer by layer: a block's Hessians come from one pass over the calibration windows, then its
// linears are quantized and the windows' hidden states advance through it), then the output matrix
// on the quantized model's final hidden states. In a mixture of experts each expert's Hessians come
// from the tokens the router sends it. Latent attention (DeepSeek) is calibrated stage by stage (q_a or q
// with kv_a on the normed hidden state, q_b on q_a's normed output, o on the attention output); kv_b's GGUF
// tensors attn_k_b / attn_v_b run along other axes than kv_b's input, so the exporter rounds them directly
// from the full-precision kv_b. The embedding table is a lookup, not a product: it is encoded directly.
#pragma once

#include <cstdint>
#include <vector>

#include "model/forward.h"
#include "quant/gptq.h"

namespace lowbit {

class GgufLayerCalibrator {
 public:
  // `model` must hold every block in full precision; its linears are replaced by their grid
  // values as blocks are quantized.
  GgufLayerCalibrator(Model& model, std::vector<std::vector<int32_t>> windows, GptqOptions options, size_t threads);

  // Quantizes block l (blocks in order, each once) onto `types`, one per linear of BlockLinears(block)
  // in its order; returns each linear's GGUF bytes in its own row order (Hugging Face order for Q/K:
  // the exporter permutes rows as it writes).
  std::vector<std::vector<std::byte>> QuantizeLayer(size_t l, const std::vector<uint32_t>& types);
  // After the last block: the output matrix (lm_head) on the final norm's outputs.
  std::vector<std::byte> QuantizeOutput(uint32_t type);

 private:
  Model& model_;
  Engine engine_;
  std::vector<std::vector<int32_t>> windows_;
  std::vector<std::vector<float>> hidden_;  // per window, the input of the next block
  GptqOptions options_;
  size_t next_layer_ = 0;
};

}  // namespace lowbit
