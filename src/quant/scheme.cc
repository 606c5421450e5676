#include "quant/scheme.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include "core/checked_math.h"
#include "core/error.h"
#include "formats/codec.h"

namespace lowbit {

int ScaleBits(ScaleType t) {
  switch (t) {
    case ScaleType::kF32: return 32;
    case ScaleType::kF16:
    case ScaleType::kBF16: return 16;
    case ScaleType::kE8M0:
    case ScaleType::kUE4M3:
    case ScaleType::kI8: return 8;
  }
  return 32;
}

std::string_view ScaleTypeName(ScaleType t) {
  switch (t) {
    case ScaleType::kF32: return "f32";
    case ScaleType::kF16: return "f16";
    case ScaleType::kBF16: return "bf16";
    case ScaleType::kE8M0: return "e8m0";
    case ScaleType::kUE4M3: return "ue4m3";
    case ScaleType::kI8: return "i8";
  }
  return "?";
}

float DecodeScale(ScaleType t, const uint8_t* bytes) {
  switch (t) {
    case ScaleType::kF32: {
      float v;
      std::memcpy(&v, bytes, 4);
      return v;
    }
    case ScaleType::kF16: return Fp16ToFp32(static_cast<uint16_t>(bytes[0] | bytes[1] << 8));
    case ScaleType::kBF16: return Bf16ToFp32(static_cast<uint16_t>(bytes[0] | bytes[1] << 8));
    case ScaleType::kE8M0: return DecodeMiniFloat(kE8M0, bytes[0]);
    case ScaleType::kUE4M3: return DecodeMiniFloat(kUE4M3, bytes[0]);
    case ScaleType::kI8: return static_cast<float>(static_cast<int8_t>(bytes[0]));
  }
  return 0;
}

void EncodeScale(ScaleType t, float value, uint8_t* bytes) {
  switch (t) {
    case ScaleType::kF32:
      std::memcpy(bytes, &value, 4);
      return;
    case ScaleType::kF16:
    case ScaleType::kBF16: {
      const uint16_t h = t == ScaleType::kF16 ? Fp32ToFp16(value) : Fp32ToBf16(value);
      bytes[0] = static_cast<uint8_t>(h);
      bytes[1] = static_cast<uint8_t>(h >> 8);
      return;
    }
    case ScaleType::kE8M0:
      bytes[0] = static_cast<uint8_t>(EncodeMiniFloat(kE8M0, value));
      return;
    case ScaleType::kUE4M3:
      bytes[0] = static_cast<uint8_t>(EncodeMiniFloat(kUE4M3, value, Overflow::kSaturate));
      return;
    case ScaleType::kI8:
      bytes[0] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(std::nearbyint(value), -128.0f, 127.0f)));
      return;
  }
}

float RoundScale(ScaleType t, float value) {
  uint8_t bytes[4];
  EncodeScale(t, value, bytes);
  return DecodeScale(t, bytes);
}

int QuantScheme::zero_bits() const {
  switch (zero_type) {
    case ZeroType::kNone: return 0;
    case ZeroType::kInt: return element->bits;
    case ZeroType::kF32: return 32;
    case ZeroType::kF16:
    case ZeroType::kBF16:
    case ZeroType::kBiasF16: return 16;
    case ZeroType::kMin8: return 8;
  }
  return 0;
}

ScaleGrid QuantScheme::Grid(uint64_t rows, uint64_t cols) const {
  ScaleGrid g;
  switch (granularity.kind) {
    case GranularityKind::kNone:
      g = {0, 0, rows, cols};
      break;
    case GranularityKind::kTensor:
      g = {1, 1, rows, cols};
      break;
    case GranularityKind::kChannel:
    case GranularityKind::kToken:
      g = {rows, 1, 1, cols};
      break;
    case GranularityKind::kGroup:
      g = {rows, CeilDiv(cols, granularity.group), 1, granularity.group};
      break;
    case GranularityKind::kBlock:
      g = {CeilDiv(rows, granularity.block_rows), CeilDiv(cols, granularity.block_cols),
           granularity.block_rows, granularity.block_cols};
      break;
  }
  return g;
}

double QuantScheme::BitsPerWeight(uint64_t rows, uint64_t cols) const {
  const ScaleGrid g = Grid(rows, cols);
  const double numel = static_cast<double>(rows) * static_cast<double>(cols);
  double bits = numel * element->bits;
  bits += static_cast<double>(g.cells()) * (ScaleBits(scale_type) + zero_bits());  // no cells: plain
  if (tensor_scale) bits += 32;
  bits += 8.0 * static_cast<double>(SuperBytes(g));
  return bits / numel;
}

