// The fp32 reference forward pass of the Llama family (Llama, Mistral, Qwen2/3, Phi-3, llama2.c,
// GGUF llama), Gemma 1/2/3 and DeepSeek-V2/V3: RMSNorm (and Gemma's output norms), RoPE (rotate-half
// or adjacent pairs, partial, scaled, per-layer bases), grouped-query attention over a KV cache
// (sliding windows, soft-capping) or latent attention, SwiGLU / GeGLU MLP or a mixture of SwiGLU
// experts. Linear layers go through MatMul, so quantized weights need no change here.
//
// A batch holds several sequences of different lengths; their new tokens are stacked into one
// activation matrix for the linear layers, and attention runs per sequence over its own cache.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "model/kv_cache.h"
#include "model/weights.h"

namespace lowbit {

struct BatchItem {
  KvCache* cache;                   // receives the new positions
  std::span<const int32_t> tokens;  // new tokens, appended after cache->size()
  bool all_logits = false;          // logits for every new token, or only the last
  std::vector<float>* logits;       // out: [n x vocab], n = tokens.size() or 1
};

// The groups of linear layers of a decoder layer, in execution order; each group reads one
// activation matrix (q/k/v share one input, gate/up another). In a sparse layer the kGateUp stage
// runs the whole mixture of experts (each expert reads its tokens' rows of the input) and kDown
// only adds its output to the residual. Latent attention (DeepSeek) runs whole at kQkv; for layer-by-layer
// calibration it also runs as three stages, the inputs of its three groups: the normed hidden state (q_a
// or q, and kv_a: kLatentIn), q_a's normed output (q_b: kLatentQ) and the normed KV latent (kv_b:
// kLatentKv), each stage recomputing what it needs from the residual, after which kLatentKv's attention
// gives o's input.
enum class LinearInput : uint8_t { kQkv, kO, kGateUp, kDown, kLatentIn, kLatentQ, kLatentKv };
inline constexpr size_t kLinearInputCount = 7;

// The experts a router sends each token to: for expert e, the rows (token indices into the input)
// it receives and their weights, in token order.
struct ExpertRoutes {
  std::vector<std::vector<uint32_t>> rows;
  std::vector<std::vector<float>> weights;
};
// The router's scores (softmax, or DeepSeek-V3's sigmoid) for each of `n_tokens` rows of x [n_tokens x
// dim], the top experts_per_token experts by those scores (plus the router bias, within the best expert
// groups, when the config has them; ties to the lower index, as torch.topk), their scores renormalized to
// sum 1 when the config says so, times routed_scale.
// GPT-OSS's router bias is added to the logits first.
ExpertRoutes RouteTokens(const ModelConfig& c, const LayerWeights& layer, const float* x, size_t n_tokens);
// The rows of x [n_tokens x dim] routed to expert e, gathered into `rows`; Llama 4's each times its routing weight
// (ModelConfig::expert_weight_on_input). ExpertOutputWeight: what the expert's output row i is added with (its
// routing weight, or 1 where the input took it).
void GatherExpertRows(const ModelConfig& c, const ExpertRoutes& routes, size_t e, const float* x,
                      std::vector<float>& rows);
float ExpertOutputWeight(const ModelConfig& c, const ExpertRoutes& routes, size_t e, size_t i);

// out[i] = act(gate[i]) * up[i] with the config's activation (SwiGLU, GeGLU, GPT-OSS's clamped SwiGLU). out
// may be gate.
void GatedActivation(const ModelConfig& c, const float* gate, const float* up, size_t n, float* out);

// The inputs of a layer's attention linears in forward order, each stage's AdvanceLayer giving the next one's
// input, the last one giving o's: kQkv, or latent attention's kLatentIn, kLatentQ (with a q bottleneck) and
// kLatentKv.
std::vector<LinearInput> AttentionInputs(const ModelConfig& c);

// The MLP units of layer `layer` on its MLP input x [n x dim], as BlockLinears lists them: a dense MLP (unit 0,
// every row), or in a sparse layer the shared expert (unit 0, every row, when there is one) and each routed
// expert on the rows the router sends it. `visit(unit, input, hidden, rows)` gets the unit's gate/up input
// rows and its down input (act(gate) * up, [rows x its width]); units with no rows are not visited.
void VisitMlpInputs(const ModelConfig& c, const LayerWeights& lw, size_t layer, const float* x, size_t n,
                    ThreadPool& pool,
                    const std::function<void(size_t unit, const float* input, const float* hidden, size_t rows)>& visit);

// Which RoPE frequencies a layer uses: the model's (scaled as its config says), longrope's long
// factors (contexts past the original one), or Gemma 3's unscaled local base (sliding layers).
enum class RopeVariant : uint8_t { kDefault, kLong, kLocal };

class Engine {
 public:
  // New caches use `kv` (dtype, block size, FP8 scales); `activations` picks the matmul kernels
  // (kernels/matmul.h: exact fp32 for evaluation, fast low-precision dots for generation).
  Engine(const Model& model, size_t threads, KvCacheOptions kv = {}, Activations activations = Activations::kExact);

