// Calibrated GGUF: the decoder blocks quantized in order with GPTQ onto the ggml types the export
// chose (gguf_gptq.h), each block calibrated on the outputs of the already-quantized blocks before
// it (layer by layer: a block's four Hessians come from one pass over the calibration windows,
// then its seven linears are quantized and the windows' hidden states advance through it), then
// the output matrix on the quantized model's final hidden states. The embedding table is a lookup,
// not a product: it is encoded directly.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "model/forward.h"
#include "quant/gptq.h"

namespace lowbit {

// The seven decoder linears in the order of LayerLinears: q, k, v, o, gate, up, down.
constexpr size_t kLayerLinears = 7;
std::array<Linear*, kLayerLinears> LayerLinears(LayerWeights& l);

class GgufLayerCalibrator {
 public:
  // `model` must hold every block in full precision; its linears are replaced by their grid
  // values as blocks are quantized.
  GgufLayerCalibrator(Model& model, std::vector<std::vector<int32_t>> windows, GptqOptions options, size_t threads);

  // Quantizes block l (blocks in order, each once) onto `types`; returns each linear's GGUF bytes
  // in its own row order (Hugging Face order for Q/K: the exporter permutes rows as it writes).
  std::array<std::vector<std::byte>, kLayerLinears> QuantizeLayer(size_t l, const std::array<uint32_t, kLayerLinears>& types);
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
