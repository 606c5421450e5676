#include "quant/quantized_tensor.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "core/checked_math.h"
#include "core/error.h"
#include "formats/codec.h"

namespace lowbit {

QuantizedTensor::QuantizedTensor(QuantScheme scheme, uint64_t rows, uint64_t cols, HugePageArena* arena)
    : scheme_(std::move(scheme)), rows_(rows), cols_(cols), grid_(scheme_.Grid(rows, cols)),
      row_bytes_(PackedBytes(cols, scheme_.element->bits)), codes_(HugePageAllocator<uint8_t>(arena)),
      scales_(HugePageAllocator<uint8_t>(arena)), zeros_(HugePageAllocator<uint8_t>(arena)),
      super_(HugePageAllocator<uint8_t>(arena)) {
  scheme_.ValidateShape(rows, cols, "tensor");
  codes_.resize(CheckedMul(rows, row_bytes_, "codes"));
  scales_.resize(grid_.cells() * ScaleBits(scheme_.scale_type) / 8);
  if (scheme_.zero_type == ZeroType::kInt) {
    zeros_.resize(grid_.grid_rows * PackedBytes(grid_.grid_cols, scheme_.element->bits));
  } else {
    zeros_.resize(grid_.cells() * scheme_.zero_bits() / 8);
  }
  if (scheme_.super_block) {
    supers_per_row_ = CeilDiv(grid_.grid_cols, scheme_.super_groups());
    super_.resize(scheme_.SuperBytes(grid_));
  }
  if (scheme_.element->bits <= 8) {
    decode_table_.resize(256);
    BuildDecodeTable(*scheme_.element, !scheme_.asymmetric(), std::span<float, 256>(decode_table_.data(), 256));
    decode_affine_ = IsAffineTable(decode_table_, scheme_.element->bits);
  }
}

namespace {
// Byte offset of super-block `index` of grid row `grid_row` (mins follow all the scales).
uint64_t SuperAt(uint64_t grid_row, uint64_t index, bool min, uint64_t grid_rows, uint64_t per_row) {
  return 2 * ((min ? grid_rows * per_row : 0) + grid_row * per_row + index);
}
}  // namespace

float QuantizedTensor::SuperValue(uint64_t grid_row, uint64_t index, bool min) const {
  return DecodeScale(ScaleType::kF16, &super_[SuperAt(grid_row, index, min, grid_.grid_rows, supers_per_row_)]);
}

void QuantizedTensor::SetSuper(uint64_t grid_row, uint64_t index, float scale, float min) {
  LOWBIT_CHECK(scheme_.super_block && grid_row < grid_.grid_rows && index < supers_per_row_);
  EncodeScale(ScaleType::kF16, scale, &super_[SuperAt(grid_row, index, false, grid_.grid_rows, supers_per_row_)]);
  if (scheme_.zero_type == ZeroType::kMin8)
    EncodeScale(ScaleType::kF16, min, &super_[SuperAt(grid_row, index, true, grid_.grid_rows, supers_per_row_)]);
}

float QuantizedTensor::Scale(uint64_t cell) const {
  const float stored = DecodeScale(scheme_.scale_type, &scales_[cell * ScaleBits(scheme_.scale_type) / 8]);
  if (!scheme_.super_block) return stored;
  return SuperValue(cell / grid_.grid_cols, cell % grid_.grid_cols / scheme_.super_groups(), false) * stored;
}

void QuantizedTensor::SetScale(uint64_t cell, float value) {
  EncodeScale(scheme_.scale_type, value, &scales_[cell * ScaleBits(scheme_.scale_type) / 8]);
}

namespace {
ScaleType ZeroStorage(ZeroType z) {
  return z == ZeroType::kF32 ? ScaleType::kF32 : z == ZeroType::kBF16 ? ScaleType::kBF16 : ScaleType::kF16;
}
}  // namespace

float QuantizedTensor::Zero(uint64_t cell) const {
  LOWBIT_CHECK(!scheme_.stored_bias());  // no exact zero-point: callers take Bias
  switch (scheme_.zero_type) {
    case ZeroType::kNone:
      return 0.0f;
    case ZeroType::kInt: {
      const int bits = scheme_.element->bits;
      const uint64_t gr = cell / grid_.grid_cols, gc = cell % grid_.grid_cols;
      return static_cast<float>(ReadCode(&zeros_[gr * PackedBytes(grid_.grid_cols, bits)], gc, bits));
    }
    default:
      return DecodeScale(ZeroStorage(scheme_.zero_type), &zeros_[cell * scheme_.zero_bits() / 8]);
  }
}

float QuantizedTensor::Bias(uint64_t cell) const {
  switch (scheme_.zero_type) {
    case ZeroType::kNone: return 0.0f;
    case ZeroType::kBiasF16: return DecodeScale(ScaleType::kF16, &zeros_[cell * 2]);
    case ZeroType::kMin8:
      return -(SuperValue(cell / grid_.grid_cols, cell % grid_.grid_cols / scheme_.super_groups(), true) *
               static_cast<float>(zeros_[cell]));
    default: return -Zero(cell) * Scale(cell) * tensor_scale_;
  }
}

void QuantizedTensor::SetZero(uint64_t cell, float value) {
  switch (scheme_.zero_type) {
    case ZeroType::kNone:
      return;
    case ZeroType::kMin8:
      zeros_[cell] = static_cast<uint8_t>(std::clamp(std::nearbyint(value), 0.0f, 255.0f));
      return;
    case ZeroType::kInt: {
      const int bits = scheme_.element->bits;
      const uint64_t gr = cell / grid_.grid_cols, gc = cell % grid_.grid_cols;
      WriteCode(&zeros_[gr * PackedBytes(grid_.grid_cols, bits)], gc, bits, static_cast<uint32_t>(value));
      return;
    }
    default:
      EncodeScale(ZeroStorage(scheme_.zero_type), value, &zeros_[cell * scheme_.zero_bits() / 8]);
  }
}

double QuantizedTensor::bits_per_weight() const {
  return 8.0 * static_cast<double>(storage_bytes() - codes_.size()) / static_cast<double>(numel()) +
         scheme_.element->bits;
}

const std::array<float, 256>& ScaleTable(ScaleType t) {
  static const auto build = [](ScaleType type) {
    std::array<float, 256> table{};
    for (int c = 0; c < 256; ++c) {
      const uint8_t code = static_cast<uint8_t>(c);
      table[c] = DecodeScale(type, &code);
    }
    return table;
  };
  static const std::array<float, 256> e8m0 = build(ScaleType::kE8M0), ue4m3 = build(ScaleType::kUE4M3),
                                      i8 = build(ScaleType::kI8);
  return t == ScaleType::kE8M0 ? e8m0 : t == ScaleType::kUE4M3 ? ue4m3 : i8;
}

namespace {

// n consecutive stored values of type t, decoded in bulk: this runs once per row in every kernel,
// for the scales and for float zero-points (a call per value cost more than the row's dot at g32).
void DecodeStoredRow(ScaleType t, const uint8_t* stored, uint64_t n, float* out) {
  switch (t) {
    case ScaleType::kF32: std::memcpy(out, stored, n * 4); return;
    case ScaleType::kF16: return Fp16ToFp32Row(reinterpret_cast<const uint16_t*>(stored), n, out);
    case ScaleType::kBF16: return Bf16ToFp32Row(reinterpret_cast<const uint16_t*>(stored), n, out);
    default: {  // 8-bit codes through their table: the SIMD decoder's gather, times one scale of 1
      const float one = 1.0f;
      DecodeRow(stored, 8, ScaleTable(t).data(), false, GroupedRow{n, n, &one, nullptr}, out);
    }
  }
}
}  // namespace

void QuantizedTensor::RowScales(uint64_t r, float* scales, float* biases) const {
  const uint64_t n = grid_.grid_cols, grid_row = r / grid_.cell_rows, first = grid_row * n;
  DecodeStoredRow(scheme_.scale_type, &scales_[first * ScaleBits(scheme_.scale_type) / 8], n, scales);
  const uint64_t per_super = scheme_.super_groups();
  // Super-block s covers groups [s * per_super, (s + 1) * per_super): each group's value is its own
  // times the super-block's, in fp32 as ggml computes d * sc (exact: 11 x 8 significant bits).
  auto for_supers = [&](bool min, auto&& apply) {
    for (uint64_t s = 0; s < supers_per_row_; ++s) {
      const float v = SuperValue(grid_row, s, min);
      for (uint64_t g = s * per_super; g < std::min(n, (s + 1) * per_super); ++g) apply(g, v);
    }
  };
  if (per_super) for_supers(false, [&](uint64_t g, float d) { scales[g] = d * scales[g]; });
  if (tensor_scale_ != 1.0f)
    for (uint64_t g = 0; g < n; ++g) scales[g] *= tensor_scale_;
  if (!biases || !scheme_.asymmetric()) return;
  switch (scheme_.zero_type) {
    case ZeroType::kInt: {
      const int bits = scheme_.element->bits;
      const uint8_t* packed = &zeros_[grid_row * PackedBytes(n, bits)];
      uint8_t zeros[256];  // on the stack, 256 at a time (a byte boundary): no allocation per row
      for (uint64_t g0 = 0; g0 < n; g0 += 256) {
        const uint64_t m = std::min<uint64_t>(256, n - g0);
        UnpackCodes(packed + g0 * bits / 8, m, bits, zeros);
        for (uint64_t k = 0; k < m; ++k) biases[g0 + k] = -static_cast<float>(zeros[k]) * scales[g0 + k];
      }
      return;
    }
    case ZeroType::kMin8:
      for_supers(true, [&](uint64_t g, float dmin) { biases[g] = -(dmin * static_cast<float>(zeros_[first + g])); });
      return;
    case ZeroType::kBiasF16:
      DecodeStoredRow(ScaleType::kF16, &zeros_[first * 2], n, biases);
      return;
    default:
      DecodeStoredRow(ZeroStorage(scheme_.zero_type), &zeros_[first * scheme_.zero_bits() / 8], n, biases);
      for (uint64_t g = 0; g < n; ++g) biases[g] = -biases[g] * scales[g];
  }
}

void QuantizedTensor::DequantizeRow(uint64_t r, float* out) const { DequantizeRange(r, 0, cols_, out); }

void QuantizedTensor::DequantizeRange(uint64_t r, uint64_t begin, uint64_t n, float* out) const {
  const ElementFormat& e = *scheme_.element;
  LOWBIT_CHECK(begin + n <= cols_ && begin * e.bits % 8 == 0);
  const uint8_t* codes = &codes_[r * row_bytes_ + begin * e.bits / 8];
  if (e.bits == 32) {
    std::memcpy(out, codes, n * 4);
    return;
  }
  if (e.bits == 16) {
    HalvesToFp32(codes, n, out);
    return;
  }
  const uint64_t first_group = grid_.grid_cols == 1 ? 0 : begin / grid_.cell_cols;
  LOWBIT_CHECK(grid_.grid_cols == 1 || begin % grid_.cell_cols == 0);
  // Per thread, not per call: KV cache tiles decode one short row at a time.
  thread_local std::vector<float> scales, biases;
  scales.resize(grid_.grid_cols);
  biases.resize(scheme_.asymmetric() ? grid_.grid_cols : 0);
  RowScales(r, scales.data(), biases.empty() ? nullptr : biases.data());
  const GroupedRow grouped{n, grid_.grid_cols == 1 ? cols_ : grid_.cell_cols, scales.data() + first_group,
                           biases.empty() ? nullptr : biases.data() + first_group};
  DecodeRow(codes, e.bits, decode_table_.data(), decode_affine_, grouped, out);
}

void QuantizedTensor::DequantizeRows(uint64_t r, uint64_t n, float* out) const {
  LOWBIT_CHECK(r + n <= rows_);
  const ElementFormat& e = *scheme_.element;
  if (e.bits == 16) {
    HalvesToFp32(&codes_[r * row_bytes_], n * cols_, out);
    return;
  }
  // One scale cell per row, rows packed back to back, plain scale and zero storage (KV cache blocks:
  // KIVI's 32-token channel rows): every row's scale and zero at once, then the rows as one long row
  // of n groups. Row by row, the per-row set-up cost more than the decode.
  if (!PlainRows()) {
    for (uint64_t i = 0; i < n; ++i) DequantizeRow(r + i, out + i * cols_);
    return;
  }
  thread_local std::vector<float> scales, biases;
  scales.resize(n);
  biases.resize(scheme_.asymmetric() ? n : 0);
  PlainRowScales(r, n, scales.data(), biases.empty() ? nullptr : biases.data());
  const GroupedRow grouped{n * cols_, cols_, scales.data(), biases.empty() ? nullptr : biases.data()};
  DecodeRow(&codes_[r * row_bytes_], e.bits, decode_table_.data(), decode_affine_, grouped, out);
}

bool QuantizedTensor::PlainRows() const {
  const ElementFormat& e = *scheme_.element;
  const ZeroType z = scheme_.asymmetric() ? scheme_.zero_type : ZeroType::kNone;
  const bool plain_zeros = z == ZeroType::kNone || z == ZeroType::kInt || z == ZeroType::kF32 ||
                           z == ZeroType::kF16 || z == ZeroType::kBF16;
  return e.bits <= 8 && grid_.grid_cols == 1 && grid_.cell_rows == 1 && scheme_.super_groups() == 0 && plain_zeros &&
         row_bytes_ * 8 == cols_ * static_cast<uint64_t>(e.bits);
}

void QuantizedTensor::PlainRowScales(uint64_t r, uint64_t n, float* scales, float* biases) const {
  const int bits = scheme_.element->bits;
  const ZeroType z = scheme_.asymmetric() ? scheme_.zero_type : ZeroType::kNone;
  DecodeStoredRow(scheme_.scale_type, &scales_[r * ScaleBits(scheme_.scale_type) / 8], n, scales);
  if (tensor_scale_ != 1.0f)
    for (uint64_t i = 0; i < n; ++i) scales[i] *= tensor_scale_;
  if (z == ZeroType::kInt) {  // a row's zero-point code alone in its byte (PackedBytes(1, bits) = 1)
    const uint8_t mask = static_cast<uint8_t>((1u << bits) - 1);
    for (uint64_t i = 0; i < n; ++i) biases[i] = -static_cast<float>(zeros_[r + i] & mask) * scales[i];
  } else if (z != ZeroType::kNone) {
    DecodeStoredRow(ZeroStorage(z), &zeros_[r * scheme_.zero_bits() / 8], n, biases);
    for (uint64_t i = 0; i < n; ++i) biases[i] = -biases[i] * scales[i];
  }
}

bool QuantizedTensor::AffineRows(uint64_t r, uint64_t n, float* scales, float* biases) const {
  LOWBIT_CHECK(r + n <= rows_);
  if (!PlainRows() || !decode_affine_) return false;
  const float offset = decode_table_[0];  // an affine table is code + offset
  if (scheme_.asymmetric() && scheme_.zero_type == ZeroType::kInt && scheme_.scale_type == ScaleType::kF16 &&
      tensor_scale_ == 1.0f) {  // KIVI's KV blocks, read at every decode step: one vector pass
    HalfScalesByteZeros(reinterpret_cast<const uint16_t*>(&scales_[r * 2]), &zeros_[r],
                        static_cast<uint8_t>((1u << scheme_.element->bits) - 1), offset, n, scales, biases);
    return true;
  }
  if (scheme_.asymmetric()) {
    PlainRowScales(r, n, scales, biases);
    for (uint64_t i = 0; i < n; ++i) biases[i] += offset * scales[i];
  } else {
    PlainRowScales(r, n, scales, nullptr);
    for (uint64_t i = 0; i < n; ++i) biases[i] = offset * scales[i];
  }
  return true;
}

void QuantizedTensor::PrefetchRowScales(uint64_t r, uint64_t n) const {
  const auto lines = [](const uint8_t* begin, const uint8_t* end) {
    for (const uint8_t* p = begin; p < end; p += 64) __builtin_prefetch(p);
    if (begin < end) __builtin_prefetch(end - 1);
  };
  __builtin_prefetch(decode_table_.data());  // its own allocation, per tensor: a KV block's missed on every tile
  const size_t scale_bits = ScaleBits(scheme_.scale_type);
  lines(&scales_[r * scale_bits / 8], &scales_[0] + (r + n) * scale_bits / 8);
  if (!PlainRows() || !scheme_.asymmetric()) return;
  const size_t zero_bits = scheme_.zero_type == ZeroType::kInt ? 8 : scheme_.zero_bits();
  lines(&zeros_[r * zero_bits / 8], &zeros_[0] + (r + n) * zero_bits / 8);
}

void QuantizedTensor::HalvesToFp32(const uint8_t* codes, uint64_t n, float* out) const {
  // Through a small buffer, not a cast: the codes are bytes (and this ran once per KV row, so a
  // heap copy of the row cost more than the conversion).
  constexpr uint64_t kChunk = 512;
  alignas(64) uint16_t halves[kChunk];
  const bool fp16 = scheme_.element->minifloat == &kFp16;
  for (uint64_t i = 0; i < n; i += kChunk) {
    const uint64_t m = std::min(kChunk, n - i);
    std::memcpy(halves, codes + 2 * i, m * 2);
    if (fp16) Fp16ToFp32Row(halves, m, out + i);
    else Bf16ToFp32Row(halves, m, out + i);
  }
}

std::vector<float> QuantizedTensor::Dequantize() const {
  std::vector<float> out(numel());
  for (uint64_t r = 0; r < rows_; ++r) DequantizeRow(r, &out[r * cols_]);
  return out;
}

QuantizedTensor GatherRows(const QuantizedTensor& q, std::span<const uint64_t> from) {
  const uint64_t grid_rows = q.grid().grid_rows;
  if (grid_rows != q.rows() && grid_rows != 1)
    Fail("{}: a scale cell spans several rows; its rows cannot be reordered exactly", q.scheme().ToString());
  QuantizedTensor out(q.scheme(), from.size(), q.cols());
  LOWBIT_CHECK(grid_rows == 1 || out.grid().grid_rows == from.size());
  out.set_tensor_scale(q.tensor_scale());
  // Each buffer is `sections` runs of one equal slice per (grid) row: K-quant super-block mins follow
  // all their scales.
  const auto gather = [&](std::span<const uint8_t> src, std::span<uint8_t> dst, uint64_t rows, uint64_t sections) {
    if (src.empty()) return;
    const uint64_t slice = src.size() / sections / rows;
    LOWBIT_CHECK(slice * rows * sections == src.size() && dst.size() == slice * from.size() * sections);
    for (uint64_t s = 0; s < sections; ++s)
      for (uint64_t r = 0; r < from.size(); ++r) {
        LOWBIT_CHECK(from[r] < rows);
        std::memcpy(&dst[(s * from.size() + r) * slice], &src[(s * rows + from[r]) * slice], slice);
      }
  };
  gather(q.codes(), out.codes(), q.rows(), 1);
  if (grid_rows == 1) {
    std::ranges::copy(q.scale_bytes(), out.scale_bytes().begin());
    std::ranges::copy(q.zero_bytes(), out.zero_bytes().begin());
    std::ranges::copy(q.super_bytes(), out.super_bytes().begin());
    return out;
  }
  gather(q.scale_bytes(), out.scale_bytes(), grid_rows, 1);
  gather(q.zero_bytes(), out.zero_bytes(), grid_rows, 1);
  gather(q.super_bytes(), out.super_bytes(), grid_rows, q.scheme().zero_type == ZeroType::kMin8 ? 2 : 1);
  return out;
}

QuantizedTensor WithFloatScales(const QuantizedTensor& q) {
  LOWBIT_CHECK(q.scheme().gguf_storage());
  QuantScheme scheme = q.scheme();
  scheme.super_block = 0;
  scheme.scale_type = ScaleType::kF32;
  if (scheme.asymmetric()) scheme.zero_type = ZeroType::kF32;
  QuantizedTensor out(scheme, q.rows(), q.cols());
  std::copy(q.codes().begin(), q.codes().end(), out.codes().begin());
  const ScaleGrid g = q.grid();  // groups: one grid row per row
  const int bits = scheme.element->bits;
  std::vector<float> scales(g.grid_cols), biases(g.grid_cols);
  std::vector<uint8_t> codes(q.cols());
  for (uint64_t r = 0; r < q.rows(); ++r) {
    q.RowScales(r, scales.data(), biases.data());
    bool recoded = false;
    for (uint64_t c = 0; c < g.grid_cols; ++c) {
      const uint64_t cell = r * g.grid_cols + c;
      float scale = scales[c];
      if (scheme.asymmetric()) {
        // scale * code + bias = (code - zero) * scale. A zero scale makes every value the bias,
        // which no zero-point can say, so such a group becomes codes 0, scale 1, zero -bias.
        if (scale == 0) {
          if (!recoded) UnpackCodes(q.codes().data() + r * q.row_bytes(), q.cols(), bits, codes.data());
          recoded = true;
          std::fill_n(codes.begin() + c * g.cell_cols, std::min(g.cell_cols, q.cols() - c * g.cell_cols), uint8_t{0});
          scale = 1;
        }
        out.SetZero(cell, -biases[c] / scale);
      }
      out.SetScale(cell, scale);
    }
    if (recoded) PackCodes(codes.data(), q.cols(), bits, out.codes().data() + r * out.row_bytes());
  }
  return out;
}

}  // namespace lowbit