  const Model& model() const { return model_; }
  ThreadPool& pool() { return pool_; }
  KvCache NewCache(size_t capacity) const { return KvCache(model_.config, capacity, kv_options_); }

  void Forward(std::span<BatchItem> batch);
  // One sequence; returns logits [n x vocab] (all_logits) or [vocab].
  std::vector<float> Forward(KvCache& cache, std::span<const int32_t> tokens, bool all_logits);

  // The pieces of Forward, for layer-by-layer calibration. Embed gives the hidden states of the
  // batch's new tokens ([total x dim]). A decoder layer then runs in stages, one per linear
  // group: BeginLayer sets `input` to the q/k/v input; AdvanceLayer(group) applies that group to
  // `input` and runs on to the next group's input (after kDown, x holds the layer's output).
  // K/V are written at positions cache->size() + t; caches are not advanced.
  std::vector<float> Embed(std::span<const BatchItem> batch) const;
  void BeginLayer(size_t layer, const std::vector<float>& x, std::vector<float>& input);
  void AdvanceLayer(size_t layer, LinearInput group, std::span<BatchItem> batch, std::vector<float>& x,
                    std::vector<float>& input);
  void ForwardLayer(size_t layer, std::span<BatchItem> batch, std::vector<float>& x);

  // Latent attention's per-head vectors that GGUF's split kv_b reads (attn_k_b: each head's nope query,
  // attn_v_b: each head's attention output in latent space), for importance statistics: `observe(layer,
  // query_nope, latent_out, tokens)` gets them after each latent attention, [tokens x n_heads x qk_nope] and
  // [tokens x n_heads x kv_lora_rank]. An empty function stops it.
  using LatentObserver =
      std::function<void(size_t layer, const float* query_nope, const float* latent_out, size_t tokens)>;
  void ObserveLatentAttention(LatentObserver observe) { latent_observer_ = std::move(observe); }

 private:
  struct RopeTable {
    std::vector<float> inv_freq;  // [rope_dims / 2]
    float attention_factor = 1;   // multiplies cos and sin (longrope)
  };
  void Attention(size_t layer, std::span<BatchItem> batch, const float* q, float* out);
  void LatentAttention(size_t layer, std::span<BatchItem> batch, std::vector<float>& input);
  // Hands q_'s nope parts and gate_'s latent outputs of `total` tokens to latent_observer_.
  void ObserveLatent(size_t layer, size_t total);
  // Latent attention's pieces, on rows of the normed hidden state `normed` (`total` tokens): q_a's output,
  // RMS-normed by q_a_norm, into `out` [total x q_lora_rank]; kv_a's output [total x (kv_lora_rank + rope)]
  // with its latent part RMS-normed by kv_a_norm.
  void QueryLatent(size_t layer, const float* normed, size_t total, std::vector<float>& out);
  // out [total x w.rows()] = w x, the first norm.size() values of each row RMS-normed by `norm`.
  void NormedProjection(const Linear& w, const std::vector<float>& norm, const float* x, size_t total,
                        std::vector<float>& out);
  void KvLatent(size_t layer, const float* normed, size_t total, std::vector<float>& out);
  // Layer l's kv_b rows in fp32 (latent attention reads them per head): the weight itself when dense,
  // else a copy widened on first use.
  const float* LatentKvRows(size_t layer);
  // A sparse layer's MLP on x [n x dim] into out [n x dim].
  void Experts(size_t layer, const float* x, size_t n, float* out);
  const RopeTable& RopeFor(size_t layer, const KvCache& cache) const;
  struct RotaryHeads {
    float* x;
    size_t heads, stride, offset;
  };
  void ApplyRope(std::initializer_list<RotaryHeads> parts, size_t pos, const RopeTable& rope) const;
  // Each stacked row's position in its sequence (into `position`) and the frequencies it uses.
  std::vector<const RopeTable*> RowRopes(size_t layer, std::span<BatchItem> batch, std::vector<size_t>& position) const;
  // fn(begin, end) over token rows: on the pool for prefill-sized batches, inline for decode.
  void ForTokens(size_t n_tokens, const std::function<void(size_t, size_t)>& fn);

  const Model& model_;
  ThreadPool pool_;
  KvCacheOptions kv_options_;
  Activations activations_;
  RopeTable rope_[3];  // by RopeVariant
  // Activation buffers of AdvanceLayer, kept across calls: prefill-sized batches would otherwise
  // allocate (and fault in) tens of MB per layer.
  std::vector<float> q_, k_, v_, proj_, gate_, up_;
  struct LatentRows {
    const void* source = nullptr;  // the weight the values were widened from
    std::vector<float> values;
  };
  std::vector<LatentRows> latent_kv_rows_;
  LatentObserver latent_observer_;
};

// Token-level helpers used by the forward pass (exposed for tests).
void RmsNorm(const float* x, const float* weight, size_t n, float eps, float* out);
// Rows of hidden states [rows x dim] through the model's final norm, lm_head's inputs, into `out`
// (resized to match).
void ApplyFinalNorm(const Model& model, std::span<const float> hidden, std::vector<float>& out);
std::vector<float> RopeInverseFrequencies(const ModelConfig& c, RopeVariant variant = RopeVariant::kDefault);

}  // namespace lowbit
