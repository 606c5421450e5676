// Whole-model post-training quantization, layer by layer: block i is calibrated on the outputs of
// the already-quantized blocks 0..i-1, and inside a block the linears are quantized in execution
// order (q/k/v, then o, then gate/up, then down), each on inputs that already see the quantized
// linears before it ("true sequential", as GPTQ does). Only one block's activations are in flight.
// In a mixture of experts each expert is calibrated on the tokens routed to it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/json_util.h"
#include "model/weights.h"
#include "quant/scheme.h"

namespace lowbit {

// A per-tensor exception to the request's method and scheme (recipe "overrides").
struct TensorRule {
  std::string pattern;  // ECMAScript regex, searched in the tensor name (model.layers.3.mlp.down_proj)
  std::optional<QuantScheme> scheme;   // none = the request's scheme
  std::optional<std::string> method;   // none = the request's method
  nlohmann::json method_config;        // null = the request's config when the method is the request's, else {}
};

struct TensorReport {
  std::string name, scheme;
  double seconds = 0;
  double weight_mse = 0;
  double output_mse = 0;  // mean over calibration tokens of |(W - Q) x|^2 / rows (0 without calibration)
};

struct QuantizeReport {
  std::vector<TensorReport> tensors;
  std::vector<std::pair<std::string, double>> awq_alphas;  // chosen alpha per scaled input (AWQ)
  size_t smoothed_inputs = 0;                                // inputs SmoothQuant rescaled
  size_t outlier_columns = 0;                                // LLM.int8(): fp columns over all linears
  size_t uncalibrated_linears = 0;  // experts no calibration token was routed to, quantized by RTN instead
  bool rotated = false;
  size_t rotation_down_block = 0;                            // online Hadamard block of down_proj
  std::vector<double> layer_seconds;
  double calibration_seconds = 0, total_seconds = 0;
  uint64_t activation_peak_bytes = 0;     // calibration activations held in memory at once
  uint64_t activation_spilled_bytes = 0;  // written to the spill file (past max_activation_bytes)
};

// The state a run leaves after each finished block, from which QuantizeModel can continue.
struct BlockCheckpoint {
  size_t next_layer = 0;  // blocks before it are quantized (and rotated, if asked)
  // The hidden states entering next_layer, one vector per calibration batch. A resumed run reads
  // batch i through `read_hidden(i)`, one at a time, so the activation store can spill them as they
  // come; on_block_done gets them through `for_each_hidden`, in batch order, since they may live in
  // the activation spill file.
  std::function<std::vector<float>(size_t batch)> read_hidden;
  size_t hidden_batches = 0;
  std::function<void(const std::function<void(std::span<const float>)>& visit)> for_each_hidden;
  QuantizeReport report;  // so far
};

struct QuantizeRequest {
  std::string method = "rtn";
  nlohmann::json method_config = nlohmann::json::object();
  QuantScheme scheme;
  // Activation quantization of every quantized linear's input (W8A8 etc.): per-token schemes are
  // dynamic, per-tensor ones get a static scale calibrated on the calibration inputs.
  std::optional<QuantScheme> act_scheme;
  std::vector<std::vector<int32_t>> calibration;  // token windows; needed by Hessian methods
  size_t threads = 0;
  // Rotate the full-precision model first (QuaRot: model/rotation.h), with this sign seed.
  bool rotate = false;
  uint64_t rotate_seed = 0;
  // The first rule whose pattern is found in a linear's name decides its method and scheme;
  // linears matching an `ignore` pattern (ECMAScript regexes, searched) stay full precision.
  std::vector<TensorRule> overrides;
  std::vector<std::string> ignore;
  // The output matrix, quantized by RTN after the last block (none: left as it is). A tied lm_head
  // becomes a tensor of its own (config.tie_embeddings turns false); the embeddings stay as they are.
  std::optional<QuantScheme> lm_head;
  size_t calibration_batch = 16;  // windows per forward call
  // Memory for the calibration activations (0 = no limit); batches past it go to a temp file in
  // spill_dir (the system temp folder when empty): model/activation_store.h.
  uint64_t max_activation_bytes = 0;
  std::filesystem::path spill_dir;
  // Blocks read on demand (io/model_loader.h StreamedModel): the model's block slots from the
  // first block to quantize on are empty and this reads each as the run reaches it, so one block
  // is held in full precision at a time. Null: the model holds every block.
  std::function<LayerWeights(size_t)> read_layer;
  std::function<void(size_t layer, const std::string& tensor)> progress;
  // Resumable runs: called after every finished block with the model as it stands (blocks from
  // next_layer on may be unread) and the state to continue from. `resume` continues a run from
  // such a checkpoint: the model's blocks before next_layer and everything outside the blocks must
  // be the ones saved with it, the blocks after it the source's (io/run_checkpoint.h), the
  // request the same. Rotation is applied to each block as the run reaches it.
  std::function<void(const Model& model, const BlockCheckpoint& state)> on_block_done;
  const BlockCheckpoint* resume = nullptr;
};

// Report <-> JSON, for checkpoints of interrupted runs.
nlohmann::json ReportToJson(const QuantizeReport& report);
QuantizeReport ReportFromJson(const JsonView& j);

QuantizeReport QuantizeModel(Model& model, const QuantizeRequest& request);

// LLM.int8()'s split of one weight [rows x cols]: the columns whose input max |x| (`amax`) exceeds
// `threshold` are moved out of `values` (left zero there) into the returned side matrix; nullopt
// when there are none.
std::optional<OutlierColumns> SplitOutlierColumns(std::vector<float>& values, size_t rows, size_t cols,
                                                  std::span<const float> amax, double threshold);

}  // namespace lowbit
