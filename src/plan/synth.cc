#include "plan/synth.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "core/file_util.h"
#include "core/thread_pool.h"
#include "formats/minifloat.h"
#include "io/safetensors.h"
#include "plan/presets.h"

namespace lowbit {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> shape;
  enum Fill { kRandom, kOnes, kZeros } fill = kRandom;
};

std::vector<TensorSpec> TensorsOf(const ModelArch& a) {
  const uint64_t dim = a.hidden, q = uint64_t{a.n_heads} * a.head_dim, kv = uint64_t{a.n_kv_heads} * a.head_dim;
  std::vector<TensorSpec> t{{"model.embed_tokens.weight", {a.vocab, dim}}};
  for (uint32_t l = 0; l < a.n_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    t.push_back({p + "input_layernorm.weight", {dim}, TensorSpec::kOnes});
    t.push_back({p + "self_attn.q_proj.weight", {q, dim}});
    t.push_back({p + "self_attn.k_proj.weight", {kv, dim}});
    t.push_back({p + "self_attn.v_proj.weight", {kv, dim}});
    if (a.qkv_bias)
      for (const auto& [name, n] : {std::pair{"q_proj", q}, {"k_proj", kv}, {"v_proj", kv}})
        t.push_back({p + "self_attn." + name + ".bias", {n}, TensorSpec::kZeros});
    if (a.qk_norm)
      for (const char* name : {"q_norm", "k_norm"}) t.push_back({p + "self_attn." + name + ".weight", {a.head_dim}, TensorSpec::kOnes});
    t.push_back({p + "self_attn.o_proj.weight", {dim, q}});
    t.push_back({p + "post_attention_layernorm.weight", {dim}, TensorSpec::kOnes});
    t.push_back({p + "mlp.gate_proj.weight", {a.ffn, dim}});
    t.push_back({p + "mlp.up_proj.weight", {a.ffn, dim}});
    t.push_back({p + "mlp.down_proj.weight", {dim, a.ffn}});
  }
  t.push_back({"model.norm.weight", {dim}, TensorSpec::kOnes});
  if (!a.tied) t.push_back({"lm_head.weight", {a.vocab, dim}});
  return t;
}

// Uniform in [-a, a] with standard deviation 0.02 (a typical initialisation), from a counter-based
// hash so every element is independent of thread scheduling.
void Fill(const TensorSpec& spec, uint64_t seed, uint64_t index, DType dtype, std::byte* out, uint64_t n,
          ThreadPool& pool) {
  const float amplitude = 0.02f * std::sqrt(3.0f);
  const size_t width = DTypeSize(dtype);
  pool.ParallelFor(n, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      float v = spec.fill == TensorSpec::kOnes ? 1.0f : 0.0f;
      if (spec.fill == TensorSpec::kRandom) {
        const uint64_t h = SplitMix64(seed ^ SplitMix64(index * 0x100000001B3ull + i));
        v = (static_cast<float>(h >> 40) * 0x1p-24f * 2.0f - 1.0f) * amplitude;
      }
      if (dtype == DType::kF32) {
        std::memcpy(out + i * width, &v, 4);
      } else {
        const uint16_t h = dtype == DType::kBF16 ? Fp32ToBf16(v) : Fp32ToFp16(v);
        std::memcpy(out + i * width, &h, 2);
      }
    }
  });
}

}  // namespace

SynthResult WriteSynthModel(const SynthOptions& o, const std::filesystem::path& out) {
  SynthResult result;
  result.arch = FindPreset(o.preset);
  ModelArch& a = result.arch;
  if (a.moe() || a.mla()) Fail("synth: preset '{}' is not a dense Llama-family model", a.name);
  if (o.dtype != DType::kF32 && o.dtype != DType::kBF16 && o.dtype != DType::kF16)
    Fail("synth: dtype {} is not one of F32, BF16, F16", DTypeName(o.dtype));
  if (o.layers > 0) a.n_layers = o.layers;

  const std::vector<TensorSpec> specs = TensorsOf(a);
  std::vector<std::vector<std::byte>> data(specs.size());
  std::vector<TensorToWrite> tensors;
  ThreadPool pool(o.threads);
  for (size_t i = 0; i < specs.size(); ++i) {
    uint64_t n = 1;
    for (const uint64_t d : specs[i].shape) n *= d;
    data[i].resize(n * DTypeSize(o.dtype));
    Fill(specs[i], o.seed, i, o.dtype, data[i].data(), n, pool);
    tensors.push_back({specs[i].name, o.dtype, specs[i].shape, data[i]});
    result.parameters += n;
    result.bytes += data[i].size();
  }
  std::filesystem::create_directories(out);
  const nlohmann::json config = {
      {"architectures", {a.qk_norm ? "Qwen3ForCausalLM" : a.qkv_bias ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}},
      {"model_type", a.qk_norm ? "qwen3" : a.qkv_bias ? "qwen2" : "llama"},
      {"hidden_size", a.hidden},
      {"intermediate_size", a.ffn},
      {"num_hidden_layers", a.n_layers},
      {"num_attention_heads", a.n_heads},
      {"num_key_value_heads", a.n_kv_heads},
      {"head_dim", a.head_dim},
      {"vocab_size", a.vocab},
      {"max_position_embeddings", 4096},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", a.name.starts_with("qwen") ? 1e6 : a.name.starts_with("llama-3") ? 5e5 : 1e4},
      {"tie_word_embeddings", a.tied},
      {"hidden_act", "silu"},
      {"torch_dtype", o.dtype == DType::kF32 ? "float32" : o.dtype == DType::kBF16 ? "bfloat16" : "float16"},
      {"lowbit_synthetic", {{"preset", a.name}, {"seed", o.seed}}}};
  WriteSafetensors(out / "model.safetensors", tensors, {{"format", "pt"}});
  WriteFileAtomic(out / "config.json", config.dump(2) + "\n");
  return result;
}

}  // namespace lowbit