uint64_t QuantScheme::StorageBytes(uint64_t rows, uint64_t cols) const {
  const ScaleGrid g = Grid(rows, cols);
  uint64_t bytes = CheckedMul(rows, PackedBytes(cols, element->bits), "codes");
  if (granularity.kind == GranularityKind::kNone) return bytes;
  bytes += g.cells() * ScaleBits(scale_type) / 8;
  if (zero_type == ZeroType::kInt) {
    bytes += g.grid_rows * PackedBytes(g.grid_cols, element->bits);
  } else {
    bytes += g.cells() * zero_bits() / 8;
  }
  if (tensor_scale) bytes += 4;
  return bytes + SuperBytes(g);
}

uint64_t QuantScheme::SuperBytes(const ScaleGrid& g) const {
  if (!super_block) return 0;
  return g.grid_rows * CeilDiv(g.grid_cols, super_groups()) * 2 * (zero_type == ZeroType::kMin8 ? 2 : 1);
}

namespace {

std::string_view GranularityText(const Granularity& g, std::string& buffer) {
  switch (g.kind) {
    case GranularityKind::kNone: return "";
    case GranularityKind::kTensor: return "tensor";
    case GranularityKind::kChannel: return "channel";
    case GranularityKind::kToken: return "token";
    case GranularityKind::kGroup:
      buffer = "g" + std::to_string(g.group);
      return buffer;
    case GranularityKind::kBlock:
      buffer = "block" + std::to_string(g.block_rows) + "x" + std::to_string(g.block_cols);
      return buffer;
  }
  return "";
}

}  // namespace

std::string_view ZeroTypeName(ZeroType z) {
  switch (z) {
    case ZeroType::kNone: return "none";
    case ZeroType::kInt: return "int";
    case ZeroType::kF32: return "f32";
    case ZeroType::kF16: return "f16";
    case ZeroType::kBF16: return "bf16";
    case ZeroType::kBiasF16: return "bias_f16";
    case ZeroType::kMin8: return "min8";
  }
  return "?";
}

std::string_view GranularityKindName(GranularityKind k) {
  switch (k) {
    case GranularityKind::kNone: return "none";
    case GranularityKind::kTensor: return "tensor";
    case GranularityKind::kChannel: return "channel";
    case GranularityKind::kToken: return "token";
    case GranularityKind::kGroup: return "group";
    case GranularityKind::kBlock: return "block";
  }
  return "?";
}

std::string QuantScheme::ToString() const {
  std::string out(element->name);
  std::string buffer;
  const std::string_view gran = GranularityText(granularity, buffer);
  if (!gran.empty()) out += ":" + std::string(gran);
  if (asymmetric()) out += ":asym";
  if (granularity.kind != GranularityKind::kNone) out += ":scale=" + std::string(ScaleTypeName(scale_type));
  if (asymmetric() && zero_type != ZeroType::kInt) out += ":zero=" + std::string(ZeroTypeName(zero_type));
  if (tensor_scale) out += ":tscale";
  if (e8m0_round) out += ":e8m0=round";
  if (super_block) out += ":super" + std::to_string(super_block);
  return out;
}

void QuantScheme::ValidateShape(uint64_t rows, uint64_t cols, std::string_view tensor_name) const {
  if (rows == 0 || cols == 0) Fail("tensor '{}': empty shape [{} x {}] cannot be quantized", tensor_name, rows, cols);
  (void)CheckedMul(rows, cols, tensor_name);
}

