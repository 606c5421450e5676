// What every Hugging Face-style folder lowbit writes shares, whatever the tensor format inside:
// lowbit's own quantized checkpoint (io/quantized_checkpoint.h) and the engine exports for vLLM
// and transformers (io/engine_export.h). The module names of a model's linears, a list of tensors
// to write, sharding with model.safetensors.index.json, the side files copied from the source,
// and the all-or-nothing folder write.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/weights.h"

namespace lowbit {

// A linear under its Hugging Face module name, e.g. "model.layers.3.mlp.down_proj".
struct NamedLinear {
  std::string prefix;
  const Linear* linear;
};

// The decoder linears of the first `blocks` blocks, then lm_head unless tied (a tied lm_head is a
// copy of the embeddings in memory and is not stored, as Hugging Face does).
std::vector<NamedLinear> ModelLinears(const Model& m, size_t blocks);
// The linears of block `index` alone (model/weights.h BlockLinears, named as the checkpoint stores them).
std::vector<NamedLinear> HfBlockLinears(const ModelConfig& c, const LayerWeights& layer, size_t index);

// Tensors to write plus the buffers that back the ones made here; a deque keeps those buffers in
// place while the list grows, so the spans stay valid.
class TensorList {
 public:
  template <class T>
  void Add(std::string name, DType dtype, std::vector<uint64_t> shape, std::span<const T> data) {
    tensors_.push_back({std::move(name), dtype, std::move(shape), std::as_bytes(data)});
  }
  template <class T>
  void AddOwned(std::string name, DType dtype, std::vector<uint64_t> shape, const std::vector<T>& values) {
    const auto bytes = std::as_bytes(std::span(values));
    owned_.emplace_back(bytes.begin(), bytes.end());
    tensors_.push_back({std::move(name), dtype, std::move(shape), owned_.back()});
  }
  // fp32 values stored in the narrowest of BF16, F16 and F32 that holds every one of them exactly: a
  // bf16 source's embeddings and norms keep their 16 bits on disk, and the round trip stays exact.
  void AddFloats(std::string name, std::vector<uint64_t> shape, std::span<const float> values);
  // The same for values made by the caller (the list keeps them).
  void AddOwnedFloats(std::string name, std::vector<uint64_t> shape, const std::vector<float>& values);
  void AddOwnedBytes(std::string name, DType dtype, std::vector<uint64_t> shape, std::vector<std::byte> bytes) {
    owned_.push_back(std::move(bytes));
    tensors_.push_back({std::move(name), dtype, std::move(shape), owned_.back()});
  }
  uint64_t bytes() const;
  size_t size() const { return tensors_.size(); }
  // The official writer's order (widest element first, then by name) keeps every tensor aligned
  // to its element size, which mmap readers appreciate even though ours does not need it.
  std::vector<TensorToWrite> Sorted() &&;

 private:
  std::vector<TensorToWrite> tensors_;
  std::deque<std::vector<std::byte>> owned_;
};

// The safetensors dtype of a scale type (E8M0 and UE4M3 are raw byte codes).
DType ScaleDType(ScaleType t);

// Hugging Face's safetensors shard limit (transformers' save_pretrained default).
inline constexpr uint64_t kDefaultShardBytes = uint64_t{5} << 30;

// Writes safetensors shards into `dir` as tensors arrive, so a model is streamed to disk a block at
// a time: a shard is written as soon as the next list of tensors would take it past
// `max_shard_bytes` (a list larger than the limit gets a shard of its own). Finish names them
// model.safetensors, or model-0000i-of-0000n.safetensors with model.safetensors.index.json
// (metadata.total_size and weight_map), as transformers does. Each list's bytes go to disk as it is
// added (one spill file per element size), never held until its shard is full: the shard is then
// assembled from them, widest elements first, so every tensor stays aligned to its element size.
class ShardedSafetensorsWriter {
 public:
  ShardedSafetensorsWriter(std::filesystem::path dir, uint64_t max_shard_bytes, std::map<std::string, std::string> metadata);
  // The tensors of `list` go into one shard together.
  void Add(TensorList list);
  // Writes the last shard and the index; returns the number of shards.
  size_t Finish();
  uint64_t bytes() const { return total_; }

 private:
  void Flush();
  std::filesystem::path SpillPath(size_t size_class) const;

  std::filesystem::path dir_;
  uint64_t max_shard_bytes_;
  std::map<std::string, std::string> metadata_;
  // The current shard's tensors in arrival order, and the byte count of each element-size class
  // (8, 4, 2, 1 bytes) already in its spill file.
  std::vector<TensorEntry> pending_;
  std::array<uint64_t, 4> spilled_ = {};
  uint64_t total_ = 0;
  std::vector<std::pair<std::filesystem::path, std::vector<std::string>>> written_;  // temporary name, tensors
};

// The destination folder without a trailing separator ("out/" would otherwise give the temp dir
// "out/.tmp-N", inside the destination).
std::filesystem::path CheckpointDestination(const std::filesystem::path& out_dir);

// The checks a folder writer starts with, for callers to run before hours of quantization:
// `out_dir` is free (absent or an empty folder), `source_dir` is a Hugging Face folder whose
// config.json describes `config`, and the model uses rotate-half RoPE. GGUF / llama2.c sources
// (empty source_dir, adjacent-pair RoPE with permuted Q/K rows, no tokenizer files) cannot be
// written as HF folders yet: Error saying so.
void CheckQuantizedModelTarget(const ModelConfig& config, const std::filesystem::path& out_dir,
                               const std::filesystem::path& source_dir);

// Copies the tokenizer and generation files of `source_dir` that exist into `dest`.
void CopySideFiles(const std::filesystem::path& source_dir, const std::filesystem::path& dest);

// Builds the folder `out_dir` all or nothing: `fill` writes into the sibling `out_dir.tmp-<pid>`,
// which is then renamed into place; on any exception the temporary folder is removed.
void WriteFolderAtomic(const std::filesystem::path& out_dir, const std::function<void(const std::filesystem::path&)>& fill);

}  // namespace lowbit
