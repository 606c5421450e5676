// A minimal GGUF writer for tests. Build() produces ggml's own layout (formats.md 2.1: header,
// KVs, tensor infos, zero padding to the alignment, each tensor padded to the alignment); the
// public knobs (magic, version, counts, raw KV records, per-tensor offsets) let tests break a
// file in exactly one way at a time. MakeTinyLlama builds a complete 2-layer llama in it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "formats/minifloat.h"
#include "io/gguf.h"

namespace lowbit::gguf_testing {

class GgufTestWriter {
 public:
  struct Tensor {
    std::string name;
    uint32_t type = 0;
    std::vector<uint64_t> ne;
    std::vector<std::byte> data;
    std::optional<uint64_t> offset;  // default: ggml's running padded offset
  };

  uint32_t magic = 0x46554747;  // "GGUF"
  uint32_t version = 3;
  uint64_t alignment = 32;  // layout only; add general.alignment yourself when it is not 32
  std::optional<uint64_t> tensor_count_override, kv_count_override;
  std::vector<Tensor> tensors;

  template <class T>
  static std::vector<std::byte> Pod(const T& v) {
    std::vector<std::byte> b(sizeof(T));
    std::memcpy(b.data(), &v, sizeof(T));
    return b;
  }
  static std::vector<std::byte> Str(std::string_view s) {
    std::vector<std::byte> b = Pod<uint64_t>(s.size());
    for (char ch : s) b.push_back(static_cast<std::byte>(ch));
    return b;
  }
  static void Append(std::vector<std::byte>& out, const std::vector<std::byte>& more) {
    out.insert(out.end(), more.begin(), more.end());
  }

  // A KV record with an already-encoded value.
  void AddKv(std::string_view key, uint32_t type, const std::vector<std::byte>& value) {
    std::vector<std::byte> r = Str(key);
    Append(r, Pod<uint32_t>(type));
    Append(r, value);
    AddRawKv(r);
  }
  // A complete, possibly malformed, KV record.
  void AddRawKv(const std::vector<std::byte>& record) {
    Append(kv_bytes_, record);
    ++kv_count_;
  }
  void AddU8(std::string_view key, uint8_t v) { AddKv(key, 0, Pod(v)); }
  void AddU32(std::string_view key, uint32_t v) { AddKv(key, 4, Pod(v)); }
  void AddI32(std::string_view key, int32_t v) { AddKv(key, 5, Pod(v)); }
  void AddF32(std::string_view key, float v) { AddKv(key, 6, Pod(v)); }
  void AddBool(std::string_view key, bool v) { AddKv(key, 7, Pod<uint8_t>(v ? 1 : 0)); }
  void AddU64(std::string_view key, uint64_t v) { AddKv(key, 10, Pod(v)); }
  void AddString(std::string_view key, std::string_view v) { AddKv(key, 8, Str(v)); }
  void AddStringArray(std::string_view key, const std::vector<std::string>& v) {
    std::vector<std::byte> b = Pod<uint32_t>(8);
    Append(b, Pod<uint64_t>(v.size()));
    for (const std::string& s : v) Append(b, Str(s));
    AddKv(key, 9, b);
  }
  void AddF32Array(std::string_view key, const std::vector<float>& v) {
    std::vector<std::byte> b = Pod<uint32_t>(6);
    Append(b, Pod<uint64_t>(v.size()));
    for (float x : v) Append(b, Pod(x));
    AddKv(key, 9, b);
  }

  void AddTensor(std::string name, uint32_t type, std::vector<uint64_t> ne, std::vector<std::byte> data) {
    tensors.push_back({std::move(name), type, std::move(ne), std::move(data), std::nullopt});
  }
  void AddF32Tensor(std::string name, std::vector<uint64_t> ne, const std::vector<float>& values) {
    std::vector<std::byte> data(values.size() * sizeof(float));
    if (!values.empty()) std::memcpy(data.data(), values.data(), data.size());
    AddTensor(std::move(name), 0, std::move(ne), std::move(data));
  }

  std::vector<std::byte> Build() const {
    std::vector<std::byte> out;
    Append(out, Pod(magic));
    Append(out, Pod(version));
    Append(out, Pod<uint64_t>(tensor_count_override.value_or(tensors.size())));
    Append(out, Pod<uint64_t>(kv_count_override.value_or(kv_count_)));
    Append(out, kv_bytes_);
    uint64_t running = 0;
    for (const Tensor& t : tensors) {
      Append(out, Str(t.name));
      Append(out, Pod<uint32_t>(static_cast<uint32_t>(t.ne.size())));
      for (uint64_t n : t.ne) Append(out, Pod(n));
      Append(out, Pod(t.type));
      Append(out, Pod<uint64_t>(t.offset.value_or(running)));
      running += Padded(t.data.size());
    }
    out.resize(Padded(out.size()));
    for (const Tensor& t : tensors) {
      Append(out, t.data);
      out.resize(Padded(out.size()));
    }
    return out;
  }