const std::vector<SchemePreset>& SchemePresets() {
  static const std::vector<SchemePreset> presets = {
      {"fp32", "fp32", "IEEE binary32, unquantized"},
      {"fp16", "fp16", "IEEE binary16"},
      {"bf16", "bf16", "bfloat16"},
      {"fp8_e4m3", "fp8_e4m3:channel:scale=f32", "OCP FP8 E4M3 (fn), per-channel fp32 scale"},
      {"fp8_e5m2", "fp8_e5m2:channel:scale=f32", "OCP FP8 E5M2, per-channel fp32 scale"},
      {"fp6_e2m3", "fp6_e2m3:channel:scale=f32", "OCP FP6 E2M3, per-channel fp32 scale"},
      {"fp6_e3m2", "fp6_e3m2:channel:scale=f32", "OCP FP6 E3M2, per-channel fp32 scale"},
      {"fp4_e2m1", "fp4_e2m1:g32:scale=f16", "FP4 E2M1, group 32, fp16 scale"},
      {"int8", "int8:channel:scale=f16", "INT8 symmetric, per-channel fp16 scale"},
      {"int7", "int7:g128:scale=f16", "INT7 symmetric, group 128, fp16 scale"},
      {"int6", "int6:g128:scale=f16", "INT6 symmetric, group 128, fp16 scale"},
      {"int5", "int5:g128:scale=f16", "INT5 symmetric, group 128, fp16 scale"},
      {"int4", "int4:g128:scale=f16", "INT4 symmetric, group 128, fp16 scale"},
      {"int3", "int3:g128:scale=f16", "INT3 symmetric, group 128, fp16 scale"},
      {"int2", "int2:g64:scale=f16", "INT2 symmetric, group 64, fp16 scale"},
      {"nf4", "nf4:g64:scale=f32", "NormalFloat4 (bitsandbytes), block 64, fp32 absmax"},
      {"iq4_nl", "iq4_nl:g32:scale=f16", "llama.cpp IQ4_NL: non-linear 4-bit levels, block 32, fp16 scale"},
      {"ternary", "ternary:tensor:scale=f32", "BitNet b1.58 ternary, absmean per-tensor scale"},
      {"mxfp8_e4m3", "fp8_e4m3:g32:scale=e8m0", "OCP MXFP8 (E4M3), block 32, E8M0 scale"},
      {"mxfp8_e5m2", "fp8_e5m2:g32:scale=e8m0", "OCP MXFP8 (E5M2), block 32, E8M0 scale"},
      {"mxfp6_e2m3", "fp6_e2m3:g32:scale=e8m0", "OCP MXFP6 (E2M3), block 32, E8M0 scale"},
      {"mxfp6_e3m2", "fp6_e3m2:g32:scale=e8m0", "OCP MXFP6 (E3M2), block 32, E8M0 scale"},
      {"mxfp4", "fp4_e2m1:g32:scale=e8m0", "OCP MXFP4, block 32, E8M0 scale"},
      {"mxint8", "mxint8:g32:scale=e8m0", "OCP MXINT8, block 32, E8M0 scale"},
      {"nvfp4", "fp4_e2m1:g16:scale=ue4m3:tscale", "NVFP4: block 16, E4M3 scale, fp32 tensor scale"},
  };
  return presets;
}

namespace {

const std::vector<std::pair<std::string_view, std::string_view>> kAliases = {
    {"fp8", "fp8_e4m3"}, {"fp6", "fp6_e2m3"}, {"fp4", "fp4_e2m1"},
    {"mxfp8", "mxfp8_e4m3"}, {"mxfp6", "mxfp6_e2m3"}, {"q8", "int8"}, {"q4", "int4"}};

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t pos = s.find(sep, start);
    parts.push_back(s.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start));
    if (pos == std::string_view::npos) return parts;
    start = pos + 1;
  }
}

uint32_t ParsePositive(std::string_view text, std::string_view spec, std::string_view what) {
  uint32_t v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || v == 0)
    Fail("format '{}': {} '{}' is not a positive integer", spec, what, text);
  return v;
}

std::string KnownFormats() {
  std::string list;
  for (const SchemePreset& p : SchemePresets()) list += (list.empty() ? "" : ", ") + std::string(p.name);
  return list;
}

void ApplyOption(QuantScheme& s, std::string_view opt, std::string_view spec) {
  if (opt == "tensor") {
    s.granularity = {GranularityKind::kTensor};
  } else if (opt == "channel" || opt == "g-1") {
    s.granularity = {GranularityKind::kChannel};
  } else if (opt == "token") {
    s.granularity = {GranularityKind::kToken};
  } else if (opt.starts_with("block")) {
    const auto dims = Split(opt.substr(5), 'x');
    if (dims.size() != 2) Fail("format '{}': block must be written block<R>x<C>, got '{}'", spec, opt);
    s.granularity = {GranularityKind::kBlock, 0, ParsePositive(dims[0], spec, "block rows"),
                     ParsePositive(dims[1], spec, "block cols")};
  } else if (opt.size() > 1 && opt[0] == 'g') {
    s.granularity = {GranularityKind::kGroup, ParsePositive(opt.substr(1), spec, "group size")};
  } else if (opt == "asym") {
    if (s.zero_type == ZeroType::kNone) s.zero_type = ZeroType::kInt;
  } else if (opt == "sym") {
    s.zero_type = ZeroType::kNone;
  } else if (opt == "tscale") {
    s.tensor_scale = true;
  } else if (opt.starts_with("scale=")) {
    const std::string_view v = opt.substr(6);
    if (v == "f32") s.scale_type = ScaleType::kF32;
    else if (v == "f16") s.scale_type = ScaleType::kF16;
    else if (v == "bf16") s.scale_type = ScaleType::kBF16;
    else if (v == "e8m0") s.scale_type = ScaleType::kE8M0;
    else if (v == "ue4m3") s.scale_type = ScaleType::kUE4M3;
    else if (v == "i8") s.scale_type = ScaleType::kI8;
    else Fail("format '{}': unknown scale type '{}' (known: f32, f16, bf16, e8m0, ue4m3)", spec, v);
  } else if (opt.starts_with("zero=")) {
    const std::string_view v = opt.substr(5);
    if (v == "int") s.zero_type = ZeroType::kInt;
    else if (v == "f32") s.zero_type = ZeroType::kF32;
    else if (v == "f16") s.zero_type = ZeroType::kF16;
    else if (v == "bf16") s.zero_type = ZeroType::kBF16;
    else if (v == "bias_f16") s.zero_type = ZeroType::kBiasF16;
    else if (v == "min8") s.zero_type = ZeroType::kMin8;
    else Fail("format '{}': unknown zero type '{}' (known: int, f32, f16, bf16)", spec, v);
  } else if (opt.starts_with("e8m0=")) {
    const std::string_view v = opt.substr(5);
    if (v != "floor" && v != "round") Fail("format '{}': unknown E8M0 rule '{}' (known: floor, round)", spec, v);
    s.e8m0_round = v == "round";
  } else if (opt.starts_with("super")) {
    s.super_block = ParsePositive(opt.substr(5), spec, "super-block size");
  } else {
    Fail("format '{}': unknown option '{}' (known: g<N>, g-1, tensor, channel, token, block<R>x<C>, "
         "sym, asym, scale=..., zero=..., tscale, e8m0=floor|round)", spec, opt);
  }
}

