// Writes the binary seed files of fuzz/corpus/ with lowbit's own writers (and from the bundled
// model), small enough to keep in the repository: `build-fuzz/fuzz/make_fuzz_seeds fuzz/corpus`.
// The JSON and tokenizer.model seeds are copies of our own files (fuzz/corpus/README.md).
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "eval/compare.h"
#include "formats/minifloat.h"
#include "io/engine_export.h"
#include "io/hf_model.h"
#include "io/gguf_writer.h"
#include "io/model_loader.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "core/file_util.h"
#include "model/kv_calibration.h"
#include "model/quantize_weights.h"
#include "quant/scale_rules.h"
#include "model/recipe.h"
#include "tokenizer/gguf_vocab_export.h"

namespace fs = std::filesystem;
using namespace lowbit;

namespace {

const fs::path kBundled = fs::path(LOWBIT_SOURCE_DIR) / "models" / "kjv-llama-7m";

std::vector<float> Values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.5f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

template <class T>
std::span<const std::byte> Bytes(const std::vector<T>& v) {
  return std::as_bytes(std::span(v));
}

void WriteRaw(const fs::path& path, const std::vector<std::byte>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

template <class T>
void Put(std::vector<std::byte>& out, T v) {
  const auto* p = reinterpret_cast<const std::byte*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

void Safetensors(const fs::path& dir) {
  // Every dtype family, plus metadata.
  const std::vector<float> f32 = Values(6, 1);
  std::vector<uint16_t> f16, bf16;
  for (float x : Values(4, 2)) f16.push_back(Fp32ToFp16(x));
  for (float x : Values(4, 3)) bf16.push_back(Fp32ToBf16(x));
  const std::vector<int32_t> i32 = {1, -2, 3};
  const std::vector<uint8_t> u8 = {0, 1, 2, 255, 7};
  const std::vector<double> f64 = {0.5, -1e300};
  const std::vector<TensorToWrite> tensors = {
      {"a.weight", DType::kF32, {2, 3}, Bytes(f32)},  {"b.half", DType::kF16, {4}, Bytes(f16)},
      {"c.bf16", DType::kBF16, {2, 2}, Bytes(bf16)},  {"d.int", DType::kI32, {3}, Bytes(i32)},
      {"e.bytes", DType::kU8, {5}, Bytes(u8)},        {"f.double", DType::kF64, {2}, Bytes(f64)},
  };
  WriteSafetensors(dir / "dtypes.safetensors", tensors, {{"format", "pt"}, {"lowbit.format_version", "1"}});

  // The bundled model's small tensors (its norms), as they are in the real checkpoint.
  const SafetensorsFile model = SafetensorsFile::Open(kBundled / "model.safetensors");
  std::vector<TensorToWrite> norms;
  for (const TensorView& t : model.tensors())
    if (t.shape.size() == 1 && norms.size() < 3)
      norms.push_back({t.name, t.dtype, t.shape, t.data});
  WriteSafetensors(dir / "bundled_norms.safetensors", norms, model.metadata());
}

void Gguf(const fs::path& dir) {
  // A 1-layer llama (dim 32, 2 heads, ffn 64, vocab 16) with F32, F16, Q8_0 and Q4_0 tensors.
  constexpr uint64_t kDim = 32, kFfn = 64, kVocab = 16;
  GgufWriter w(dir / "tiny_llama.gguf");
  w.Set("general.architecture", std::string("llama"));
  w.Set("general.name", std::string("tiny"));
  w.Set("llama.embedding_length", uint32_t{kDim});
  w.Set("llama.block_count", uint32_t{1});
  w.Set("llama.feed_forward_length", uint32_t{kFfn});
  w.Set("llama.attention.head_count", uint32_t{2});
  w.Set("llama.attention.head_count_kv", uint32_t{2});
  w.Set("llama.context_length", uint32_t{64});
  w.Set("llama.rope.freq_base", 10000.0f);
  w.Set("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.Set("tokenizer.ggml.bos_token_id", uint32_t{1});
  w.Set("tokenizer.ggml.eos_token_id", uint32_t{2});
  struct T {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type;
  };
  const std::vector<T> tensors = {
      {"token_embd.weight", {kDim, kVocab}, kGgmlF16},   {"blk.0.attn_norm.weight", {kDim}, kGgmlF32},
      {"blk.0.attn_q.weight", {kDim, kDim}, kGgmlQ8_0},  {"blk.0.attn_k.weight", {kDim, kDim}, kGgmlQ4_0},
      {"blk.0.attn_v.weight", {kDim, kDim}, kGgmlF32},   {"blk.0.attn_output.weight", {kDim, kDim}, kGgmlQ8_0},
      {"blk.0.ffn_norm.weight", {kDim}, kGgmlF32},        {"blk.0.ffn_gate.weight", {kDim, kFfn}, kGgmlQ4_0},
      {"blk.0.ffn_up.weight", {kDim, kFfn}, kGgmlF16},    {"blk.0.ffn_down.weight", {kFfn, kDim}, kGgmlQ8_0},
      {"output_norm.weight", {kDim}, kGgmlF32},
  };
  for (const T& t : tensors) w.DeclareTensor(t.name, t.ne);
  uint32_t seed = 10;
  for (const T& t : tensors) {
    const uint64_t n = t.ne.size() == 1 ? t.ne[0] : t.ne[0] * t.ne[1];
    const std::vector<float> x = Values(n, seed++);
    std::vector<std::byte> b;
    if (t.type == kGgmlF32) {
      for (float v : x) Put(b, v);
    } else if (t.type == kGgmlF16) {
      for (float v : x) Put(b, Fp32ToFp16(v));
    } else {  // ggml's reference Q8_0 / Q4_0 blocks of 32
      for (uint64_t i = 0; i < n; i += 32) {
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::abs(x[i + j]));
        if (t.type == kGgmlQ8_0) {
          const float d = amax / 127;
          Put(b, Fp32ToFp16(d));
          for (int j = 0; j < 32; ++j) Put(b, static_cast<int8_t>(std::lround(x[i + j] / d)));
        } else {
          const float d = amax / 8;
          Put(b, Fp32ToFp16(d));
          for (int j = 0; j < 16; ++j) {
            const auto q = [&](int k) { return static_cast<uint8_t>(std::clamp(std::lround(x[i + k] / d) + 8, 0L, 15L)); };
            Put(b, static_cast<uint8_t>(q(j) | (q(j + 16) << 4)));
          }
        }
      }
    }
    w.WriteTensor(t.name, t.type, b);
  }
  w.Commit();
}

void GgufVocab(const fs::path& dir) {
  // The bundled tokenizer as llama.cpp's converter writes it, in a vocabulary-only GGUF.
  ModelConfig config = ReadHfConfig(kBundled / "config.json");
  {
    GgufWriter w(dir / "bundled_spm_vocab.gguf");
    for (GgufKeyValue& kv : GgufVocabularyFor(kBundled / "tokenizer.model", config)) w.Set(kv.key, std::move(kv.value));
    w.Commit();
  }
  // A tiny byte-level BPE vocabulary (gpt2): bytes as GPT-2 maps them, a few merges; under GPT-2's
  // pre-tokenizer, three of llama.cpp's regex lists (lookaheads and ignore_merges, CJK ranges, six
  // regexes in turn) and Gemma 4's raw UTF-8 mode.
  std::vector<std::string> tokens;
  for (char c = '!'; c <= '~'; ++c) tokens.emplace_back(1, c);
  tokens.push_back("\xc4\xa0");  // U+0120, the space byte
  tokens.push_back("\xc4\x8a");  // U+010A, newline
  for (const char* t : {"he", "ll", "hell", "hello", "\xc4\xa0w", "or", "\xc4\xa0wor", "ld", "<|endoftext|>"}) tokens.push_back(t);
  std::vector<int32_t> types(tokens.size(), 1);
  types.back() = 3;
  for (const char* pre : {"gpt-2", "tekken", "deepseek-v3", "chameleon", "gemma4"}) {
    GgufWriter w(dir / fmt::format("tiny_{}_vocab.gguf", std::string(pre) == "gpt-2" ? "gpt2" : pre));
    w.Set("tokenizer.ggml.model", std::string("gpt2"));
    w.Set("tokenizer.ggml.pre", std::string(pre));
    w.Set("tokenizer.ggml.tokens", GgufArray{tokens});
    w.Set("tokenizer.ggml.token_type", GgufArray{types});
    w.Set("tokenizer.ggml.merges", GgufArray{std::vector<std::string>{"h e", "l l", "he ll", "hell o", "\xc4\xa0 w",
                                                                        "o r", "\xc4\xa0w or", "l d"}});
    w.Set("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(tokens.size() - 1));
    w.Set("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(tokens.size() - 1));
    w.Commit();
  }
}

void Llama2c(const fs::path& dir) {
  // dim 8, hidden 16, 1 layer, 2 heads (kv 2), vocab 16, seq_len 4: legacy (shared and unshared
  // classifier) and v1 ("ak42") layouts, with exactly the bytes each header asks for.
  const int32_t dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 2, vocab = 16, seq = 4;
  const uint64_t head = dim / heads, kv = kv_heads * head;
  const uint64_t layer_floats = 2 * dim + dim * dim + 2 * kv * dim + dim * dim + 3 * hidden * dim;
  for (const bool shared : {true, false}) {
    std::vector<std::byte> b;
    for (int32_t h : {dim, hidden, layers, heads, kv_heads, shared ? vocab : -vocab, seq}) Put(b, h);
    const uint64_t n = vocab * dim + layer_floats + dim + seq * head + (shared ? 0 : vocab * dim);
    for (float v : Values(n, shared ? 20 : 21)) Put(b, v);
    WriteRaw(dir / (shared ? "legacy_shared.bin" : "legacy_unshared.bin"), b);
  }
  std::vector<std::byte> b;
  Put(b, uint32_t{0x616b3432});
  Put(b, int32_t{1});
  for (int32_t h : {dim, hidden, layers, heads, kv_heads, vocab, seq}) Put(b, h);
  Put(b, uint8_t{1});
  b.resize(256);
  for (float v : Values(vocab * dim + layer_floats + dim, 22)) Put(b, v);
  WriteRaw(dir / "v1_shared.bin", b);
}

void TopkBase(const fs::path& dir) {
  BaseFileHeader h;
  h.vocab = 16;
  h.ctx = 8;
  h.k = 3;
  h.positions = 4;
  h.token_hash = HashTokens({1, 5, 7, 9, 2, 3, 4, 5});
  std::vector<BaseRecord> records;
  for (uint64_t i = 0; i < h.positions; ++i) {
    std::vector<double> logprobs(h.vocab);
    double total = 0;
    for (uint32_t t = 0; t < h.vocab; ++t) total += std::exp(-0.3 * ((t + i) % h.vocab));
    for (uint32_t t = 0; t < h.vocab; ++t) logprobs[t] = -0.3 * ((t + i) % h.vocab) - std::log(total);
    records.push_back(MakeBaseRecord(logprobs, static_cast<int32_t>(i + 2), h.k));
  }
  WriteBaseFile(dir / "base.lbkl", h, records);
}

void RecipeSeeds(const fs::path& dir) {
  // A recipe using every key, as the recipe card writes it.
  Recipe r;
  r.method = "gptq";
  r.format = "int4:g128:asym";
  r.config = {{"damp", 0.01}, {"block_size", 64}};  // GptqOptions
  r.calib_file = "calib.txt";
  r.calib_samples = 16;
  r.calib_len = 128;
  r.seed = 7;
  r.rotate = true;
  r.rotate_seed = 3;
  r.overrides = {{"mlp\\.down_proj", "int8:channel", "rtn", nullptr}, {"lm_head", "nvfp4", "", nullptr}};
  r.ignore = {"embed_tokens"};
  nlohmann::json j = r.ToJson();
  j.erase("act_format");  // ToJson writes "" for none, which ReadRecipe refuses
  WriteFileAtomic(dir / "recipe.json", j.dump(2) + "\n");
}

void KvScalesSeeds(const fs::path& dir) {
  KvScales s;
  s.dtype = KvDtype::kFp8E4M3;
  s.k = {0.0125f, 0.03f};
  s.v = {0.5f, 0.0078125f};
  WriteKvScales(s, dir / "kv_cache_scales.json");
}

// One engine export packed as the engine_checkpoint target reads it (fuzz_entries.h SplitCheckpoint: u32
// length, config.json, model.safetensors).
void EngineCheckpointSeed(const fs::path& dir, const std::string& name, StreamedModel& s, const fs::path& source,
                          const EngineExportOptions& o) {
  const fs::path out = dir / (name + ".export");
  (void)ExportEngineCheckpoint(s, source, out, nullptr, o);
  const std::string config = ReadTextFile(out / "config.json"), weights = ReadTextFile(out / "model.safetensors");
  std::vector<std::byte> packed;
  Put(packed, static_cast<uint32_t>(config.size()));
  for (const std::string* part : {&config, &weights})
    for (const char ch : *part) packed.push_back(static_cast<std::byte>(ch));
  WriteRaw(dir / (name + ".ckpt"), packed);
  fs::remove_all(out);
}

// A quant_method fp8 checkpoint from a compressed-tensors FP8 block seed: the block scales renamed
// weight_scale_inv, the config vLLM's Fp8Config.
void Fp8MethodSeed(const fs::path& ct_seed, const fs::path& out) {
  const std::string packed = ReadTextFile(ct_seed);
  uint32_t config_size;
  std::memcpy(&config_size, packed.data(), 4);
  nlohmann::json config = nlohmann::json::parse(packed.substr(4, config_size));
  config["quantization_config"] = {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}, {"fmt", "e4m3"},
                                   {"weight_block_size", {16, 16}}};
  const std::string weights = packed.substr(4 + config_size);
  const fs::path in = out.string() + ".in", renamed = out.string() + ".out";
  WriteRaw(in, std::vector<std::byte>(reinterpret_cast<const std::byte*>(weights.data()),
                                      reinterpret_cast<const std::byte*>(weights.data()) + weights.size()));
  {
    const SafetensorsFile st = SafetensorsFile::Open(in);
    std::vector<TensorToWrite> tensors;
    for (const TensorView& t : st.tensors())
      tensors.push_back({t.name.ends_with(".weight_scale") ? t.name + "_inv" : t.name, t.dtype, t.shape, t.data});
    // KV-cache scales in two of the spellings vLLM takes: K and V on layer 0, the single kv_scale on layer 1.
    static const float kKvScales[] = {0.5f, 0.25f, 0.75f};
    const char* kv_names[] = {"model.layers.0.self_attn.k_scale", "model.layers.0.self_attn.v_scale",
                              "model.layers.1.self_attn.kv_scale"};
    for (int i = 0; i < 3; ++i)
      tensors.push_back({kv_names[i], DType::kF32, {}, std::as_bytes(std::span(&kKvScales[i], 1))});
    WriteSafetensors(renamed, tensors);
  }
  const std::string text = config.dump(), renamed_weights = ReadTextFile(renamed);
  fs::remove(in);
  fs::remove(renamed);
  std::vector<std::byte> seed;
  Put(seed, static_cast<uint32_t>(text.size()));
  for (const std::string* part : {&text, &renamed_weights})
    for (const char ch : *part) seed.push_back(static_cast<std::byte>(ch));
  WriteRaw(out, seed);
}

// Engine exports of the 2-layer architecture fixtures.
void EngineCheckpointSeeds(const fs::path& dir) {
  const fs::path fixtures = fs::path(LOWBIT_SOURCE_DIR) / "tests" / "data" / "architectures";
  struct Case {
    const char* name;
    const char* fixture;
    EngineFormat format;
    const char* scheme;
  };
  for (const Case& c : {Case{"gptq_v1_int4", "llama", EngineFormat::kGptq, "int4:g16"},
                        Case{"awq_int4", "llama", EngineFormat::kAwq, "int4:g16:asym"},
                        Case{"ct_pack_int4_asym", "llama", EngineFormat::kCompressedTensors, "int4:g16:asym"},
                        Case{"ct_naive_fp8", "llama", EngineFormat::kCompressedTensors, "fp8_e4m3"},
                        Case{"ct_nvfp4", "llama", EngineFormat::kCompressedTensors, "nvfp4"},
                        Case{"ct_mxfp6", "llama", EngineFormat::kCompressedTensors, "mxfp6_e2m3"},
                        Case{"ct_mxfp8", "llama", EngineFormat::kCompressedTensors, "mxfp8_e4m3"},
                        Case{"phi3_gptq_fused", "phi3", EngineFormat::kGptq, "int4:g16"}}) {
    StreamedModel s = OpenModel(fixtures / c.fixture);
    EngineExportOptions o;
    o.format = c.format;
    o.scheme = ParseScheme(c.scheme);
    EngineCheckpointSeed(dir, c.name, s, fixtures / c.fixture, o);
  }
  // Quantized inputs: NVFP4 under a static tensor scale (input_global_scale); MXFP4 and W4A8's int8
  // per token, dynamic.
  for (const auto& [name, format, inputs] : {std::tuple{"ct_nvfp4_w4a4", "nvfp4", "nvfp4"},
                                             std::tuple{"ct_mxfp4_w4a4", "mxfp4", "mxfp4:e8m0=round"},
                                             std::tuple{"ct_w4a8", "int4:g16", "int8:token"}}) {
    Model w4a4 = LoadHfModel(fixtures / "llama");
    QuantizeLinears(w4a4.weights, ParseScheme(format));
    const QuantScheme input = ParseScheme(inputs);
    for (LayerWeights& l : w4a4.weights.layers)
      for (Linear* linear : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
        linear->input_quant = InputQuant{input, ChooseTensorScale(input, 8.0f)};
    StreamedModel s{std::move(w4a4), nullptr};
    EngineCheckpointSeed(dir, name, s, fixtures / "llama", EngineExportOptions{});
  }
  // W8A8 with asymmetric inputs: a zero-point per token (q/k/v), a calibrated one (the rest).
  Model w8a8 = LoadHfModel(fixtures / "llama");
  QuantizeLinears(w8a8.weights, ParseScheme("int8:channel"));
  for (LayerWeights& l : w8a8.weights.layers) {
    l.wq.input_quant = l.wk.input_quant = l.wv.input_quant = InputQuant{ParseScheme("int8:token:asym:scale=f32")};
    l.wo.input_quant = l.w_gate.input_quant = l.w_up.input_quant = l.w_down.input_quant =
        InputQuant{ParseScheme("int8:tensor:asym:scale=f32"), 0.03125f, 120.0f};
  }
  StreamedModel asym{std::move(w8a8), nullptr};
  EngineCheckpointSeed(dir, "ct_w8a8_asym", asym, fixtures / "llama", EngineExportOptions{});
  // FP8_BLOCK (block weights, inputs per group of the block's columns), and the same codes as a
  // quant_method fp8 checkpoint (DeepSeek-V3's layout: weight_scale_inv per block).
  Model block = LoadHfModel(fixtures / "llama");
  QuantizeLinears(block.weights, ParseScheme("fp8_e4m3:block16x16:scale=f32"));
  for (LayerWeights& l : block.weights.layers)
    for (Linear* linear : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
      linear->input_quant = InputQuant{ParseScheme("fp8_e4m3:g16:scale=f32")};
  StreamedModel fp8_block{std::move(block), nullptr};
  EngineCheckpointSeed(dir, "ct_fp8_block", fp8_block, fixtures / "llama", EngineExportOptions{});
  Fp8MethodSeed(dir / "ct_fp8_block.ckpt", dir / "fp8_method_block.ckpt");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (fuzz/corpus)\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  const auto dir = [&](const char* name) {
    fs::create_directories(root / name);
    return root / name;
  };
  try {
    Safetensors(dir("safetensors_header"));
    Gguf(dir("gguf"));
    GgufVocab(dir("gguf_vocab"));
    Llama2c(dir("llama2c"));
    TopkBase(dir("topk_base"));
    KvScalesSeeds(dir("kv_scales"));
    RecipeSeeds(dir("recipe"));
    EngineCheckpointSeeds(dir("engine_checkpoint"));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_fuzz_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
