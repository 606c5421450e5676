// A quantization scheme: which element format the codes use, how scales are shared
// (granularity), and how scales and zero-points are stored. Everything lowbit quantizes --
// weights, activations, KV cache -- is described by one QuantScheme.
//
// Spelled as text: "<format>[:option...]", e.g. "int4:g128", "int4:g128:asym:zero=f16",
// "fp8_e4m3:channel", "fp8_e4m3:block128x128", "mxfp4", "nvfp4", "nf4:g64", "int8:token".
// Options: g<N> | g-1 | tensor | channel | token | block<R>x<C> | sym | asym |
//          scale=f32|f16|bf16|e8m0|ue4m3 | zero=int|f32|f16|bf16 | e8m0=floor|round.
// E8M0 (MX) scales follow the OCP rule (e8m0=floor) unless e8m0=round asks for the rule of
// compressed-tensors and vLLM's MX reference (scale_rules.h), which their dynamic MX activations use.
// GGUF files add storage no quantizer of ours writes, spelled by ToString and read only through
// ParseGgufStorageScheme: K-quant super-blocks ("int4:g32:asym:scale=i8:zero=min8:super256": i8
// sub-scales and u8 mins under an fp16 scale and min per 256 elements) and Q4_1's stored bias
// ("zero=bias_f16").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "formats/element.h"

namespace lowbit {

enum class GranularityKind : uint8_t {
  kNone,     // no scale at all: a plain cast (fp32 / fp16 / bf16 storage)
  kTensor,   // one scale for the whole tensor
  kChannel,  // one scale per output row (weights)
  kToken,    // one scale per row of an activation matrix (same layout as kChannel)
  kGroup,    // one scale per `group` consecutive inputs of a row; the last group may be ragged
  kBlock,    // one scale per block_rows x block_cols tile (2-D block, as FP8 block checkpoints)
};

struct Granularity {
  GranularityKind kind = GranularityKind::kNone;
  uint32_t group = 0;
  uint32_t block_rows = 0;
  uint32_t block_cols = 0;
};

// kI8: an integer sub-scale, times its super-block's fp16 scale (QuantScheme::super_block).
enum class ScaleType : uint8_t { kF32, kF16, kBF16, kE8M0, kUE4M3, kI8 };
// Zero-points: x = (table[code] - zero) * scale. Two GGUF storages hold the bias of
// x = table[code] * scale + bias instead: kBiasF16 stores it (Q4_1, Q5_1), kMin8 stores a u8 min m
// with bias = -dmin * m, dmin the super-block's fp16 min scale (Q2_K, Q4_K, Q5_K).
enum class ZeroType : uint8_t { kNone, kInt, kF32, kF16, kBF16, kBiasF16, kMin8 };

int ScaleBits(ScaleType t);
std::string_view ScaleTypeName(ScaleType t);
std::string_view ZeroTypeName(ZeroType t);
std::string_view GranularityKindName(GranularityKind k);
float DecodeScale(ScaleType t, const uint8_t* bytes);  // bytes of one stored scale
void EncodeScale(ScaleType t, float value, uint8_t* bytes);
float RoundScale(ScaleType t, float value);  // value after a store/load round trip

// Where the scales of a [rows x cols] tensor sit: a grid of grid_rows x grid_cols cells, each
// covering cell_rows x cell_cols elements (the last row/column of cells may be ragged).
struct ScaleGrid {
  uint64_t grid_rows = 1, grid_cols = 1;
  uint64_t cell_rows = 1, cell_cols = 1;
  uint64_t cells() const { return grid_rows * grid_cols; }
};

struct QuantScheme {
  std::string preset;  // the name it was parsed from ("mxfp4", "int4", ...)
  const ElementFormat* element = nullptr;
  Granularity granularity;
  ScaleType scale_type = ScaleType::kF16;
  ZeroType zero_type = ZeroType::kNone;
  bool tensor_scale = false;  // an fp32 second-level scale per tensor (NVFP4)
  bool e8m0_round = false;    // E8M0 scales from the amax rounded to the element's precision (e8m0=round)
  // GGUF K-quants: elements per super-block (256) whose groups' i8 scales (and u8 mins) share one
  // fp16 scale (and min): their memory is the file's bits per weight, not an fp32 per group.
  uint32_t super_block = 0;

  bool asymmetric() const { return zero_type != ZeroType::kNone; }
  // Zeros stored as biases (kBiasF16, kMin8) rather than zero-points.
  bool stored_bias() const { return zero_type == ZeroType::kBiasF16 || zero_type == ZeroType::kMin8; }
  // Storage only GGUF files hold: read and run, never written by a quantizer.
  bool gguf_storage() const { return super_block != 0 || stored_bias(); }
  uint64_t super_groups() const { return super_block ? super_block / granularity.group : 0; }
  bool mx_scales() const { return scale_type == ScaleType::kE8M0; }
  int zero_bits() const;
  ScaleGrid Grid(uint64_t rows, uint64_t cols) const;
  // Exact storage cost, metadata included, for a [rows x cols] tensor.
  double BitsPerWeight(uint64_t rows, uint64_t cols) const;
  uint64_t StorageBytes(uint64_t rows, uint64_t cols) const;
  uint64_t SuperBytes(const ScaleGrid& g) const;  // the super-blocks' fp16 scales (and mins)
  std::string ToString() const;  // canonical spelling, parseable by ParseScheme
  // Throws Error when the tensor shape does not fit the scheme.
  void ValidateShape(uint64_t rows, uint64_t cols, std::string_view tensor_name) const;
};

// Parses the text form above. Throws Error listing the known formats on an unknown name, and
// refuses GGUF-only storage (gguf_storage) naming the option.
QuantScheme ParseScheme(std::string_view text);
// ParseScheme that also takes GGUF-only storage: for the GGUF block table.
QuantScheme ParseGgufStorageScheme(std::string_view text);

// The scheme text of the command-line flags (and the Python keywords) format, group (0 = the
// format's own granularity, -1 = per channel, N = groups of N) and asym: ("int4", 128, true) ->
// "int4:g128:asym".
std::string SchemeTextFromFlags(std::string format, int group, bool asym);

// Named presets with their typical granularity, in display order.
struct SchemePreset {
  std::string_view name;
  std::string_view spec;         // what ParseScheme(name) expands to
  std::string_view description;
};
const std::vector<SchemePreset>& SchemePresets();

}  // namespace lowbit