  void Write(const std::filesystem::path& path) const { WriteBytes(path, Build()); }
  static void WriteBytes(const std::filesystem::path& path, const std::vector<std::byte>& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }

 private:
  uint64_t Padded(uint64_t n) const { return (n + alignment - 1) / alignment * alignment; }

  std::vector<std::byte> kv_bytes_;
  uint64_t kv_count_ = 0;
};

// ---- A tiny llama (formats.md 2.5-2.6): F32 weights plus one F16, one BF16 and one Q8_0. ----

inline constexpr uint32_t kDim = 8, kLayers = 2, kHeads = 2, kKvHeads = 1, kHeadDim = 4, kFfn = 32, kVocab = 16;

// Values exact in fp16 and bf16 (k/64, |k| <= 128 needs at most 8 significant bits) or not.
inline std::vector<float> Values(uint32_t seed, uint64_t n, bool exact16) {
  std::vector<float> v(n);
  for (uint64_t i = 0; i < n; ++i)
    v[i] = exact16 ? static_cast<float>(static_cast<int>((seed * 31 + i * 7) % 257) - 128) / 64.0f
                   : 0.5f * std::sin(1.3f * seed + 0.7f * static_cast<float>(i));
  return v;
}

struct TinyModel {
  GgufTestWriter writer;
  std::map<std::string, std::vector<float>> want;  // decoded values per tensor

  void F32(const std::string& name, std::vector<uint64_t> ne, uint32_t seed) {
    want[name] = Values(seed, ne[0] * (ne.size() > 1 ? ne[1] : 1), false);
    writer.AddF32Tensor(name, ne, want[name]);
  }
  void Half(const std::string& name, std::vector<uint64_t> ne, uint32_t seed, bool bf16) {
    want[name] = Values(seed, ne[0] * ne[1], true);
    std::vector<std::byte> bytes;
    for (float x : want[name])
      GgufTestWriter::Append(bytes, GgufTestWriter::Pod<uint16_t>(bf16 ? Fp32ToBf16(x) : Fp32ToFp16(x)));
    writer.AddTensor(name, bf16 ? kGgmlBF16 : kGgmlF16, ne, bytes);
  }
  // ggml's quantize_row_q8_0_ref (formats.md 2.8): d = amax / 127, q = roundf(x / d).
  void Q8_0(const std::string& name, std::vector<uint64_t> ne, uint32_t seed) {
    const std::vector<float> x = Values(seed, ne[0] * ne[1], false);
    std::vector<std::byte> bytes;
    std::vector<float>& y = want[name];
    for (size_t b = 0; b < x.size(); b += 32) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::abs(x[b + j]));
      const float d = amax / 127, id = d != 0 ? 1 / d : 0;
      const uint16_t d16 = Fp32ToFp16(d);
      GgufTestWriter::Append(bytes, GgufTestWriter::Pod(d16));
      for (int j = 0; j < 32; ++j) {
        const auto q = static_cast<int8_t>(std::round(x[b + j] * id));
        GgufTestWriter::Append(bytes, GgufTestWriter::Pod(q));
        y.push_back(q * Fp16ToFp32(d16));
      }
    }
    writer.AddTensor(name, kGgmlQ8_0, ne, bytes);
  }
  // Random blocks of a block type with sane headers: fp16 scales of either sign (ggml's reference
  // quantizers make d negative when the largest magnitude is negative; K-quant super-scales are
  // positive, their signed sub-scales are in the random bytes), fp16 mins, MXFP4 exponents near
  // 127. `want` is what the reader decodes.
  void Blocks(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint32_t seed) {
    writer.AddTensor(name, type, ne, RandomBlocks(type, ne[0] * ne[1], seed));
    want[name].resize(ne[0] * ne[1]);
    DequantizeGgufRow(type, writer.tensors.back().data.data(), ne[0] * ne[1], want[name].data());
  }
  static std::vector<std::byte> RandomBlocks(uint32_t type, uint64_t n, uint32_t seed) {
    struct Header {
      uint32_t type;
      int d_at, min_at;  // byte offsets of the fp16 scale and min (-1: none)
      float scale;       // largest |d|
    };
    constexpr Header kHeaders[] = {
        {kGgmlQ4_0, 0, -1, 0.05f},    {kGgmlQ4_1, 0, 2, 0.05f},     {kGgmlQ5_0, 0, -1, 0.05f},
        {kGgmlQ5_1, 0, 2, 0.05f},     {kGgmlQ8_0, 0, -1, 0.05f},    {kGgmlQ8_1, 0, -1, 0.05f},
        {kGgmlIQ4_NL, 0, -1, 0.002f}, {kGgmlQ2_K, 80, 82, 0.005f},  {kGgmlQ3_K, 108, -1, 0.002f},
        {kGgmlQ4_K, 0, 2, 0.002f},    {kGgmlQ5_K, 0, 2, 0.002f},    {kGgmlQ6_K, 208, -1, 0.0005f},
        {kGgmlIQ4_XS, 0, -1, 0.002f},
    };
    const GgmlTypeInfo& info = *FindGgmlType(type);
    std::mt19937 rng(seed);
    std::vector<std::byte> bytes(n / info.block_elems * info.block_bytes);
    for (std::byte& b : bytes) b = static_cast<std::byte>(rng() & 0xFF);
    const Header* header = nullptr;
    for (const Header& h : kHeaders)
      if (h.type == type) header = &h;
    for (size_t at = 0; at < bytes.size(); at += info.block_bytes) {
      if (type == kGgmlMXFP4) {
        bytes[at] = static_cast<std::byte>(117 + rng() % 20);
        continue;
      }
      std::uniform_real_distribution<float> scale(header->scale / 25, header->scale), min(-0.5f, 0.5f);
      const bool k_quant = info.block_elems == 256;
      const uint16_t d = Fp32ToFp16(!k_quant && rng() % 4 == 0 ? -scale(rng) : scale(rng));
      std::memcpy(&bytes[at + header->d_at], &d, 2);
      if (header->min_at >= 0) {
        const uint16_t m = Fp32ToFp16(k_quant ? scale(rng) / 4 : min(rng));
        std::memcpy(&bytes[at + header->min_at], &m, 2);
      }
    }
    return bytes;
  }
};

