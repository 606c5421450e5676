#include "model/kv_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "formats/codec.h"
#include "quant/rtn.h"

namespace lowbit {
namespace {

constexpr std::pair<KvDtype, std::string_view> kKvDtypeNames[] = {
    {KvDtype::kF32, "fp32"},           {KvDtype::kF16, "fp16"},           {KvDtype::kBF16, "bf16"},
    {KvDtype::kFp8E4M3, "fp8_e4m3"},   {KvDtype::kFp8E5M2, "fp8_e5m2"},   {KvDtype::kInt8, "int8"},
    {KvDtype::kInt4, "int4"},          {KvDtype::kInt2, "int2"}};

}  // namespace

std::string_view KvDtypeName(KvDtype dtype) {
  for (const auto& [d, name] : kKvDtypeNames)
    if (d == dtype) return name;
  return "?";
}

std::string KnownKvDtypes() {
  std::string list;
  for (const auto& [d, name] : kKvDtypeNames) {
    if (!list.empty()) list += '|';
    list += name;
  }
  return list;
}

KvDtype ParseKvDtype(std::string_view name) {
  for (const auto& [d, n] : kKvDtypeNames)
    if (n == name || (name == "fp8" && d == KvDtype::kFp8E4M3)) return d;
  Fail("unknown KV cache dtype '{}' (known: {})", name, KnownKvDtypes());
}

namespace {

// The schemes of a block's K and V tensors for a cache dtype.
struct BlockSpecs {
  std::string k, v;
  bool k_transposed = false;  // KIVI: K is [kv_dim x block], quantized per channel
};

BlockSpecs BlockSpecsFor(KvDtype dtype, size_t head_dim) {
  switch (dtype) {
    case KvDtype::kF32: return {"fp32", "fp32"};
    case KvDtype::kF16: return {"fp16", "fp16"};
    case KvDtype::kBF16: return {"bf16", "bf16"};
    case KvDtype::kFp8E4M3:
    case KvDtype::kFp8E5M2: {
      const std::string spec = fmt::format("{}:tensor:scale=f32", KvDtypeName(dtype));
      return {spec, spec};
    }
    case KvDtype::kInt8: {
      const std::string spec = fmt::format("int8:g{}:scale=f32", head_dim);
      return {spec, spec};
    }
    case KvDtype::kInt2:
    case KvDtype::kInt4: {
      const std::string_view e = KvDtypeName(dtype);
      return {fmt::format("{}:channel:asym", e), fmt::format("{}:g{}:asym", e, head_dim), true};
    }
  }
  return {"fp32", "fp32"};
}

}  // namespace

KvCache::KvCache(const ModelConfig& config, size_t capacity, KvCacheOptions options)
    : config_(config), options_(std::move(options)), capacity_(capacity), block_table_(config.n_layers),
      released_blocks_(config.n_layers) {
  if (options_.block_tokens == 0) Fail("KV cache: block size must be positive");
  for (const auto* scales : {&options_.k_scales, &options_.v_scales})
    if (!scales->empty() && scales->size() != config.n_layers)
      Fail("KV cache: {} FP8 scales given for {} layers", scales->size(), config.n_layers);
  if (kivi()) {
    recent_k_.resize(config.n_layers);
    recent_v_.resize(config.n_layers);
  }
  const BlockSpecs specs = BlockSpecsFor(options_.dtype, config.head_dim);
  k_scheme_ = ParseScheme(specs.k);
  v_scheme_ = ParseScheme(specs.v);
  k_transposed_ = specs.k_transposed;
  shared_kv_ = config.mla() && !kivi();
}

void KvCache::Clear() {
  size_ = 0;
  recent_begin_ = 0;
  for (auto& table : block_table_) {
    for (const uint32_t index : table)
      if (index != kReleased) free_blocks_.push_back(index);
    table.clear();
  }
  std::ranges::fill(released_blocks_, 0);
  for (auto* recent : {&recent_k_, &recent_v_})
    for (auto& rows : *recent) rows.clear();
}

KvCache::Block KvCache::NewBlock(size_t layer, HugePageArena* arena) const {
  const size_t b = options_.block_tokens, kv = config_.kv_dim(), rows = config_.n_kv_heads * b;
  Block block{k_transposed_ ? QuantizedTensor(k_scheme_, kv, b, arena)
                            : QuantizedTensor(k_scheme_, rows, config_.head_dim, arena),
              std::nullopt};
  if (!shared_kv_) block.v.emplace(v_scheme_, rows, config_.head_dim, arena);
  SetLayerScales(block, layer);
  return block;
}

void KvCache::SetLayerScales(Block& block, size_t layer) const {
  if (options_.dtype != KvDtype::kFp8E4M3 && options_.dtype != KvDtype::kFp8E5M2) return;
  block.k.SetScale(0, options_.k_scales.empty() ? 1.0f : options_.k_scales[layer]);
  if (block.v) block.v->SetScale(0, options_.v_scales.empty() ? 1.0f : options_.v_scales[layer]);
}

KvCache::Block& KvCache::BlockAt(size_t layer, size_t pos) {
  std::vector<uint32_t>& table = block_table_[layer];
  const size_t index = pos / options_.block_tokens;
  while (table.size() <= index) {
    if (free_blocks_.empty()) {
      table.push_back(static_cast<uint32_t>(blocks_.size()));
      blocks_.push_back(NewBlock(layer, arena_.arena.get()));
    } else {  // every position is written before it is read, so only per-layer state needs resetting
      table.push_back(free_blocks_.back());
      free_blocks_.pop_back();
      SetLayerScales(blocks_[table.back()], layer);
    }
  }
  return blocks_[table[index]];
}

size_t KvCache::QuantizedBefore(size_t reader) const {
  const size_t b = options_.block_tokens, r = options_.recent_tokens;
  return reader + 1 > r ? (reader + 1 - r) / b * b : 0;
}

void KvCache::Write(size_t layer, size_t pos, const float* k, const float* v) {
  if (pos >= capacity_) Fail("KV cache: position {} is past the capacity of {}", pos, capacity_);
  const size_t kv = config_.kv_dim(), hd = config_.head_dim, b = options_.block_tokens, row = pos % b;
  Block& block = BlockAt(layer, pos);
  auto encode_row = [&](QuantizedTensor& q, const float* values) {
    for (size_t h = 0; h < config_.n_kv_heads; ++h) {
      const float* head = values + h * hd;
      if (q.scheme().granularity.kind == GranularityKind::kGroup)  // per token and head: the scale first
        ChooseCellScale(q, h * b + row, std::span<const float>(head, hd));
      EncodeRow(q, h * b + row, head);
    }
  };
  if (shared_kv_) {
    LOWBIT_CHECK(k == v);
    encode_row(block.k, k);
    return;
  }
  encode_row(*block.v, v);
  if (!kivi()) {
    encode_row(block.k, k);
    return;
  }
  // KIVI: K waits in fp16 (with V) until its block is complete, then is quantized per channel.
  for (auto [recent, values] : {std::pair{&recent_k_[layer], k}, std::pair{&recent_v_[layer], v}}) {
    LOWBIT_CHECK(recent->size() == (pos - recent_begin_) * kv);
    recent->resize(recent->size() + kv);
    Fp32ToFp16Row(values, kv, recent->data() + recent->size() - kv);
  }
  if (row + 1 == options_.block_tokens) QuantizeKBlock(layer, pos / options_.block_tokens);
}

void KvCache::QuantizeKBlock(size_t layer, size_t block_index) {
  const size_t b = options_.block_tokens, kv = config_.kv_dim(), first = block_index * b;
  std::vector<float> rows(b * kv), channels(kv * b);
  Fp16ToFp32Row(recent_k_[layer].data() + (first - recent_begin_) * kv, b * kv, rows.data());
  for (size_t t = 0; t < b; ++t)
    for (size_t c = 0; c < kv; ++c) channels[c * b + t] = rows[t * kv + c];
  Block& block = blocks_[block_table_[layer][block_index]];
  block.k = QuantizeRtn(channels, kv, b, block.k.scheme(), "K cache");
}

void KvCache::Advance(size_t n) {
  size_ += n;
  // The next reader (position size_) sees positions from first_visible on; blocks wholly before that are dead.
  for (size_t l = 0; l < block_table_.size(); ++l) {
    std::vector<uint32_t>& table = block_table_[l];
    const size_t dead = std::min(config_.first_visible(l, size_) / options_.block_tokens, table.size());
    for (size_t& b = released_blocks_[l]; b < dead; ++b) {
      free_blocks_.push_back(table[b]);
      table[b] = kReleased;
    }
  }
  if (!kivi() || size_ == 0) return;
  // Drop fp16 rows no future reader (position >= size_) will read unquantized.
  const size_t keep_from = QuantizedBefore(size_ - 1), kv = config_.kv_dim();
  if (keep_from <= recent_begin_) return;
  for (auto* recent : {&recent_k_, &recent_v_})
    for (auto& rows : *recent) rows.erase(rows.begin(), rows.begin() + (keep_from - recent_begin_) * kv);
  recent_begin_ = keep_from;
}

KvCache::Tile KvCache::Read(bool key, size_t layer, size_t head, size_t begin, size_t end, size_t reader,
                            float* scratch) const {
  const size_t hd = config_.head_dim, kv = config_.kv_dim(), b = options_.block_tokens;
  LOWBIT_CHECK(begin < end && end <= reader + 1 && begin / b == (end - 1) / b);
  if (kivi() && begin >= QuantizedBefore(reader)) {  // the reader's exact recent window
    const std::vector<uint16_t>& recent = (key ? recent_k_ : recent_v_)[layer];
    LOWBIT_CHECK(begin >= recent_begin_);
    for (size_t p = begin; p < end; ++p)
      Fp16ToFp32Row(recent.data() + (p - recent_begin_) * kv + head * hd, hd, scratch + (p - begin) * hd);
    return {scratch, hd};
  }
  const Block& block = blocks_[block_table_[layer][begin / b]];
  const QuantizedTensor& q = key ? block.k : V(block);
  const size_t first = begin % b, n = end - begin;
  if (kivi() && key) {  // [kv_dim x block]: one channel per row, the head's rows decoded at once
    thread_local std::vector<float> channels;
    channels.resize(hd * b);
    q.DequantizeRows(head * hd, hd, channels.data());
    for (size_t t = 0; t < n; ++t)
      for (size_t c = 0; c < hd; ++c) scratch[t * hd + c] = channels[c * b + first + t];
    return {scratch, hd};
  }
  // A head's positions are consecutive rows of the block: one contiguous run of memory.
  const size_t row = head * b + first;
  if (q.scheme().element->bits == 32) return {reinterpret_cast<const float*>(q.codes().data() + row * q.row_bytes()), hd};
  q.DequantizeRows(row, n, scratch);
  return {scratch, hd};
}

AttentionTile KvCache::ReadTile(size_t layer, size_t head, size_t begin, size_t end, size_t reader, float* k_scratch,
                                float* v_scratch) const {
  const size_t b = options_.block_tokens, hd = config_.head_dim, n = end - begin;
  LOWBIT_CHECK(begin < end && end <= reader + 1 && begin / b == (end - 1) / b);
  if (kivi() && begin >= QuantizedBefore(reader)) {  // the reader's exact recent window: fp16 rows in place
    LOWBIT_CHECK(begin >= recent_begin_);
    const size_t kv = config_.kv_dim(), at = (begin - recent_begin_) * kv + head * hd;
    return {recent_k_[layer].data() + at, kv, recent_v_[layer].data() + at, kv, n, TileElement::kF16};
  }
  const Block& block = blocks_[block_table_[layer][begin / b]];
  const QuantizedTensor& v = V(block);
  const size_t row = head * b + begin % b;  // of V, and of K but for KIVI's [kv_dim x block]
  switch (options_.dtype) {
    case KvDtype::kF16:
    case KvDtype::kBF16: {
      const size_t at = row * block.k.row_bytes();
      return {block.k.codes().data() + at, hd, v.codes().data() + at, hd, n,
              options_.dtype == KvDtype::kF16 ? TileElement::kF16 : TileElement::kBF16};
    }
    case KvDtype::kFp8E4M3:
    case KvDtype::kFp8E5M2: {  // the layer's static scales for K and for V
      const auto scale = [](const QuantizedTensor& q) {
        LOWBIT_CHECK(q.grid().grid_rows == 1 && q.grid().grid_cols == 1);
        return q.Scale(0) * q.tensor_scale();
      };
      AttentionTile tile{block.k.codes().data() + row * hd, hd, v.codes().data() + row * hd, hd, n,
                         options_.dtype == KvDtype::kFp8E4M3 ? TileElement::kE4M3 : TileElement::kE5M2};
      tile.k_tensor_scale = scale(block.k);
      tile.v_tensor_scale = scale(v);
      return tile;
    }
    case KvDtype::kInt8: {  // codes offset by 128, one fp32 scale per row (token and head)
      const auto scales = [&](const QuantizedTensor& q) {
        LOWBIT_CHECK(q.grid().grid_cols == 1 && q.tensor_scale() == 1.0f && q.decode_table()[0] == -128.0f);
        return reinterpret_cast<const float*>(q.scale_bytes().data()) + row;
      };
      AttentionTile tile{block.k.codes().data() + row * hd, hd, v.codes().data() + row * hd, hd, n,
                         TileElement::kI8};
      tile.k_scales = scales(block.k);
      tile.v_scales = scales(v);
      return tile;
    }
    case KvDtype::kInt4:
    case KvDtype::kInt2: {
      // Codes in place: K's channel rows of the head (each the block's positions), V's rows of the
      // tile; the scratch tiles hold their affine maps (scale and bias per K channel, per V row).
      const QuantizedTensor& k = block.k;
      AttentionTile tile{k.codes().data() + head * hd * k.row_bytes(), k.row_bytes(),
                         v.codes().data() + row * v.row_bytes(), v.row_bytes(), n,
                         options_.dtype == KvDtype::kInt4 ? TileElement::kU4 : TileElement::kU2};
      tile.k_scales = k_scratch;
      tile.k_biases = k_scratch + hd;
      tile.v_scales = v_scratch;
      tile.v_biases = v_scratch + n;
      tile.k_first = begin % b;
      tile.k_block = b;
      if (k_scratch == nullptr) {  // a tile to prefetch: the kernel fetches its codes, here its scales and zeros
        k.PrefetchRowScales(head * hd, hd);
        v.PrefetchRowScales(row, n);
        return tile;
      }
      LOWBIT_CHECK(b >= 2 && k.AffineRows(head * hd, hd, k_scratch, k_scratch + hd) &&
                   v.AffineRows(row, n, v_scratch, v_scratch + n));
      return tile;
    }
    default: {  // fp32: the rows themselves
      const Tile k = Read(true, layer, head, begin, end, reader, k_scratch);
      const Tile v = Read(false, layer, head, begin, end, reader, v_scratch);
      return {k.data, k.stride, v.data, v.stride, n};
    }
  }
}

KvCache::Tile KvCache::ReadK(size_t layer, size_t head, size_t begin, size_t end, size_t reader,
                             float* scratch) const {
  return Read(true, layer, head, begin, end, reader, scratch);
}

KvCache::Tile KvCache::ReadV(size_t layer, size_t head, size_t begin, size_t end, size_t reader,
                             float* scratch) const {
  return Read(false, layer, head, begin, end, reader, scratch);
}

size_t KvCache::bytes() const {
  size_t total = 0;
  for (const Block& block : blocks_) total += block.storage_bytes();
  for (const auto* recent : {&recent_k_, &recent_v_})
    for (const auto& rows : *recent) total += rows.size() * sizeof(uint16_t);
  return total;
}

double KvCache::BytesPerToken() const {
  const Block block = NewBlock(0, nullptr);
  return static_cast<double>(block.storage_bytes()) * config_.n_layers /
         static_cast<double>(options_.block_tokens);
}

}  // namespace lowbit
