// QuantizedTensor: packed codes + scales + zero-points of one 2-D tensor [rows x cols] (rows =
// output features, cols = inputs; 1-D tensors are 1 x n), plus the scheme that says how to read
// them. This is what quantizers produce, kernels consume and exporters write.
//
// Layout:
//   codes   rows x PackedBytes(cols, bits): each row's codes bit-packed LSB-first (codec.h);
//           16/32-bit plain formats store little-endian values.
//   scales  grid_rows x grid_cols stored scales in scheme.scale_type (row-major).
//   zeros   integer zero-points bit-packed per grid row (element bits each), or float zeros in
//           the zero type; empty when symmetric.
//   tensor_scale  fp32 second-level scale (NVFP4), 1 otherwise.
//   super   GGUF K-quants (scheme.super_block): grid_rows x super-blocks fp16 scales, then as many
//           fp16 mins when the zeros are min8; the i8 scales (and u8 mins) are per group.
// Dequantized value: (table[code] - zero) * scale * tensor_scale, or with a stored bias (GGUF's
// bias_f16 and min8 zeros) table[code] * scale + bias.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "core/aligned.h"
#include "quant/scheme.h"

namespace lowbit {

// Value of every 8-bit scale code (E8M0, UE4M3, I8), decoded once: row scales are a table lookup.
const std::array<float, 256>& ScaleTable(ScaleType t);

class QuantizedTensor {
 public:
  // With an arena, the codes, scales, zeros and super-scales are carved from it (core/aligned.h): a KV cache's blocks.
  QuantizedTensor(QuantScheme scheme, uint64_t rows, uint64_t cols, HugePageArena* arena = nullptr);

  const QuantScheme& scheme() const { return scheme_; }
  uint64_t rows() const { return rows_; }
  uint64_t cols() const { return cols_; }
  uint64_t numel() const { return rows_ * cols_; }
  ScaleGrid grid() const { return grid_; }
  size_t row_bytes() const { return row_bytes_; }

  std::span<uint8_t> codes() { return codes_; }
  std::span<const uint8_t> codes() const { return codes_; }
  std::span<uint8_t> scale_bytes() { return scales_; }
  std::span<const uint8_t> scale_bytes() const { return scales_; }
  std::span<uint8_t> zero_bytes() { return zeros_; }
  std::span<const uint8_t> zero_bytes() const { return zeros_; }
  std::span<uint8_t> super_bytes() { return super_; }
  std::span<const uint8_t> super_bytes() const { return super_; }
  float tensor_scale() const { return tensor_scale_; }
  void set_tensor_scale(float s) { tensor_scale_ = s; }

  // Scale and zero-point of one grid cell, decoded to float (zero is 0 when symmetric). With
  // super-blocks Scale is the sub-scale times the super-block's; Zero is for zero-point types only.
  float Scale(uint64_t cell) const;
  float Zero(uint64_t cell) const;
  // What the cell adds to every value: -zero * scale, or the stored bias.
  float Bias(uint64_t cell) const;
  // Store one cell's scale / zero, rounded to their types: with super-blocks, the i8 sub-scale
  // and the u8 min; with bias_f16 zeros, the bias.
  void SetScale(uint64_t cell, float value);
  void SetZero(uint64_t cell, float value);
  // Super-block `index` of grid row `grid_row`: its fp16 scale, and its fp16 min (min8 zeros).
  void SetSuper(uint64_t grid_row, uint64_t index, float scale, float min);
  float SuperValue(uint64_t grid_row, uint64_t index, bool min) const;
  uint64_t supers_per_row() const { return supers_per_row_; }

  // Storage cost including all metadata, in bits per weight (exact, e.g. 4.15625 for
  // int4 g128 with an fp16 scale and a 4-bit zero).
  double bits_per_weight() const;
  uint64_t storage_bytes() const {
    return codes_.size() + scales_.size() + zeros_.size() + super_.size() + (scheme_.tensor_scale ? 4 : 0);
  }

  // Group scales of row r (times the tensor scale) and, when asymmetric, the biases (-zero * scale,
  // or the stored bias), for each of the grid_cols groups: what a kernel needs to decode the row. `biases` may be
  // nullptr for symmetric tensors.
  void RowScales(uint64_t r, float* scales, float* biases) const;
  // Dequantizes row r into out[0..cols) with the SIMD decoder.
  void DequantizeRow(uint64_t r, float* out) const;
  // Dequantizes elements [begin, begin + n) of row r; `begin` must start a scale group (or the
  // tensor has one group per row) and a whole byte of codes.
  void DequantizeRange(uint64_t r, uint64_t begin, uint64_t n, float* out) const;
  // Rows [r, r + n) into out[0..n * cols): 16-bit rows in one conversion (a KV cache tile).
  void DequantizeRows(uint64_t r, uint64_t n, float* out) const;
  // For rows [r, r + n) of a tensor with one scale cell per row, rows packed back to back and integer
  // codes (KV cache blocks): element i of row r + k is code_i * scales[k] + biases[k], the raw code
  // (the decode table's offset folded into the bias). False, writing nothing, for other tensors.
  bool AffineRows(uint64_t r, uint64_t n, float* scales, float* biases) const;
  // Starts fetching what AffineRows(r, n) reads (the scales, zeros and the decode table's offset): a
  // KV cache reader's next tile.
  void PrefetchRowScales(uint64_t r, uint64_t n) const;
  std::vector<float> Dequantize() const;
  // Value of each code (<= 8-bit elements): signed for symmetric integers, raw for asymmetric.
  std::span<const float> decode_table() const { return decode_table_; }
  // Whether the table is an integer range (IsAffineTable): codes then convert instead of lookups.
  bool decode_affine() const { return decode_affine_; }

 private:
  void HalvesToFp32(const uint8_t* codes, uint64_t n, float* out) const;  // 16-bit codes to fp32
  // Whether rows have one scale cell each, back to back, with plain scale and zero storage; then
  // PlainRowScales gives rows [r, r + n)'s scale and, asymmetric, bias in one pass.
  bool PlainRows() const;
  void PlainRowScales(uint64_t r, uint64_t n, float* scales, float* biases) const;

  QuantScheme scheme_;
  uint64_t rows_, cols_;
  ScaleGrid grid_;
  size_t row_bytes_;
  // Huge pages for large tensors (core/aligned.h); rows start on cache lines whenever row_bytes is a
  // multiple of 64.
  HugePageVector<uint8_t> codes_;
  HugePageVector<uint8_t> scales_;
  HugePageVector<uint8_t> zeros_;
  HugePageVector<uint8_t> super_;
  uint64_t supers_per_row_ = 0;
  float tensor_scale_ = 1.0f;
  std::vector<float> decode_table_;  // 256 entries for <= 8-bit codes
  bool decode_affine_ = false;
};

// The tensor whose row r is row from[r] of q (from.size() rows), codes, scales and zero-points moved as
// stored (exact): for grids with one cell row per tensor row, or one for the whole tensor. Error naming
// the scheme for grids whose cells span several rows.
QuantizedTensor GatherRows(const QuantizedTensor& q, std::span<const uint64_t> from);

// A tensor with GGUF storage (scheme().gguf_storage()) holding the same values with every group's
// scale and zero-point in fp32, for writers of plain scales (a lowbit folder). Exact for the scales;
// a zero-point -bias / scale may differ from the bias in the last bit.
QuantizedTensor WithFloatScales(const QuantizedTensor& q);

}  // namespace lowbit
