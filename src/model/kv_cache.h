// The key/value cache of one sequence, paged: positions live in fixed-size blocks of
// `block_tokens`, found through a block table per layer, allocated as the sequence grows. Each
// block stores K and V as QuantizedTensors in the cache dtype:
//   fp32 / fp16 / bf16   plain rows [block x kv_dim];
//   fp8_e4m3 / fp8_e5m2  one scale per layer for K and for V (static, from calibration; else 1.0);
//   int8                 symmetric, one scale per token and KV head;
//   int4 / int2          KIVI: K per channel over the block's tokens, V per token and KV head,
//                        asymmetric; the newest `recent_tokens` positions stay in fp16 until a
//                        whole block of older tokens is ready, so recent tokens are exact and
//                        history is compact.
// Within a block, each KV head's positions are consecutive rows ([kv_heads x block] rows of
// head_dim), so a reader's tile is one contiguous run of memory. Latent attention (DeepSeek) caches one
// latent row as both K and V: stored once, as K, in every dtype but KIVI's (whose K and V are quantized
// along different axes), and its FP8 V scale is K's. Readers decode one KV head over a
// range of positions into a small tile (attention never needs more than one block at a time).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "kernels/attention_tile.h"
#include "model/config.h"
#include "quant/quantized_tensor.h"

namespace lowbit {

enum class KvDtype : uint8_t { kF32, kF16, kBF16, kFp8E4M3, kFp8E5M2, kInt8, kInt4, kInt2 };

std::string_view KvDtypeName(KvDtype dtype);
KvDtype ParseKvDtype(std::string_view name);  // throws Error listing the names
std::string KnownKvDtypes();

struct KvCacheOptions {
  KvDtype dtype = KvDtype::kF32;
  size_t block_tokens = 32;   // positions per block; also the K group of int4 / int2
  size_t recent_tokens = 32;  // int4 / int2: newest positions kept in fp16
  // FP8: static scales per layer (value = code * scale); empty = 1.0 for every layer.
  std::vector<float> k_scales, v_scales;
};

class KvCache {
 public:
  KvCache(const ModelConfig& config, size_t capacity, KvCacheOptions options = {});

  size_t size() const { return size_; }  // positions filled
  size_t capacity() const { return capacity_; }
  const KvCacheOptions& options() const { return options_; }
  size_t head_dim() const { return config_.head_dim; }
  // Empties the cache; its blocks stay allocated and are reused by later writes.
  void Clear();
  // After a forward pass wrote n more positions. Sliding-window and chunked layers then hand the blocks no
  // later token can see back to the pool, so each holds about window (chunk) + one block of positions however
  // long the sequence grows (Gemma 2/3, Llama 4: most layers); readers of those layers start inside it.
  void Advance(size_t n);

  // Stores K and V ([kv_dim] each) of `layer` at `pos`; positions are written in order. Latent attention
  // passes its latent as both.
  void Write(size_t layer, size_t pos, const float* k, const float* v);

  // Positions [begin, end) of one KV head as fp32 rows of head_dim, as the token at position
  // `reader` sees them (int4 / int2: the reader's recent window is exact). Either points into
  // the cache (fp32) or into `scratch` ([(end - begin) x head_dim]).
  struct Tile {
    const float* data;
    size_t stride;  // floats between consecutive positions
  };
  Tile ReadK(size_t layer, size_t head, size_t begin, size_t end, size_t reader, float* scratch) const;
  Tile ReadV(size_t layer, size_t head, size_t begin, size_t end, size_t reader, float* scratch) const;
  // K and V together for attention, handed over in place (the kernel widens fp16 / bf16 / FP8 /
  // int8 rows in registers), KIVI's int4 / int2 as codes with their affine maps in the scratch
  // tiles (2 x head_dim floats for K, 2 x positions for V). Null scratch tiles give the pointers
  // alone, to prefetch the next tile.
  AttentionTile ReadTile(size_t layer, size_t head, size_t begin, size_t end, size_t reader, float* k_scratch,
                         float* v_scratch) const;

  size_t bytes() const;          // held now (reusable blocks too), metadata and the fp16 window included
  double BytesPerToken() const;  // one more cached position in a full block, all layers, K + V (V once shared)

 private:
  struct Block {
    QuantizedTensor k;
    std::optional<QuantizedTensor> v;  // none where V is K (shared_kv_)
    size_t storage_bytes() const { return k.storage_bytes() + (v ? v->storage_bytes() : 0); }
  };
  static const QuantizedTensor& V(const Block& block) { return block.v ? *block.v : block.k; }
  bool kivi() const { return options_.dtype == KvDtype::kInt4 || options_.dtype == KvDtype::kInt2; }
  Block NewBlock(size_t layer, HugePageArena* arena) const;
  void SetLayerScales(Block& block, size_t layer) const;  // FP8: the layer's static scales
  Block& BlockAt(size_t layer, size_t pos);
  // int4 / int2: positions before this limit are read quantized by a token at `reader`.
  size_t QuantizedBefore(size_t reader) const;
  void QuantizeKBlock(size_t layer, size_t block);
  Tile Read(bool key, size_t layer, size_t head, size_t begin, size_t end, size_t reader, float* scratch) const;

  ModelConfig config_;
  KvCacheOptions options_;
  size_t capacity_, size_ = 0;
  std::vector<std::vector<uint32_t>> block_table_;  // [layer][block] -> index into blocks_
  // The blocks' storage, on huge pages (a copy of the cache gets an arena of its own; its copied
  // blocks are on the heap).
  struct Arena {
    std::unique_ptr<HugePageArena> arena = std::make_unique<HugePageArena>();
    Arena() = default;
    Arena(const Arena&) : Arena() {}
    Arena& operator=(const Arena&) { return *this; }
    Arena(Arena&&) = default;
    Arena& operator=(Arena&&) = default;
  };
  Arena arena_;  // before blocks_, which it outlives
  std::vector<Block> blocks_;
  std::vector<uint32_t> free_blocks_;  // indices into blocks_ released by Clear or by sliding windows
  static constexpr uint32_t kReleased = UINT32_MAX;  // a block table entry whose block went back to the pool
  std::vector<size_t> released_blocks_;  // leading blocks of each layer already released
  // Block schemes, parsed once (K is [kv_dim x block] for KIVI, else [block x kv_dim] like V).
  QuantScheme k_scheme_, v_scheme_;
  bool k_transposed_ = false;
  bool shared_kv_ = false;  // latent attention outside KIVI: V rows are the K rows
  // int4 / int2: fp16 K and V rows of positions [recent_begin_, written) per layer.
  size_t recent_begin_ = 0;
  std::vector<std::vector<uint16_t>> recent_k_, recent_v_;
};

}  // namespace lowbit