struct TinyOptions {
  bool with_output = true;
  std::string arch = "llama";
  float rope_base = 500000.0f;
  uint32_t ffn = kFfn;
  bool bf16_embeddings = false;
};

inline TinyModel MakeTinyLlama(const TinyOptions& o = {}) {
  TinyModel m;
  GgufTestWriter& w = m.writer;
  w.AddString("general.architecture", o.arch);
  w.AddString("general.name", "tiny");
  w.AddU32("general.quantization_version", 2);
  w.AddU32("llama.context_length", 64);
  w.AddU32("llama.embedding_length", kDim);
  w.AddU32("llama.block_count", kLayers);
  w.AddU32("llama.feed_forward_length", o.ffn);
  w.AddU32("llama.attention.head_count", kHeads);
  w.AddU32("llama.attention.head_count_kv", kKvHeads);
  w.AddU32("llama.rope.dimension_count", kHeadDim);
  w.AddF32("llama.rope.freq_base", o.rope_base);
  w.AddF32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.AddString("tokenizer.ggml.model", "llama");
  std::vector<std::string> tokens;
  for (uint32_t i = 0; i < kVocab; ++i) tokens.push_back("t" + std::to_string(i));
  w.AddStringArray("tokenizer.ggml.tokens", tokens);
  w.AddU32("tokenizer.ggml.bos_token_id", 3);
  w.AddU32("tokenizer.ggml.eos_token_id", 4);
  if (o.bf16_embeddings) m.Half("token_embd.weight", {kDim, kVocab}, 1, true);
  else m.F32("token_embd.weight", {kDim, kVocab}, 1);
  for (uint32_t l = 0; l < kLayers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const uint32_t s = 10 * (l + 1);
    m.F32(p + "attn_norm.weight", {kDim}, s);
    if (l == 1) m.Half(p + "attn_q.weight", {kDim, kHeads * kHeadDim}, s + 1, false);
    else m.F32(p + "attn_q.weight", {kDim, kHeads * kHeadDim}, s + 1);
    m.F32(p + "attn_k.weight", {kDim, kKvHeads * kHeadDim}, s + 2);
    m.F32(p + "attn_v.weight", {kDim, kKvHeads * kHeadDim}, s + 3);
    m.F32(p + "attn_output.weight", {kHeads * kHeadDim, kDim}, s + 4);
    m.F32(p + "ffn_norm.weight", {kDim}, s + 5);
    m.F32(p + "ffn_gate.weight", {kDim, o.ffn}, s + 6);
    if (l == 1) m.Half(p + "ffn_up.weight", {kDim, o.ffn}, s + 7, true);
    else m.F32(p + "ffn_up.weight", {kDim, o.ffn}, s + 7);
    if (l == 0) m.Q8_0(p + "ffn_down.weight", {o.ffn, kDim}, s + 8);
    else m.F32(p + "ffn_down.weight", {o.ffn, kDim}, s + 8);
  }
  m.F32("output_norm.weight", {kDim}, 90);
  if (o.with_output) m.F32("output.weight", {kDim, kVocab}, 91);
  return m;
}

}  // namespace lowbit::gguf_testing