void Validate(const QuantScheme& s, std::string_view spec) {
  const ElementFormat& e = *s.element;
  const bool plain = e.kind == ElementKind::kFloat && e.bits >= 16;
  if (plain && s.granularity.kind != GranularityKind::kNone)
    Fail("format '{}': {} is stored without scales; granularity options do not apply", spec, e.name);
  if (!plain && s.granularity.kind == GranularityKind::kNone)
    Fail("format '{}': {} needs a granularity (tensor, channel, g<N>, block<R>x<C>)", spec, e.name);
  if (s.asymmetric() && e.kind != ElementKind::kInt)
    Fail("format '{}': asymmetric (zero-point) quantization applies to integer formats only, not {}", spec, e.name);
  if (e.kind == ElementKind::kMxInt8 && !s.mx_scales())
    Fail("format '{}': mxint8 elements need E8M0 scales (scale=e8m0)", spec);
  if (s.e8m0_round && !(s.mx_scales() && (e.name == "fp4_e2m1" || e.name == "fp6_e2m3" || e.name == "fp8_e4m3")))
    Fail("format '{}': e8m0=round is compressed-tensors' MX scale rule, defined for E8M0 scales (scale=e8m0) of "
         "fp4_e2m1, fp6_e2m3 and fp8_e4m3", spec);
  if (s.tensor_scale && s.scale_type != ScaleType::kUE4M3)
    Fail("format '{}': a tensor scale (tscale) is only used with ue4m3 block scales (NVFP4)", spec);
  const bool grouped = s.granularity.kind == GranularityKind::kGroup;
  if (s.super_block && (!grouped || e.bits > 8 || s.super_block % s.granularity.group != 0 || s.scale_type != ScaleType::kI8))
    Fail("format '{}': super-blocks (super<N>) take groups of integer-like codes dividing N, with i8 scales", spec);
  if ((s.scale_type == ScaleType::kI8 || s.zero_type == ZeroType::kMin8) && !s.super_block)
    Fail("format '{}': i8 scales and min8 zeros are sub-scales of a super-block (super<N>)", spec);
}

QuantScheme Parse(std::string_view text, bool gguf_storage) {
  auto parts = Split(text, ':');
  std::string_view name = parts[0];
  for (const auto& [alias, target] : kAliases)
    if (name == alias) name = target;
  QuantScheme s;
  s.preset = std::string(name);
  const SchemePreset* preset = nullptr;
  for (const SchemePreset& p : SchemePresets())
    if (p.name == name) preset = &p;
  if (!preset) Fail("unknown format '{}' (known: {})", text, KnownFormats());
  const auto base = Split(preset->spec, ':');
  s.element = FindElementFormat(base[0]);
  LOWBIT_CHECK(s.element != nullptr);
  for (size_t i = 1; i < base.size(); ++i) ApplyOption(s, base[i], preset->spec);
  for (size_t i = 1; i < parts.size(); ++i) ApplyOption(s, parts[i], text);
  Validate(s, text);
  if (!gguf_storage && s.gguf_storage())
    Fail("format '{}': {} is how GGUF files store their blocks: lowbit runs such files, but quantizes to its own "
         "scales only (write GGUF blocks with `lowbit export --type`)",
         text, s.super_block ? "a super-block (super<N>)" : "a stored bias (zero=bias_f16)");
  return s;
}

}  // namespace

QuantScheme ParseScheme(std::string_view text) { return Parse(text, false); }

QuantScheme ParseGgufStorageScheme(std::string_view text) { return Parse(text, true); }

std::string SchemeTextFromFlags(std::string format, int group, bool asym) {
  if (group != 0) format += group < 0 ? ":channel" : ":g" + std::to_string(group);
  if (asym) format += ":asym";
  return format;
}

}  // namespace lowbit
