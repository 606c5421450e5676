#include "io/gptq_awq.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "formats/codec.h"

namespace lowbit {
namespace {

// AWQ's interleave: output channel 8c + t sits in nibble slot kAwqSlot[t] of word c
// (AutoAWQ's AWQ_REVERSE_ORDER; the forward order is [0, 2, 4, 6, 1, 3, 5, 7]).
constexpr std::array<int, 8> kAwqSlot = {0, 4, 1, 5, 2, 6, 3, 7};


std::vector<std::byte> WordBytes(const std::vector<uint32_t>& words) {
  const auto bytes = std::as_bytes(std::span(words));
  return {bytes.begin(), bytes.end()};
}

// The [cells x N] transpose of a scale grid [N x cells] (2-byte or 4-byte scales), as these
// formats store scales output-minor.
std::vector<std::byte> TransposedScales(const QuantizedTensor& q) {
  const ScaleGrid g = q.grid();
  const size_t width = ScaleBits(q.scheme().scale_type) / 8;
  std::vector<std::byte> out(g.cells() * width);
  const auto src = std::as_bytes(q.scale_bytes());
  for (uint64_t n = 0; n < g.grid_rows; ++n)
    for (uint64_t c = 0; c < g.grid_cols; ++c)
      std::memcpy(&out[(c * g.grid_rows + n) * width], &src[(n * g.grid_cols + c) * width], width);
  return out;
}

// The integer zero point of cell (n, c): 2^(b-1) for symmetric tensors (offset-binary codes).
uint32_t IntZero(const QuantizedTensor& q, uint64_t n, uint64_t c) {
  const QuantScheme& s = q.scheme();
  if (!s.asymmetric()) return SymmetricZero(*s.element);
  return static_cast<uint32_t>(q.Zero(n * q.grid().grid_cols + c));
}

// Common checks of GptqParamsOf / AwqParamsOf.
QweightParams IntParamsOf(const QuantScheme& s, const std::string& where, std::string_view format) {
  const std::string scheme = s.ToString();
  if (s.element->kind != ElementKind::kInt)
    Fail("{}: scheme '{}': element format {} has no {} form ({} stores integer codes; compressed-tensors holds "
         "float formats)", where, scheme, s.element->name, format, format);
  if (s.tensor_scale) Fail("{}: scheme '{}': {} has no second-level tensor scale", where, scheme, format);
  QweightParams p;
  p.bits = s.element->bits;
  p.sym = !s.asymmetric();
  switch (s.granularity.kind) {
    case GranularityKind::kGroup: p.group_size = s.granularity.group; break;
    case GranularityKind::kChannel: p.group_size = -1; break;
    default: Fail("{}: scheme '{}': granularity: {} has per-group or per-channel scales only", where, scheme, format);
  }
  switch (s.scale_type) {
    case ScaleType::kF16: p.scale_dtype = DType::kF16; break;
    case ScaleType::kBF16: p.scale_dtype = DType::kBF16; break;
    default:
      Fail("{}: scheme '{}': scale type {}: {} stores fp16 (or bf16) scales; quantize with scale=f16", where, scheme,
           ScaleTypeName(s.scale_type), format);
  }
  if (s.asymmetric() && s.zero_type != ZeroType::kInt)
    Fail("{}: scheme '{}': {} zero points are integers, not {}", where, scheme, format,
         ZeroTypeName(s.zero_type));
  return p;
}

// The scale dtype of `name` (fp16 or bf16, as these formats store scales).
DType ScaleDTypeIn(const SafetensorsModel& st, const std::string& name) {
  const TensorView* t = st.Find(name);
  if (!t) Fail("{}: tensor '{}' is missing", st.path().string(), name);
  if (t->dtype != DType::kF16 && t->dtype != DType::kBF16)
    Fail("{}: tensor '{}' is {}, expected F16 or BF16 scales", st.path().string(), name, DTypeName(t->dtype));
  return t->dtype;
}

// A QuantizedTensor for integer zero points `zeros` ([N x cells], true values) and the scales of
// `scales` ([cells x N] bytes of `scale_dtype`), with codes still empty. Symmetric when every zero is
// 2^(b-1); fp32 zero points when one is 2^b (not storable in b bits).
QuantizedTensor MakeTensor(int bits, int64_t group, uint64_t rows, uint64_t cols, const std::vector<uint32_t>& zeros,
                           std::span<const std::byte> scales, DType scale_dtype) {
  const uint32_t mid = 1u << (bits - 1), max = (1u << bits) - 1;
  bool sym = true, wide = false;
  for (uint32_t z : zeros) {
    sym = sym && z == mid;
    wide = wide || z > max;
  }
  std::string text = fmt::format("int{}:{}", bits, group < 0 ? std::string("channel") : fmt::format("g{}", group));
  if (!sym) text += ":asym";
  text += scale_dtype == DType::kBF16 ? ":scale=bf16" : ":scale=f16";
  if (wide) text += ":zero=f32";
  QuantizedTensor q(ParseScheme(text), rows, cols);
  const ScaleGrid g = q.grid();
  LOWBIT_CHECK(g.grid_rows == rows && g.cells() * 2 == scales.size() && zeros.size() == g.cells());
  auto dst = std::as_writable_bytes(q.scale_bytes());
  for (uint64_t n = 0; n < rows; ++n)
    for (uint64_t c = 0; c < g.grid_cols; ++c) std::memcpy(&dst[(n * g.grid_cols + c) * 2], &scales[(c * rows + n) * 2], 2);
  if (!sym)
    for (uint64_t cell = 0; cell < zeros.size(); ++cell) q.SetZero(cell, static_cast<float>(zeros[cell]));
  return q;
}

}  // namespace

QweightParams GptqParamsOf(const QuantScheme& s, const std::string& where) {
  QweightParams p = IntParamsOf(s, where, "GPTQ");
  if (p.bits != 2 && p.bits != 3 && p.bits != 4 && p.bits != 8)
    Fail("{}: scheme '{}': bits: GPTQ defines 2, 3, 4 and 8-bit codes, not {}", where, s.ToString(), p.bits);
  return p;
}

QweightParams AwqParamsOf(const QuantScheme& s, const std::string& where) {
  QweightParams p = IntParamsOf(s, where, "AWQ");
  if (p.bits != 4) Fail("{}: scheme '{}': bits: AWQ GEMM stores 4-bit codes only, not {}", where, s.ToString(), p.bits);
  if (p.group_size < 0) Fail("{}: scheme '{}': granularity: AWQ GEMM needs a group size, not per-channel scales", where, s.ToString());
  if (p.scale_dtype != DType::kF16) Fail("{}: scheme '{}': scale type: AWQ GEMM stores fp16 scales", where, s.ToString());
  p.sym = false;  // AWQ GEMM always stores zero points (a symmetric tensor's are all 8)
  return p;
}

void AddGptqLinear(TensorList& out, const std::string& prefix, const QuantizedTensor& q,
                   std::span<const uint32_t> order, bool v2) {
  const QweightParams p = GptqParamsOf(q.scheme(), prefix);
  const uint64_t n_out = q.rows(), k_in = q.cols(), cells = q.grid().grid_cols;
  const int b = p.bits;
  if (k_in * b % 32 != 0)
    Fail("{}: in_features {} times {} bits is not a multiple of 32: GPTQ's qweight packs whole int32 words along "
         "the input dimension", prefix, k_in, b);
  if (n_out * b % 32 != 0)
    Fail("{}: out_features {} times {} bits is not a multiple of 32: GPTQ's qzeros packs whole int32 words along "
         "the output dimension", prefix, n_out, b);
  const uint64_t words = k_in * b / 32;
  std::vector<uint32_t> qweight(words * n_out, 0);
  if (order.empty()) {
    // Column n of qweight is lowbit's row n as it is (one LSB-first stream along the input, whole words):
    // a transpose of [n_out x words] words, in tiles that keep both sides in cache.
    constexpr uint64_t kTile = 32;
    for (uint64_t n0 = 0; n0 < n_out; n0 += kTile)
      for (uint64_t w0 = 0; w0 < words; w0 += kTile)
        for (uint64_t n = n0; n < std::min(n0 + kTile, n_out); ++n) {
          const uint8_t* row = q.codes().data() + n * q.row_bytes();
          for (uint64_t w = w0; w < std::min(w0 + kTile, words); ++w) std::memcpy(&qweight[w * n_out + n], row + 4 * w, 4);
        }
  } else {
    for (uint64_t n = 0; n < n_out; ++n) {
      const uint8_t* row = q.codes().data() + n * q.row_bytes();
      for (uint64_t j = 0; j < k_in; ++j) OrWordCode(qweight.data() + n, n_out, order[j], b, ReadCode(row, j, b));
    }
  }
  const uint32_t mask = (1u << b) - 1;
  const uint64_t zero_words = n_out * b / 32;
  std::vector<uint32_t> qzeros(cells * zero_words, 0);
  for (uint64_t c = 0; c < cells; ++c)
    for (uint64_t n = 0; n < n_out; ++n) {
      const uint32_t z = IntZero(q, n, c);
      if (!v2 && z == 0)
        Fail("{}: row {}, group {} has zero point 0, which GPTQ v1 cannot store (it stores zero - 1 and readers add 1 "
             "after masking to {} bits); export with --format gptq_v2", prefix, n, c, b);
      OrWordCode(qzeros.data() + c * zero_words, 1, n, b, v2 ? z : (z - 1) & mask);
    }
  const uint64_t group = p.group_size < 0 ? k_in : static_cast<uint64_t>(p.group_size);
  const std::vector<int32_t> g_idx = GroupIndexOf(order, k_in, group);
  out.AddOwnedBytes(prefix + ".qweight", DType::kI32, {k_in * b / 32, n_out}, WordBytes(qweight));
  out.AddOwnedBytes(prefix + ".qzeros", DType::kI32, {cells, zero_words}, WordBytes(qzeros));
  out.AddOwnedBytes(prefix + ".scales", p.scale_dtype, {cells, n_out}, TransposedScales(q));
  out.AddOwned(prefix + ".g_idx", DType::kI32, {k_in}, g_idx);
}

void AddAwqLinear(TensorList& out, const std::string& prefix, const QuantizedTensor& q) {
  const QweightParams p = AwqParamsOf(q.scheme(), prefix);
  const uint64_t n_out = q.rows(), k_in = q.cols(), cells = q.grid().grid_cols;
  if (n_out % 8 != 0)
    Fail("{}: out_features {} is not a multiple of 8: AWQ packs 8 output channels per int32 word", prefix, n_out);
  if (k_in % static_cast<uint64_t>(p.group_size) != 0)
    Fail("{}: in_features {} is not a multiple of the group size {}: AWQ GEMM has no ragged last group", prefix, k_in,
         p.group_size);
  const uint64_t words = n_out / 8;
  std::vector<uint32_t> qweight(k_in * words, 0), qzeros(cells * words, 0);
  // Tiles of 128 rows x 256 inputs: the 16 words each input's row of qweight gets from them stay in cache.
  constexpr uint64_t kRowTile = 128, kInputTile = 256;
  for (uint64_t n0 = 0; n0 < n_out; n0 += kRowTile)
    for (uint64_t i0 = 0; i0 < k_in; i0 += kInputTile)
      for (uint64_t n = n0; n < std::min(n0 + kRowTile, n_out); ++n) {
        const uint8_t* row = q.codes().data() + n * q.row_bytes();
        const int shift = 4 * kAwqSlot[n % 8];
        for (uint64_t i = i0; i < std::min(i0 + kInputTile, k_in); ++i)  // code i: nibble i % 2 of byte i / 2
          qweight[i * words + n / 8] |= static_cast<uint32_t>((row[i / 2] >> (4 * (i % 2))) & 15) << shift;
      }
  for (uint64_t n = 0; n < n_out; ++n)
    for (uint64_t c = 0; c < cells; ++c) qzeros[c * words + n / 8] |= IntZero(q, n, c) << (4 * kAwqSlot[n % 8]);
  out.AddOwnedBytes(prefix + ".qweight", DType::kI32, {k_in, words}, WordBytes(qweight));
  out.AddOwnedBytes(prefix + ".qzeros", DType::kI32, {cells, words}, WordBytes(qzeros));
  out.AddOwnedBytes(prefix + ".scales", DType::kF16, {cells, n_out}, TransposedScales(q));
}

OrderedTensor ReadGptqLinear(const SafetensorsModel& st, const std::string& prefix, uint64_t rows, uint64_t cols,
                             const QweightParams& p) {
  const int b = p.bits;
  const std::string what = fmt::format("GPTQ {}-bit, group_size {}, for a [{} x {}] linear", b, p.group_size, rows, cols);
  if (cols * b % 32 != 0 || rows * b % 32 != 0)
    Fail("{}: linear '{}' is [{} x {}], which {}-bit GPTQ cannot pack into int32 words", st.path().string(), prefix,
         rows, cols, b);
  const uint64_t group = p.group_size < 0 ? cols : static_cast<uint64_t>(p.group_size);
  const uint64_t cells = (cols + group - 1) / group, zero_words = rows * b / 32;
  const DType scale_dtype = ScaleDTypeIn(st, prefix + ".scales");
  const std::vector<uint32_t> qweight = CopyWords(ExpectTensor(st, prefix + ".qweight", DType::kI32, {cols * b / 32, rows}, what));
  const std::vector<uint32_t> qzeros = CopyWords(ExpectTensor(st, prefix + ".qzeros", DType::kI32, {cells, zero_words}, what));
  const std::span<const std::byte> scales = ExpectTensor(st, prefix + ".scales", scale_dtype, {cells, rows}, what);
  std::vector<uint32_t> order;  // act-order (desc_act): the groups' columns gathered
  if (st.Find(prefix + ".g_idx")) {
    const std::vector<uint32_t> g_idx = CopyWords(ExpectTensor(st, prefix + ".g_idx", DType::kI32, {cols}, what));
    order = OrderFromGroupIndex(g_idx, group, fmt::format("{}: tensor '{}.g_idx'", st.path().string(), prefix));
  }
  const uint32_t mask = (1u << b) - 1;
  std::vector<uint32_t> zeros(rows * cells);
  for (uint64_t c = 0; c < cells; ++c)
    for (uint64_t n = 0; n < rows; ++n) {
      const uint32_t field = ReadWordCode(qzeros.data() + c * zero_words, 1, n, b);
      zeros[n * cells + c] = p.gptq_v2 ? field : (field & mask) + 1;
    }
  QuantizedTensor q = MakeTensor(b, p.group_size, rows, cols, zeros, scales, scale_dtype);
  for (uint64_t n = 0; n < rows; ++n) {
    uint8_t* row = q.codes().data() + n * q.row_bytes();
    for (uint64_t j = 0; j < cols; ++j)
      WriteCode(row, j, b, ReadWordCode(qweight.data() + n, rows, order.empty() ? j : order[j], b));
  }
  return {std::move(q), std::move(order)};
}

QuantizedTensor ReadAwqLinear(const SafetensorsModel& st, const std::string& prefix, uint64_t rows, uint64_t cols,
                              const QweightParams& p) {
  const std::string what = fmt::format("AWQ 4-bit, group_size {}, for a [{} x {}] linear", p.group_size, rows, cols);
  if (p.bits != 4) Fail("{}: AWQ GEMM checkpoints are 4-bit; bits is {}", st.path().string(), p.bits);
  if (p.group_size <= 0 || rows % 8 != 0 || cols % static_cast<uint64_t>(p.group_size) != 0)
    Fail("{}: linear '{}' is [{} x {}], which AWQ GEMM with group_size {} cannot hold", st.path().string(), prefix, rows,
         cols, p.group_size);
  const uint64_t cells = cols / p.group_size, words = rows / 8;
  const std::vector<uint32_t> qweight = CopyWords(ExpectTensor(st, prefix + ".qweight", DType::kI32, {cols, words}, what));
  const std::vector<uint32_t> qzeros = CopyWords(ExpectTensor(st, prefix + ".qzeros", DType::kI32, {cells, words}, what));
  const std::span<const std::byte> scales = ExpectTensor(st, prefix + ".scales", DType::kF16, {cells, rows}, what);
  std::vector<uint32_t> zeros(rows * cells);
  for (uint64_t n = 0; n < rows; ++n)
    for (uint64_t c = 0; c < cells; ++c) zeros[n * cells + c] = (qzeros[c * words + n / 8] >> (4 * kAwqSlot[n % 8])) & 15;
  QuantizedTensor q = MakeTensor(4, p.group_size, rows, cols, zeros, scales, DType::kF16);
  for (uint64_t n = 0; n < rows; ++n) {
    uint8_t* row = q.codes().data() + n * q.row_bytes();
    const int shift = 4 * kAwqSlot[n % 8];
    for (uint64_t i = 0; i < cols; ++i) WriteCode(row, i, 4, (qweight[i * words + n / 8] >> shift) & 15);
  }
  return q;
}

}  // namespace lowbit
