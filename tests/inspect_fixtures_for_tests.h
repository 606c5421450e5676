// Fake quantized checkpoints for the inspect tests: a 2-layer Llama-shaped folder (hidden 256,
// MLP 512, vocab 64) whose linears are written in the tensor layouts of formats.md sections 3-6 with
// zero-filled data (inspect reads headers; the few side tensors it reads get real values).
#pragma once

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace lowbit::inspect_testing {

namespace fs = std::filesystem;

inline constexpr uint64_t kHidden = 256, kInter = 512, kVocab = 64, kLayers = 2;

struct Linear {
  const char* name;
  uint64_t out, in;
};
inline constexpr Linear kLinears[] = {{"self_attn.q_proj", 256, 256}, {"self_attn.k_proj", 128, 256},
                                      {"self_attn.v_proj", 128, 256}, {"self_attn.o_proj", 256, 256},
                                      {"mlp.gate_proj", 512, 256},    {"mlp.up_proj", 512, 256},
                                      {"mlp.down_proj", 256, 512}};

inline std::string Prefix(uint64_t layer, const Linear& l) {
  return "model.layers." + std::to_string(layer) + "." + l.name;
}

// Parameters of the fixture model: the linears plus embeddings, lm_head and the RMSNorm weights.
inline uint64_t LinearParams() {
  uint64_t n = 0;
  for (const Linear& l : kLinears) n += l.out * l.in;
  return n * kLayers;
}
inline uint64_t OtherParams() { return 2 * kVocab * kHidden + (2 * kLayers + 1) * kHidden; }

class FakeCheckpoint {
 public:
  explicit FakeCheckpoint(const std::string& name)
      : dir_(fs::temp_directory_path() / ("lowbit_inspect_" + std::to_string(getpid())) / name) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }

  const fs::path& dir() const { return dir_; }
  uint64_t bytes() const { return bytes_; }

  // A tensor whose bytes repeat `word` (little-endian), or the given values.
  void Add(const std::string& name, DType dtype, std::vector<uint64_t> shape, uint32_t word = 0) {
    uint64_t n = DTypeSize(dtype);
    for (uint64_t d : shape) n *= d;
    std::vector<std::byte> data(n);
    for (uint64_t i = 0; i < n; ++i) data[i] = static_cast<std::byte>((word >> (8 * (i % 4))) & 0xff);
    Put(name, dtype, std::move(shape), std::move(data));
  }
  void AddI64(const std::string& name, const std::vector<int64_t>& values) {
    std::vector<std::byte> data(values.size() * 8);
    std::memcpy(data.data(), values.data(), data.size());
    Put(name, DType::kI64, {values.size()}, std::move(data));
  }

  // Embeddings, norms and lm_head in `dtype`: what every format keeps unquantized.
  void AddUnquantized(DType dtype = DType::kF16) {
    Add("model.embed_tokens.weight", dtype, {kVocab, kHidden});
    Add("lm_head.weight", dtype, {kVocab, kHidden});
    Add("model.norm.weight", dtype, {kHidden});
    for (uint64_t l = 0; l < kLayers; ++l)
      for (const char* n : {"input_layernorm", "post_attention_layernorm"})
        Add("model.layers." + std::to_string(l) + "." + n + ".weight", dtype, {kHidden});
  }
  void ForEachLinear(const std::function<void(const std::string&, const Linear&)>& fn) {
    for (uint64_t layer = 0; layer < kLayers; ++layer)
      for (const Linear& l : kLinears) fn(Prefix(layer, l), l);
  }

  // GPTQ (formats.md 3.1): input-major int32 words; `zeros` fills every qzeros word.
  void AddGptq(const std::string& p, const Linear& l, int bits, int group, uint32_t zeros) {
    const uint64_t groups = group > 0 ? l.in / group : 1;
    Add(p + ".qweight", DType::kI32, {l.in * bits / 32, l.out});
    Add(p + ".qzeros", DType::kI32, {groups, l.out * bits / 32}, zeros);
    Add(p + ".scales", DType::kF16, {groups, l.out});
    Add(p + ".g_idx", DType::kI32, {l.in});
  }
  // AWQ GEMM (formats.md 4): packed along the output dim.
  void AddAwq(const std::string& p, const Linear& l, int group) {
    Add(p + ".qweight", DType::kI32, {l.in, l.out / 8});
    Add(p + ".qzeros", DType::kI32, {l.in / group, l.out / 8});
    Add(p + ".scales", DType::kF16, {l.in / group, l.out});
  }
  // compressed-tensors pack-quantized int4 (formats.md 5.3).
  void AddCtPacked(const std::string& p, const Linear& l, int group) {
    Add(p + ".weight_packed", DType::kI32, {l.out, l.in / 8});
    Add(p + ".weight_scale", DType::kBF16, {l.out, l.in / group});
    AddI64(p + ".weight_shape", {static_cast<int64_t>(l.out), static_cast<int64_t>(l.in)});
  }

  void WriteJson(const std::string& file, const nlohmann::json& j) { std::ofstream(dir_ / file) << j.dump(2); }
  // config.json of the fixture architecture, with `qc` as quantization_config unless it is null.
  void WriteConfig(const nlohmann::json& qc) {
    nlohmann::json c = {{"architectures", {"LlamaForCausalLM"}},
                        {"model_type", "llama"},
                        {"hidden_size", kHidden},
                        {"intermediate_size", kInter},
                        {"num_hidden_layers", kLayers},
                        {"num_attention_heads", 4},
                        {"num_key_value_heads", 2},
                        {"vocab_size", kVocab},
                        {"torch_dtype", "float16"}};
    if (!qc.is_null()) c["quantization_config"] = qc;
    WriteJson("config.json", c);
  }
  void WriteTensors() {
    std::vector<TensorToWrite> list;
    for (const Stored& s : stored_) list.push_back({s.name, s.dtype, s.shape, s.data});
    WriteSafetensors(dir_ / "model.safetensors", list);
  }

 private:
  struct Stored {
    std::string name;
    DType dtype;
    std::vector<uint64_t> shape;
    std::vector<std::byte> data;
  };
  void Put(const std::string& name, DType dtype, std::vector<uint64_t> shape, std::vector<std::byte> data) {
    bytes_ += data.size();
    stored_.push_back({name, dtype, std::move(shape), std::move(data)});
  }

  fs::path dir_;
  std::vector<Stored> stored_;
  uint64_t bytes_ = 0;
};

}  // namespace lowbit::inspect_testing
