#include "model/forward.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>

#include "core/error.h"
#include "kernels/activation.h"
#include "kernels/dot.h"
#include "kernels/matmul.h"
#include "model/attention.h"

namespace lowbit {

void RmsNorm(const float* x, const float* weight, size_t n, float eps, float* out) {
  float ss = 0;
  for (size_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (size_t i = 0; i < n; ++i) out[i] = x[i] * inv * weight[i];
}

namespace {

void LayerNorm(const float* x, const float* weight, size_t n, float eps, float* out) {
  float mean = 0;
  for (size_t i = 0; i < n; ++i) mean += x[i];
  mean /= static_cast<float>(n);
  float var = 0;
  for (size_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  const float inv = 1.0f / std::sqrt(var / static_cast<float>(n) + eps);
  for (size_t i = 0; i < n; ++i) out[i] = (x[i] - mean) * inv * weight[i];
}

void Norm(const ModelConfig& c, const float* x, const float* weight, size_t n, float* out) {
  if (c.norm == NormKind::kLayer) LayerNorm(x, weight, n, c.norm_eps, out);
  else RmsNorm(x, weight, n, c.norm_eps, out);
}

// x += scale * out over n values: a block's output into the residual stream (Granite scales it).
void AddResidual(const float* out, size_t n, float scale, float* x) {
  if (scale == 1) {
    for (size_t i = 0; i < n; ++i) x[i] += out[i];
  } else {
    for (size_t i = 0; i < n; ++i) x[i] += scale * out[i];
  }
}

// Ministral 3 and Mistral 4 (attn_temperature_every_layer): the query's n values at `position` scaled by its
// temperature, after RoPE.
void TemperQuery(const ModelConfig& c, size_t layer, size_t position, float* q, size_t n) {
  if (!c.attn_temperature_every_layer) return;
  if (const float t = c.query_temperature(layer, position); t != 1)
    for (size_t i = 0; i < n; ++i) q[i] *= t;
}

}  // namespace

void ApplyFinalNorm(const Model& model, std::span<const float> hidden, std::vector<float>& out) {
  const size_t dim = model.config.dim;
  out.resize(hidden.size());
  for (size_t r = 0; r < hidden.size() / dim; ++r)
    Norm(model.config, &hidden[r * dim], model.weights.final_norm.data(), dim, &out[r * dim]);
}

std::vector<float> RopeInverseFrequencies(const ModelConfig& c, RopeVariant variant) {
  const size_t dims = c.rope_dims(), half = dims / 2;
  const float theta = variant == RopeVariant::kLocal ? c.local_rope_theta : c.rope_theta;
  std::vector<float> inv(half);
  for (size_t i = 0; i < half; ++i)
    inv[i] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(dims));
  const RopeScaling& s = c.rope_scaling;
  if (variant == RopeVariant::kLocal) return inv;  // Gemma 3's sliding layers: unscaled
  switch (s.type) {
    case RopeScalingType::kNone: break;
    case RopeScalingType::kLlama3: {  // Llama 3.1 frequency-dependent scaling
      const float old_len = static_cast<float>(s.original_max_position);
      const float low_wavelen = old_len / s.low_freq_factor, high_wavelen = old_len / s.high_freq_factor;
      for (float& f : inv) {
        const float wavelen = 2.0f * std::numbers::pi_v<float> / f;
        if (wavelen > low_wavelen) {
          f /= s.factor;
        } else if (wavelen >= high_wavelen) {
          const float smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
          f = (1 - smooth) * f / s.factor + smooth * f;
        }
      }
      break;
    }
    case RopeScalingType::kLinear:
      for (float& f : inv) f /= s.factor;
      break;
    case RopeScalingType::kLongRope: {
      const std::vector<float>& divisors = variant == RopeVariant::kLong ? s.long_factor : s.short_factor;
      for (size_t i = 0; i < half; ++i) inv[i] /= divisors[i];
      break;
    }
    case RopeScalingType::kYarn: {  // transformers' _compute_yarn_parameters
      // The dimension whose frequency turns `rotations` times over the original context.
      const auto dimension = [&](double rotations) {
        return dims * std::log(s.original_max_position / (rotations * 2 * std::numbers::pi)) / (2 * std::log(theta));
      };
      double low = dimension(s.beta_fast), high = dimension(s.beta_slow);
      if (s.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, static_cast<double>(dims - 1));
      if (low == high) high += 0.001;
      for (size_t i = 0; i < half; ++i) {
        const float ramp = std::clamp((static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low),
                                      0.0f, 1.0f);
        // Below the ramp the frequency is kept (extrapolated), above it divided by the factor (interpolated).
        inv[i] = inv[i] / s.factor * ramp + inv[i] * (1 - ramp);
      }
      break;
    }
  }
  return inv;
}

Engine::Engine(const Model& model, size_t threads, KvCacheOptions kv, Activations activations)
    : model_(model), pool_(threads), kv_options_(std::move(kv)), activations_(activations) {
  const ModelConfig& c = model.config;
  const bool scaled_cos = c.rope_scaling.type == RopeScalingType::kLongRope || c.rope_scaling.type == RopeScalingType::kYarn;
  const float factor = scaled_cos ? c.rope_scaling.attention_factor : 1.0f;
  rope_[static_cast<size_t>(RopeVariant::kDefault)] = {RopeInverseFrequencies(c, RopeVariant::kDefault), factor};
  if (c.rope_scaling.type == RopeScalingType::kLongRope)
    rope_[static_cast<size_t>(RopeVariant::kLong)] = {RopeInverseFrequencies(c, RopeVariant::kLong), factor};
  if (c.local_rope_theta > 0)
    rope_[static_cast<size_t>(RopeVariant::kLocal)] = {RopeInverseFrequencies(c, RopeVariant::kLocal), 1.0f};
}

const Engine::RopeTable& Engine::RopeFor(size_t layer, const KvCache& cache) const {
  const ModelConfig& c = model_.config;
  RopeVariant v = RopeVariant::kDefault;
  if (c.local_rope_theta > 0 && c.sliding(layer)) v = RopeVariant::kLocal;
  else if (c.rope_scaling.type == RopeScalingType::kLongRope && cache.capacity() > c.rope_scaling.original_max_position)
    v = RopeVariant::kLong;
  return rope_[static_cast<size_t>(v)];
}

// One token's rotary heads at `pos`: `heads` heads of x, `stride` apart, each rotating the rope_dims()
// dimensions from `offset` on (the first ones in partial rotary embeddings, the trailing ones in latent
// attention); each angle's sin/cos serves every head.
void Engine::ApplyRope(std::initializer_list<RotaryHeads> parts, size_t pos, const RopeTable& rope) const {
  const ModelConfig& c = model_.config;
  const size_t half = c.rope_dims() / 2;
  const bool adjacent = c.rope_style == RopeStyle::kAdjacent;
  for (size_t i = 0; i < half; ++i) {
    const float angle = static_cast<float>(pos) * rope.inv_freq[i];
    const float cs = static_cast<float>(std::cos(static_cast<double>(angle))) * rope.attention_factor;
    const float sn = static_cast<float>(std::sin(static_cast<double>(angle))) * rope.attention_factor;
    const size_t a = adjacent ? 2 * i : i, b = adjacent ? 2 * i + 1 : i + half;
    for (const RotaryHeads& part : parts)
      for (size_t h = 0; h < part.heads; ++h) {
        float* v = part.x + h * part.stride + part.offset;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * cs - x1 * sn;
        v[b] = x1 * cs + x0 * sn;
      }
  }
}

std::vector<const Engine::RopeTable*> Engine::RowRopes(size_t l, std::span<BatchItem> batch,
                                                        std::vector<size_t>& position) const {
  std::vector<const RopeTable*> rope;
  position.clear();
  for (const BatchItem& item : batch) {
    const RopeTable* table = &RopeFor(l, *item.cache);
    for (size_t t = 0; t < item.tokens.size(); ++t) {
      position.push_back(item.cache->size() + t);
      rope.push_back(table);
    }
  }
  return rope;
}

const float* Engine::LatentKvRows(size_t l) {
  const Linear& kv_b = model_.weights.layers[l].wkv_b;
  const auto* q = std::get_if<QuantizedTensor>(&kv_b.weight);
  if (!q && kv_b.input_order.empty() && !kv_b.outliers) return std::get<DenseMatrix>(kv_b.weight).values.data();
  if (latent_kv_rows_.size() <= l) latent_kv_rows_.resize(l + 1);
  LatentRows& cached = latent_kv_rows_[l];
  const void* source = q ? static_cast<const void*>(q->codes().data()) : &kv_b;
  if (cached.source != source) {  // widened once per weight (quantization replaces the codes)
    const uint64_t rows = kv_b.rows(), cols = kv_b.cols();
    cached.values.resize(rows * cols);
    std::vector<float> scratch(cols);
    for (uint64_t r = 0; r < rows; ++r) InputOrderRow(kv_b, r, scratch, std::span(&cached.values[r * cols], cols));
    cached.source = source;
  }
  return cached.values.data();
}

void Engine::NormedProjection(const Linear& w, const std::vector<float>& norm, const float* x, size_t total,
                              std::vector<float>& out) {
  const size_t width = w.rows();
  out.resize(total * width);
  MatMul(w, x, total, out.data(), pool_, activations_);
  ForTokens(total, [&](size_t begin, size_t end) {
    for (size_t t = begin; t < end; ++t)
      Norm(model_.config, &out[t * width], norm.data(), norm.size(), &out[t * width]);
  });
}

void Engine::QueryLatent(size_t l, const float* normed, size_t total, std::vector<float>& out) {
  const LayerWeights& lw = model_.weights.layers[l];
  NormedProjection(lw.wq_a, lw.q_a_norm, normed, total, out);
}

void Engine::KvLatent(size_t l, const float* normed, size_t total, std::vector<float>& out) {
  const LayerWeights& lw = model_.weights.layers[l];
  NormedProjection(lw.wkv_a, lw.kv_a_norm, normed, total, out);
}

// Latent attention (DeepSeek-V2/V3), absorbed: the latent [c | k_rope] of each token is its cached K
// and V row (one KV head of kv_lora_rank + rope); head h's query is [W_kh^T q_nope_h | q_rope_h], W_kh
// its nope rows of kv_b (so q . [c | k_rope] = q_nope . W_kh c + q_rope . k_rope, transformers' score),
// and its output o_h [c-weighted sum | ...] becomes W_vh o_h[0..kv_lora_rank), W_vh its value rows.
// `input` holds the layer's normed hidden states; it becomes o_proj's input [tokens x n_heads v_head_dim].
void Engine::LatentAttention(size_t l, std::span<BatchItem> batch, std::vector<float>& input) {
  const ModelConfig& c = model_.config;
  const LayerWeights& lw = model_.weights.layers[l];
  const size_t total = input.size() / c.dim, heads = c.n_heads, nope = c.qk_nope_dim, qk = c.qk_head_dim();
  const size_t lora = c.kv_lora_rank, width = c.head_dim, vd = c.v_head_dim, kv_b_rows = nope + vd;
  q_.resize(total * heads * qk);
  if (c.q_lora_rank > 0) {
    QueryLatent(l, input.data(), total, proj_);
    MatMul(lw.wq, proj_.data(), total, q_.data(), pool_, activations_);
  } else {
    MatMul(lw.wq, input.data(), total, q_.data(), pool_, activations_);
  }
  KvLatent(l, input.data(), total, k_);  // each row [latent | rotary key]: what the cache holds
  std::vector<size_t> position;
  const std::vector<const RopeTable*> rope = RowRopes(l, batch, position);
  const float* kv_b = LatentKvRows(l);
  v_.resize(total * heads * width);  // the absorbed queries
  ForTokens(total, [&](size_t begin, size_t end) {
    for (size_t t = begin; t < end; ++t) {
      float* latent = &k_[t * width];
      ApplyRope({{&q_[t * heads * qk], heads, qk, nope}, {latent, 1, width, lora}}, position[t], *rope[t]);
      TemperQuery(c, l, position[t], &q_[t * heads * qk], heads * qk);
      for (size_t h = 0; h < heads; ++h) {
        const float* q = &q_[(t * heads + h) * qk];
        float* absorbed = &v_[(t * heads + h) * width];
        std::fill_n(absorbed, lora, 0.0f);
        for (size_t i = 0; i < nope; ++i) {
          const float* key_row = kv_b + (h * kv_b_rows + i) * lora;
          for (size_t m = 0; m < lora; ++m) absorbed[m] += q[i] * key_row[m];
        }
        std::copy_n(q + nope, qk - nope, absorbed + lora);
      }
    }
  });
  size_t row = 0;  // cache writes stay serial: a write may allocate the sequence's next block
  for (BatchItem& item : batch)
    for (size_t t = 0; t < item.tokens.size(); ++t, ++row)
      item.cache->Write(l, position[row], &k_[row * width], &k_[row * width]);
  gate_.resize(total * heads * width);
  Attention(l, batch, v_.data(), gate_.data());
  if (latent_observer_) ObserveLatent(l, total);
  input.resize(total * heads * vd);
  ForTokens(total, [&](size_t begin, size_t end) {
    for (size_t t = begin; t < end; ++t)
      for (size_t h = 0; h < heads; ++h)
        for (size_t j = 0; j < vd; ++j)
          input[(t * heads + h) * vd + j] = Dot(kv_b + (h * kv_b_rows + nope + j) * lora, &gate_[(t * heads + h) * width], lora);
  });
}

void Engine::ObserveLatent(size_t l, size_t total) {
  const ModelConfig& c = model_.config;
  const size_t heads = c.n_heads, qk = c.qk_head_dim(), width = c.head_dim;
  std::vector<float> nope(total * heads * c.qk_nope_dim), latent(total * heads * c.kv_lora_rank);
  for (size_t row = 0; row < total * heads; ++row) {  // q_ keeps each head's nope part unrotated
    std::copy_n(&q_[row * qk], c.qk_nope_dim, &nope[row * c.qk_nope_dim]);
    std::copy_n(&gate_[row * width], c.kv_lora_rank, &latent[row * c.kv_lora_rank]);
  }
  latent_observer_(l, nope.data(), latent.data(), total);
}

void Engine::ForTokens(size_t n_tokens, const std::function<void(size_t, size_t)>& fn) {
  constexpr size_t kMinParallel = 16;  // below this a pool wake-up costs more than the rows
  if (n_tokens < kMinParallel) {
    fn(0, n_tokens);
  } else {
    pool_.ParallelFor(n_tokens, fn);
  }
}

void Engine::Attention(size_t layer, std::span<BatchItem> batch, const float* q, float* out) {
  const ModelConfig& c = model_.config;
  const LayerWeights& lw = model_.weights.layers[layer];
  const size_t hd = c.head_dim, group = c.n_heads / c.n_kv_heads;
  // One job per (sequence, token, KV head); AttendJobs splits long ones when they are few.
  std::vector<std::pair<size_t, size_t>> token_of;  // (batch index, token index)
  for (size_t b = 0; b < batch.size(); ++b)
    for (size_t t = 0; t < batch[b].tokens.size(); ++t) token_of.emplace_back(b, t);
  const float scale = c.attention_scale();
  std::vector<AttentionJob> jobs;
  jobs.reserve(token_of.size() * c.n_kv_heads);
  for (size_t row = 0; row < token_of.size(); ++row)
    for (size_t kv_head = 0; kv_head < c.n_kv_heads; ++kv_head) {
      const auto [b, t] = token_of[row];
      const size_t first = row * c.q_dim() + kv_head * group * hd, position = batch[b].cache->size() + t;
      const AttentionQuery query{.layer = layer,
                                 .kv_head = kv_head,
                                 .position = position,
                                 .q = q + first,
                                 .heads = group,
                                 .scale = scale,
                                 .first = c.first_visible(layer, position),
                                 .softcap = c.attn_softcap,
                                 .int8_dots = activations_ == Activations::kFast,
                                 .sinks = lw.attn_sinks.empty() ? nullptr : &lw.attn_sinks[kv_head * group]};
      jobs.push_back({batch[b].cache, query, out + first});
    }
  AttendJobs(jobs, pool_);
}

namespace {

// The `count` best of `ids` by `score` to the front (ties to the lower index, as torch.topk).
void BestFirst(std::vector<uint32_t>& ids, size_t count, const std::vector<float>& score) {
  std::partial_sort(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(count), ids.end(),
                    [&](uint32_t a, uint32_t b) { return score[a] > score[b] || (score[a] == score[b] && a < b); });
}

}  // namespace

ExpertRoutes RouteTokens(const ModelConfig& c, const LayerWeights& lw, const float* x, size_t n_tokens) {
  const size_t experts = c.n_experts, k = c.experts_per_token, groups = c.expert_groups;
  ExpertRoutes routes{std::vector<std::vector<uint32_t>>(experts), std::vector<std::vector<float>>(experts)};
  std::vector<float> scores(experts), choice(experts), group_score(groups);
  std::vector<uint32_t> order(experts), group_order(groups);
  for (size_t t = 0; t < n_tokens; ++t) {
    DotRows(lw.router.data(), c.dim, 0, experts, x + t * c.dim, 1, scores.data(), experts);
    for (size_t e = 0; e < lw.router_logit_bias.size(); ++e) scores[e] += lw.router_logit_bias[e];
    if (c.router_scoring == RouterScoring::kSigmoid) {
      for (float& v : scores) v = 1.0f / (1.0f + std::exp(-v));
    } else {
      const float top = *std::max_element(scores.begin(), scores.end());
      float sum = 0;
      for (float& v : scores) sum += v = std::exp(v - top);
      for (float& v : scores) v /= sum;
    }
    // The scores that choose: biased (DeepSeek-V3), and outside the best groups out of reach.
    for (size_t e = 0; e < experts; ++e) choice[e] = scores[e] + (lw.router_bias.empty() ? 0.0f : lw.router_bias[e]);
    if (groups > 0) {
      const size_t per_group = experts / groups;
      for (size_t g = 0; g < groups; ++g) {
        float best = -INFINITY, second = -INFINITY;
        for (size_t e = g * per_group; e < (g + 1) * per_group; ++e) {
          second = std::max(second, std::min(best, choice[e]));
          best = std::max(best, choice[e]);
        }
        group_score[g] = c.group_score == GroupScore::kBestTwoSum ? best + second : best;
      }
      std::iota(group_order.begin(), group_order.end(), 0u);
      BestFirst(group_order, c.expert_groups_used, group_score);
      for (size_t i = c.expert_groups_used; i < groups; ++i)
        std::fill_n(choice.begin() + static_cast<ptrdiff_t>(group_order[i] * per_group), per_group, -INFINITY);
    }
    std::iota(order.begin(), order.end(), 0u);
    BestFirst(order, k, choice);
    float chosen = 0;
    for (size_t i = 0; i < k; ++i) chosen += scores[order[i]];
    for (size_t i = 0; i < k; ++i) {
      routes.rows[order[i]].push_back(static_cast<uint32_t>(t));
      const float w = c.norm_expert_weights ? scores[order[i]] / chosen : scores[order[i]];
      routes.weights[order[i]].push_back(w * c.routed_scale);
    }
  }
  return routes;
}

void GatherExpertRows(const ModelConfig& c, const ExpertRoutes& routes, size_t e, const float* x,
                      std::vector<float>& rows) {
  const std::vector<uint32_t>& routed = routes.rows[e];
  rows.resize(routed.size() * c.dim);
  for (size_t r = 0; r < routed.size(); ++r) {
    float* row = &rows[r * c.dim];
    std::copy_n(x + routed[r] * c.dim, c.dim, row);
    if (c.expert_weight_on_input)
      for (size_t j = 0; j < c.dim; ++j) row[j] *= routes.weights[e][r];
  }
}

float ExpertOutputWeight(const ModelConfig& c, const ExpertRoutes& routes, size_t e, size_t i) {
  return c.expert_weight_on_input ? 1.0f : routes.weights[e][i];
}

void GatedActivation(const ModelConfig& c, const float* gate, const float* up, size_t n, float* out) {
  switch (c.activation) {
    case FfnActivation::kSilu: return SiluMul(gate, up, n, out);
    case FfnActivation::kGeluTanh: return GeluTanhMul(gate, up, n, out);
    case FfnActivation::kSwigluClamped: return SwigluClampedMul(gate, up, n, c.swiglu_alpha, c.swiglu_limit, out);
  }
}

std::vector<LinearInput> AttentionInputs(const ModelConfig& c) {
  if (!c.mla()) return {LinearInput::kQkv};
  if (c.q_lora_rank == 0) return {LinearInput::kLatentIn, LinearInput::kLatentKv};
  return {LinearInput::kLatentIn, LinearInput::kLatentQ, LinearInput::kLatentKv};
}

void VisitMlpInputs(const ModelConfig& c, const LayerWeights& lw, size_t layer, const float* x, size_t n,
                    ThreadPool& pool,
                    const std::function<void(size_t unit, const float* input, const float* hidden, size_t rows)>& visit) {
  std::vector<float> gate, up, rows;
  const auto unit = [&](size_t u, const Linear& g, const Linear& v, const float* input, size_t m) {
    if (m == 0) return;
    gate.resize(m * g.rows());
    up.resize(m * g.rows());
    MatMul(g, input, m, gate.data(), pool);
    MatMul(v, input, m, up.data(), pool);
    GatedActivation(c, gate.data(), up.data(), gate.size(), gate.data());
    visit(u, input, gate.data(), m);
  };
  if (!c.moe(layer)) return unit(0, lw.w_gate, lw.w_up, x, n);
  const size_t shared = lw.shared_expert() ? 1 : 0;
  if (shared) unit(0, lw.w_gate, lw.w_up, x, n);
  const ExpertRoutes routes = RouteTokens(c, lw, x, n);
  for (size_t e = 0; e < lw.experts.size(); ++e) {
    GatherExpertRows(c, routes, e, x, rows);
    unit(e + shared, lw.experts[e].gate, lw.experts[e].up, rows.data(), routes.rows[e].size());
  }
}

void Engine::Experts(size_t l, const float* x, size_t n, float* out) {
  const ModelConfig& c = model_.config;
  const LayerWeights& lw = model_.weights.layers[l];
  const size_t dim = c.dim;
  std::fill(out, out + n * dim, 0.0f);
  // One expert at a time over the rows routed to it, gathered into one matrix, so each expert's
  // weights are read once per forward call; the weighted outputs are added back row by row.
  const auto run = [&](const Linear& gate, const Linear& up, const Linear& down, const float* rows, size_t count,
                       std::vector<float>& y) {
    const size_t ffn = gate.rows();
    gate_.resize(count * ffn);
    up_.resize(count * ffn);
    const LinearOutput gate_up[] = {{gate, gate_.data()}, {up, up_.data()}};
    MatMulShared(gate_up, rows, count, pool_, activations_);
    GatedActivation(c, gate_.data(), up_.data(), count * ffn, gate_.data());
    y.resize(count * dim);
    MatMul(down, gate_.data(), count, y.data(), pool_, activations_);
  };
  const ExpertRoutes routes = RouteTokens(c, lw, x, n);
  std::vector<float> rows, y;
  for (size_t e = 0; e < c.n_experts; ++e) {
    const std::vector<uint32_t>& routed = routes.rows[e];
    if (routed.empty()) continue;
    GatherExpertRows(c, routes, e, x, rows);
    const Expert& expert = lw.experts[e];
    run(expert.gate, expert.up, expert.down, rows.data(), routed.size(), y);
    for (size_t i = 0; i < routed.size(); ++i) {
      const float w = ExpertOutputWeight(c, routes, e, i);
      float* o = out + routed[i] * dim;
      for (size_t j = 0; j < dim; ++j) o[j] += w * y[i * dim + j];
    }
  }
  if (!lw.shared_expert()) return;
  run(lw.w_gate, lw.w_up, lw.w_down, x, n, y);
  for (size_t t = 0; t < n; ++t) {
    const float g = lw.shared_gate.empty() ? 1.0f : 1.0f / (1.0f + std::exp(-Dot(lw.shared_gate.data(), x + t * dim, dim)));
    for (size_t j = 0; j < dim; ++j) out[t * dim + j] += g * y[t * dim + j];
  }
}

std::vector<float> Engine::Embed(std::span<const BatchItem> batch) const {
  const ModelConfig& c = model_.config;
  size_t total = 0;
  for (const BatchItem& item : batch) total += item.tokens.size();
  std::vector<float> x(total * c.dim);
  size_t row = 0;
  for (const BatchItem& item : batch)
    for (const int32_t id : item.tokens) {
      if (id < 0 || static_cast<uint32_t>(id) >= c.vocab_size)
        Fail("token id {} is outside the vocabulary of {} tokens", id, c.vocab_size);
      const std::span<float> out(&x[row++ * c.dim], c.dim);
      model_.weights.embed.Row(static_cast<uint64_t>(id), out);
      if (c.embed_scale != 1)
        for (float& v : out) v *= c.embed_scale;
    }
  return x;
}

void Engine::BeginLayer(size_t l, const std::vector<float>& x, std::vector<float>& input) {
  const ModelConfig& c = model_.config;
  input.resize(x.size());
  if (!c.pre_norms) {  // OLMo 2: attention reads the residual stream itself
    std::copy(x.begin(), x.end(), input.begin());
    return;
  }
  ForTokens(x.size() / c.dim, [&](size_t begin, size_t end) {
    for (size_t t = begin; t < end; ++t)
      Norm(c, &x[t * c.dim], model_.weights.layers[l].attn_norm.data(), c.dim, &input[t * c.dim]);
  });
}

void Engine::AdvanceLayer(size_t l, LinearInput group, std::span<BatchItem> batch, std::vector<float>& x,
                          std::vector<float>& input) {
  const ModelConfig& c = model_.config;
  const LayerWeights& lw = model_.weights.layers[l];
  const size_t dim = c.dim, total = x.size() / dim;
  switch (group) {
    case LinearInput::kQkv: {  // q/k/v, RoPE, cache, attention -> the o input
      if (c.mla()) return LatentAttention(l, batch, input);
      q_.resize(total * c.q_dim());
      k_.resize(total * c.kv_dim());
      v_.resize(total * c.kv_dim());
      const LinearOutput qkv[] = {{lw.wq, q_.data()}, {lw.wk, k_.data()}, {lw.wv, v_.data()}};
      MatMulShared(qkv, input.data(), total, pool_, activations_);
      if (c.qk_norm_full) {  // OLMo 2: q and k normalized whole
        ForTokens(total, [&](size_t begin, size_t end) {
          for (size_t row = begin; row < end; ++row) {
            Norm(c, &q_[row * c.q_dim()], lw.q_norm.data(), c.q_dim(), &q_[row * c.q_dim()]);
            Norm(c, &k_[row * c.kv_dim()], lw.k_norm.data(), c.kv_dim(), &k_[row * c.kv_dim()]);
          }
        });
      }
      // Qwen3, Gemma 3, Cohere (before RoPE), HunYuan (after): each head of q and k normalized on its own
      const auto norm_each_head = [&] {
        ForTokens(total, [&](size_t begin, size_t end) {
          for (size_t row = begin; row < end; ++row) {
            for (size_t h = 0; h < c.n_heads; ++h) {
              float* head = &q_[row * c.q_dim() + h * c.head_dim];
              Norm(c, head, lw.q_norm.data() + (c.qk_norm_per_head ? h * c.head_dim : 0), c.head_dim, head);
            }
            for (size_t h = 0; h < c.n_kv_heads; ++h) {
              float* head = &k_[row * c.kv_dim() + h * c.head_dim];
              Norm(c, head, lw.k_norm.data() + (c.qk_norm_per_head ? h * c.head_dim : 0), c.head_dim, head);
            }
          }
        });
      };
      if (c.qk_norm && !c.qk_norm_full && !c.qk_norm_after_rope) norm_each_head();
      std::vector<size_t> position;  // of each stacked row in its sequence
      const std::vector<const RopeTable*> rope = RowRopes(l, batch, position);
      if (c.rope(l)) {  // SmolLM3's and Llama 4's NoPE layers attend without positions
        const std::vector<float> ones(c.qk_norm_unweighted ? c.head_dim : 0, 1.0f);
        const auto norm_heads = [&](float* x, size_t heads) {  // Llama 4: after RoPE, each head without weights
          for (size_t h = 0; h < heads; ++h)
            RmsNorm(x + h * c.head_dim, ones.data(), c.head_dim, c.norm_eps, x + h * c.head_dim);
        };
        ForTokens(total, [&](size_t begin, size_t end) {
          for (size_t row = begin; row < end; ++row) {
            float *q = &q_[row * c.q_dim()], *k = &k_[row * c.kv_dim()];
            ApplyRope({{q, c.n_heads, c.head_dim, 0}, {k, c.n_kv_heads, c.head_dim, 0}}, position[row], *rope[row]);
            if (c.qk_norm_unweighted) {
              norm_heads(q, c.n_heads);
              norm_heads(k, c.n_kv_heads);
            }
            TemperQuery(c, l, position[row], q, c.q_dim());
          }
        });
      } else if (c.attn_temperature_floor > 0) {  // Llama 4's NoPE layers: q's temperature by position
        for (size_t row = 0; row < total; ++row) {
          const float t = c.query_temperature(l, position[row]);
          for (size_t i = 0; i < c.q_dim(); ++i) q_[row * c.q_dim() + i] *= t;
        }
      }
      if (c.qk_norm && c.qk_norm_after_rope) norm_each_head();
      size_t row = 0;  // cache writes stay serial: a write may allocate the sequence's next block
      for (BatchItem& item : batch)
        for (size_t t = 0; t < item.tokens.size(); ++t, ++row)
          item.cache->Write(l, position[row], &k_[row * c.kv_dim()], &v_[row * c.kv_dim()]);
      input.resize(total * c.q_dim());
      Attention(l, batch, q_.data(), input.data());
      return;
    }
    case LinearInput::kLatentIn:  // q_a or q, kv_a -> q_b's input, or kv_b's without a q bottleneck
      if (c.q_lora_rank > 0) {
        QueryLatent(l, input.data(), total, proj_);
        input.swap(proj_);
        return;
      }
      [[fallthrough]];
    case LinearInput::kLatentQ: {  // q_b -> kv_b's input: the normed latents, from the hidden state again
      if (group == LinearInput::kLatentQ) BeginLayer(l, x, input);
      KvLatent(l, input.data(), total, k_);
      input.resize(total * c.kv_lora_rank);
      for (size_t t = 0; t < total; ++t) std::copy_n(&k_[t * c.head_dim], c.kv_lora_rank, &input[t * c.kv_lora_rank]);
      return;
    }
    case LinearInput::kLatentKv:  // kv_b, attention -> the o input
      BeginLayer(l, x, input);
      LatentAttention(l, batch, input);
      return;
    case LinearInput::kO: {  // o, (norm,) residual, norm -> the gate/up input
      proj_.resize(total * dim);
      MatMul(lw.wo, input.data(), total, proj_.data(), pool_, activations_);
      input.resize(total * dim);
      ForTokens(total, [&](size_t begin, size_t end) {
        for (size_t t = begin; t < end; ++t) {
          if (!lw.attn_out_norm.empty())
            Norm(c, &proj_[t * dim], lw.attn_out_norm.data(), dim, &proj_[t * dim]);
          // Cohere's parallel block: the MLP reads what attention read, the residual before this add.
          if (c.parallel_block) Norm(c, &x[t * dim], lw.attn_norm.data(), dim, &input[t * dim]);
          AddResidual(&proj_[t * dim], dim, c.residual_scale, &x[t * dim]);
          if (c.parallel_block) continue;
          if (c.pre_norms) Norm(c, &x[t * dim], lw.ffn_norm.data(), dim, &input[t * dim]);
          else std::copy_n(&x[t * dim], dim, &input[t * dim]);
        }
      });
      return;
    }
    case LinearInput::kGateUp: {  // gate, up, act(gate) * up -> the down input
      if (c.moe(l)) {  // the experts' weighted output -> the "down input" the kDown stage adds
        proj_.resize(total * dim);
        Experts(l, input.data(), total, proj_.data());
        input.swap(proj_);
        return;
      }
      gate_.resize(total * c.ffn_dim);
      up_.resize(total * c.ffn_dim);
      const LinearOutput gate_up[] = {{lw.w_gate, gate_.data()}, {lw.w_up, up_.data()}};
      MatMulShared(gate_up, input.data(), total, pool_, activations_);
      const size_t ffn = c.ffn_dim;
      input.resize(total * ffn);
      ForTokens(total, [&](size_t begin, size_t end) {
        GatedActivation(c, &gate_[begin * ffn], &up_[begin * ffn], (end - begin) * ffn, &input[begin * ffn]);
      });
      return;
    }
    case LinearInput::kDown: {  // down, (norm,) residual: the layer's output is in x
      proj_.resize(total * dim);
      if (c.moe(l)) proj_.swap(input);
      else MatMul(lw.w_down, input.data(), total, proj_.data(), pool_, activations_);
      ForTokens(total, [&](size_t begin, size_t end) {
        if (!lw.ffn_out_norm.empty())
          for (size_t t = begin; t < end; ++t)
            Norm(c, &proj_[t * dim], lw.ffn_out_norm.data(), dim, &proj_[t * dim]);
        AddResidual(&proj_[begin * dim], (end - begin) * dim, c.residual_scale, &x[begin * dim]);
      });
      return;
    }
  }
}

void Engine::ForwardLayer(size_t l, std::span<BatchItem> batch, std::vector<float>& x) {
  std::vector<float> input;
  BeginLayer(l, x, input);
  for (const LinearInput group : {LinearInput::kQkv, LinearInput::kO, LinearInput::kGateUp, LinearInput::kDown})
    AdvanceLayer(l, group, batch, x, input);
}

void Engine::Forward(std::span<BatchItem> batch) {
  const ModelConfig& c = model_.config;
  const ModelWeights& w = model_.weights;
  size_t total = 0;
  for (const BatchItem& item : batch) {
    if (item.cache->size() + item.tokens.size() > item.cache->capacity())
      Fail("context overflow: {} cached + {} new tokens exceed the KV cache capacity of {}", item.cache->size(),
           item.tokens.size(), item.cache->capacity());
    total += item.tokens.size();
  }
  if (total == 0) return;
  std::vector<float> x = Embed(batch);
  for (size_t l = 0; l + 1 < c.n_layers; ++l) ForwardLayer(l, batch, x);

  // The last layer: attention for every new token (their K/V are cached for later steps), the rest only
  // for the tokens whose logits are asked for (as llama.cpp does): a prompt's other rows end here.
  std::vector<size_t> kept;
  size_t row = 0;
  for (const BatchItem& item : batch) {
    const size_t n = item.tokens.size();
    for (size_t t = item.all_logits ? 0 : n - 1; t < n; ++t) kept.push_back(row + t);
    row += n;
  }
  const size_t last = c.n_layers - 1, dim = c.dim, vocab = c.vocab_size;
  std::vector<float> input;
  BeginLayer(last, x, input);
  AdvanceLayer(last, LinearInput::kQkv, batch, x, input);
  if (kept.size() < total) {
    const size_t width = input.size() / total;
    for (size_t i = 0; i < kept.size(); ++i) {
      if (kept[i] == i) continue;  // ascending: rows only move down
      std::copy_n(&x[kept[i] * dim], dim, &x[i * dim]);
      std::copy_n(&input[kept[i] * width], width, &input[i * width]);
    }
    x.resize(kept.size() * dim);
    input.resize(kept.size() * width);
  }
  for (const LinearInput group : {LinearInput::kO, LinearInput::kGateUp, LinearInput::kDown})
    AdvanceLayer(last, group, batch, x, input);

  // Final norm and logits for those rows, in one matmul for the batch.
  std::vector<float> normed;
  ApplyFinalNorm(model_, x, normed);
  const size_t rows_out = normed.size() / dim;
  std::vector<float> logits(rows_out * vocab);
  MatMul(w.lm_head, normed.data(), rows_out, logits.data(), pool_, activations_);
  if (c.final_softcap > 0)
    for (float& v : logits) v = c.final_softcap * std::tanh(v / c.final_softcap);
  if (c.logit_scale != 1)
    for (float& v : logits) v /= c.logit_scale;
  if (c.logit_multiplier != 1)
    for (float& v : logits) v *= c.logit_multiplier;
  size_t out_row = 0;
  for (BatchItem& item : batch) {
    const size_t count = item.all_logits ? item.tokens.size() : 1;
    item.logits->assign(logits.begin() + static_cast<std::ptrdiff_t>(out_row * vocab),
                        logits.begin() + static_cast<std::ptrdiff_t>((out_row + count) * vocab));
    item.cache->Advance(item.tokens.size());
    out_row += count;
  }
}

std::vector<float> Engine::Forward(KvCache& cache, std::span<const int32_t> tokens, bool all_logits) {
  std::vector<float> logits;
  BatchItem item{&cache, tokens, all_logits, &logits};
  Forward(std::span<BatchItem>(&item, 1));
  return logits;
}

}  // namespace lowbit
