#include "io/compressed_tensors.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "formats/codec.h"
#include "io/compressed_tensors_mx.h"

namespace lowbit {
namespace {

using OrderedJson = nlohmann::ordered_json;

const char* TorchScaleDType(ScaleType t) {
  switch (t) {
    case ScaleType::kF32: return "torch.float32";
    case ScaleType::kF16: return "torch.float16";
    case ScaleType::kBF16: return "torch.bfloat16";
    case ScaleType::kE8M0: return "torch.uint8";           // compressed-tensors' MXFP4/MXFP8 presets
    case ScaleType::kUE4M3: return "torch.float8_e4m3fn";  // its NVFP4 preset
    case ScaleType::kI8: break;                            // GGUF sub-scales: no such scheme
  }
  return "";
}

}  // namespace

std::optional<OrderedJson> CompressedTensorsArgs(const QuantScheme& s) {
  const ElementFormat& e = *s.element;
  const bool float_scale = s.scale_type == ScaleType::kF32 || s.scale_type == ScaleType::kF16 ||
                           s.scale_type == ScaleType::kBF16;
  const uint32_t group = s.granularity.group;
  OrderedJson w;
  w["num_bits"] = e.bits;
  if (e.kind == ElementKind::kInt) {
    if (!float_scale || (s.asymmetric() && s.zero_type != ZeroType::kInt)) return std::nullopt;
    w["type"] = "int";
  } else if (e.name == "fp8_e4m3") {  // compressed-tensors' 8-bit float is E4M3 only
    if (!float_scale && !(s.mx_scales() && group == 32)) return std::nullopt;  // MXFP8
    w["type"] = "float";
  } else if (e.name == "fp4_e2m1") {
    const bool nvfp4 = s.scale_type == ScaleType::kUE4M3 && s.tensor_scale;
    const bool mxfp4 = s.mx_scales() && group == 32;
    if (!float_scale && !nvfp4 && !mxfp4) return std::nullopt;
    w["type"] = "float";
  } else if (e.name == "fp6_e2m3") {  // compressed-tensors' 6-bit float is E2M3, in MXFP6 only
    if (!(s.mx_scales() && group == 32)) return std::nullopt;
    w["type"] = "float";
  } else {
    return std::nullopt;
  }
  w["symmetric"] = !s.asymmetric();
  OrderedJson block = nullptr;
  switch (s.granularity.kind) {
    case GranularityKind::kTensor: w["group_size"] = nullptr; w["strategy"] = "tensor"; break;
    case GranularityKind::kChannel: w["group_size"] = nullptr; w["strategy"] = "channel"; break;
    case GranularityKind::kGroup:
      w["group_size"] = group;
      w["strategy"] = s.tensor_scale ? "tensor_group" : "group";  // NVFP4: group scales + a global one
      break;
    case GranularityKind::kBlock:
      w["group_size"] = nullptr;
      w["strategy"] = "block";
      block = {s.granularity.block_rows, s.granularity.block_cols};
      break;
    default: return std::nullopt;
  }
  if (s.tensor_scale && s.granularity.kind != GranularityKind::kGroup) return std::nullopt;
  w["block_structure"] = block;
  w["dynamic"] = false;
  w["actorder"] = nullptr;
  w["scale_dtype"] = TorchScaleDType(s.scale_type);
  w["zp_dtype"] = s.asymmetric() ? OrderedJson("torch.int8") : OrderedJson(nullptr);
  return w;
}


void CheckPackQuantized(const QuantScheme& s, const std::string& where) {
  const std::string scheme = s.ToString();
  if (s.element->kind != ElementKind::kInt)
    Fail("{}: scheme '{}': element format {}: pack-quantized holds integer codes only", where, scheme, s.element->name);
  const GranularityKind g = s.granularity.kind;
  if (g != GranularityKind::kGroup && g != GranularityKind::kChannel && g != GranularityKind::kTensor)
    Fail("{}: scheme '{}': granularity: pack-quantized weights have tensor, channel or group scales", where, scheme);
  if (s.scale_type != ScaleType::kF32 && s.scale_type != ScaleType::kF16 && s.scale_type != ScaleType::kBF16)
    Fail("{}: scheme '{}': scale type {}: pack-quantized stores f32, f16 or bf16 scales", where, scheme,
         ScaleTypeName(s.scale_type));
  if (s.asymmetric() && s.zero_type != ZeroType::kInt)
    Fail("{}: scheme '{}': zero points: pack-quantized stores integer zero points, not floats", where, scheme);
  if (s.asymmetric() && g == GranularityKind::kTensor)
    Fail("{}: scheme '{}': compressed-tensors packs zero points for channel and group strategies only", where, scheme);
}

void AddPackQuantizedLinear(TensorList& out, const std::string& prefix, const QuantizedTensor& q) {
  const QuantScheme& s = q.scheme();
  CheckPackQuantized(s, prefix);
  const int b = s.element->bits;
  const uint64_t n_out = q.rows(), k_in = q.cols();
  const ScaleGrid g = q.grid();
  // Each row is lowbit's packed row, padded to whole words.
  const uint64_t row_words = (k_in * b + 31) / 32;
  std::vector<std::byte> packed(n_out * row_words * 4, std::byte{0});
  for (uint64_t n = 0; n < n_out; ++n)
    std::memcpy(&packed[n * row_words * 4], q.codes().data() + n * q.row_bytes(), q.row_bytes());
  out.AddOwnedBytes(prefix + ".weight_packed", DType::kI32, {n_out, row_words}, std::move(packed));
  const auto scales = std::as_bytes(q.scale_bytes());
  const std::vector<uint64_t> scale_shape =
      s.granularity.kind == GranularityKind::kTensor ? std::vector<uint64_t>{1} : std::vector<uint64_t>{g.grid_rows, g.grid_cols};
  out.AddOwnedBytes(prefix + ".weight_scale", ScaleDType(s.scale_type), scale_shape, {scales.begin(), scales.end()});
  if (s.asymmetric()) {
    // Zero points [N x groups] packed along N: column c of the [ceil(N*b/32) x groups] words.
    const uint64_t zero_rows = (n_out * b + 31) / 32;
    std::vector<uint32_t> zeros(zero_rows * g.grid_cols, 0);
    for (uint64_t n = 0; n < n_out; ++n)
      for (uint64_t c = 0; c < g.grid_cols; ++c)
        OrWordCode(zeros.data() + c, g.grid_cols, n, b, static_cast<uint32_t>(q.Zero(n * g.grid_cols + c)));
    out.AddOwned(prefix + ".weight_zero_point", DType::kI32, {zero_rows, g.grid_cols}, zeros);
  }
  out.AddOwned(prefix + ".weight_shape", DType::kI64, {2}, std::vector<int64_t>{static_cast<int64_t>(n_out), static_cast<int64_t>(k_in)});
}

QuantScheme PackQuantizedScheme(const JsonView& w, DType scale_dtype) {
  const std::string type = w.Get<std::string>("type", "int");
  if (type != "int") w["type"].Fail(fmt::format("is '{}'; pack-quantized weights are integers", type));
  const int bits = w.Get<int>("num_bits", 8);
  if (bits < 2 || bits > 8) w["num_bits"].Fail(fmt::format("is {}; lowbit runs 2- to 8-bit integer codes", bits));
  const bool symmetric = w.Get<bool>("symmetric", true);
  const int64_t group = w.Get<int64_t>("group_size", 0);
  std::string strategy = w.Get<std::string>("strategy", group > 0 ? "group" : group == -1 ? "channel" : "tensor");
  std::string text = fmt::format("int{}", bits);
  if (strategy == "group") {
    if (group <= 0) w["group_size"].Fail("must be a positive group size with strategy \"group\"");
    text += fmt::format(":g{}", group);
  } else if (strategy == "channel" || strategy == "tensor") {
    text += ":" + strategy;
  } else {
    w["strategy"].Fail(fmt::format("is '{}'; lowbit reads tensor, channel and group weights", strategy));
  }
  if (!symmetric) text += ":asym";
  switch (scale_dtype) {
    case DType::kF32: text += ":scale=f32"; break;
    case DType::kF16: text += ":scale=f16"; break;
    case DType::kBF16: text += ":scale=bf16"; break;
    default: w.Fail(fmt::format("weight_scale is {}; pack-quantized scales are F32, F16 or BF16", DTypeName(scale_dtype)));
  }
  return ParseScheme(text);
}

OrderedTensor ReadPackQuantizedLinear(const SafetensorsModel& st, const std::string& prefix, uint64_t rows,
                                      uint64_t cols, const QuantScheme& s) {
  const int b = s.element->bits;
  const std::string what = fmt::format("pack-quantized {} for a [{} x {}] linear", s.ToString(), rows, cols);
  QuantizedTensor q(s, rows, cols);
  const ScaleGrid g = q.grid();
  // weight_shape: I64 as compressed-tensors writes it (some older files have I32).
  const TensorView* shape = st.Find(prefix + ".weight_shape");
  if (!shape) Fail("{}: tensor '{}.weight_shape' is missing ({})", st.path().string(), prefix, what);
  std::vector<int64_t> dims(2);
  if (shape->dtype == DType::kI32) {
    const std::vector<uint32_t> w = CopyWords(ExpectTensor(st, prefix + ".weight_shape", DType::kI32, {2}, what));
    dims = {static_cast<int32_t>(w[0]), static_cast<int32_t>(w[1])};
  } else {
    std::memcpy(dims.data(), ExpectTensor(st, prefix + ".weight_shape", DType::kI64, {2}, what).data(), 16);
  }
  if (dims[0] != static_cast<int64_t>(rows) || dims[1] != static_cast<int64_t>(cols))
    Fail("{}: tensor '{}.weight_shape' says [{}, {}], but the model needs [{}, {}]", st.path().string(), prefix,
         dims[0], dims[1], rows, cols);
  // Dense bitstream rows (compressed-tensors >= 0.17), or older files' floor(32/b) values per word.
  const uint64_t dense_words = (cols * b + 31) / 32, per_word = 32 / b, legacy_words = (cols + per_word - 1) / per_word;
  const TensorView* packed_view = st.Find(prefix + ".weight_packed");
  const bool legacy = packed_view && packed_view->shape.size() == 2 && packed_view->shape[1] == legacy_words &&
                      legacy_words != dense_words;
  const uint64_t row_words = legacy ? legacy_words : dense_words;
  const std::vector<uint32_t> packed =
      CopyWords(ExpectTensor(st, prefix + ".weight_packed", DType::kI32, {rows, row_words}, what));
  // Act-order "group": weight_g_idx gives each input column's group; stored grouped (column_order.h).
  std::vector<uint32_t> order;
  if (st.Find(prefix + ".weight_g_idx")) {
    const uint64_t group = s.granularity.kind == GranularityKind::kGroup ? s.granularity.group : cols;
    order = OrderFromGroupIndex(CopyWords(ExpectTensor(st, prefix + ".weight_g_idx", DType::kI32, {cols}, what)), group,
                                fmt::format("{}: tensor '{}.weight_g_idx'", st.path().string(), prefix));
  }
  for (uint64_t n = 0; n < rows; ++n) {
    uint8_t* row = q.codes().data() + n * q.row_bytes();
    const uint32_t* words = packed.data() + n * row_words;
    const auto code = [&](uint64_t i) {
      return legacy ? (words[i / per_word] >> (b * (i % per_word))) & ((1u << b) - 1)
                    : ReadCode(reinterpret_cast<const uint8_t*>(words), i, b);
    };
    if (!legacy && order.empty()) {
      std::memcpy(row, words, q.row_bytes());
    } else {
      for (uint64_t j = 0; j < cols; ++j) WriteCode(row, j, b, code(order.empty() ? j : order[j]));
    }
  }
  const std::vector<uint64_t> scale_shape = s.granularity.kind == GranularityKind::kTensor
                                                ? std::vector<uint64_t>{1}
                                                : std::vector<uint64_t>{g.grid_rows, g.grid_cols};
  const std::span<const std::byte> scales = ExpectTensor(st, prefix + ".weight_scale", ScaleDType(s.scale_type), scale_shape, what);
  std::memcpy(q.scale_bytes().data(), scales.data(), q.scale_bytes().size());
  if (s.asymmetric()) {
    const uint64_t zero_rows = (rows * b + 31) / 32;
    const std::vector<uint32_t> zeros =
        CopyWords(ExpectTensor(st, prefix + ".weight_zero_point", DType::kI32, {zero_rows, g.grid_cols}, what));
    for (uint64_t n = 0; n < rows; ++n)
      for (uint64_t c = 0; c < g.grid_cols; ++c)
        q.SetZero(n * g.grid_cols + c, static_cast<float>(ReadWordCode(zeros.data() + c, g.grid_cols, n, b)));
  } else if (st.Find(prefix + ".weight_zero_point")) {
    Fail("{}: tensor '{}.weight_zero_point' belongs to an asymmetric scheme, but the config says symmetric",
         st.path().string(), prefix);
  }
  return {std::move(q), std::move(order)};
}

namespace {

bool FloatScale(ScaleType t) { return t == ScaleType::kF32 || t == ScaleType::kF16 || t == ScaleType::kBF16; }

// The weight_scale shape compressed-tensors gives each strategy.
std::vector<uint64_t> ScaleShape(const QuantScheme& s, const ScaleGrid& g) {
  if (s.granularity.kind == GranularityKind::kTensor) return {1};
  return {g.grid_rows, g.grid_cols};
}

std::string_view ScaleSuffix(DType scale_dtype, const JsonView& where) {
  switch (scale_dtype) {
    case DType::kF32: return ":scale=f32";
    case DType::kF16: return ":scale=f16";
    case DType::kBF16: return ":scale=bf16";
    default: where.Fail(fmt::format("weight_scale is {}; compressed-tensors scales are F32, F16 or BF16", DTypeName(scale_dtype)));
  }
}

// NVFP4 inputs (W4A4): E2M1 per 16 inputs, dynamic E4M3 block scales under a static tensor scale.
bool IsNvfp4Input(const InputQuant& input) { return MicroscaledFormatOf(input.scheme) == kNvfp4Format; }
// MX inputs (the MXFP4, MXFP6A8 and MXFP8 presets): E2M1 / E2M3 / E4M3 per 32 inputs, E8M0 scales per call.
bool IsMxInput(const InputQuant& input) {
  const std::optional<std::string> format = MicroscaledFormatOf(input.scheme);
  return format && *format != kNvfp4Format;
}
// FP8 inputs per token or per group, scales chosen per call (MXFP4xFP8 and the like): what vLLM runs
// under MXFP4 weights beside MX inputs.
bool IsDynamicFp8Input(const InputQuant& input) {
  const QuantScheme& a = input.scheme;
  const GranularityKind g = a.granularity.kind;
  return a.element->name == "fp8_e4m3" && !a.mx_scales() && FloatScale(a.scale_type) &&
         (g == GranularityKind::kToken || g == GranularityKind::kGroup);
}

// Asymmetric inputs (vLLM's W8A8 with azp): int8 weights and int8 inputs with an integer zero-point.
// Per token, compressed-tensors takes the zero-point from the scale before rounding it to scale_dtype,
// lowbit from the rounded scale: the two agree only on fp32 scales.
void CheckAsymmetricInput(const QuantScheme& w, const QuantScheme& a, const std::string& where) {
  if (!(w.element->kind == ElementKind::kInt && w.element->bits == 8) || a.element->kind != ElementKind::kInt ||
      a.zero_type != ZeroType::kInt)
    Fail("{}: input_quant '{}': compressed-tensors runs asymmetric inputs as int8 with integer zero-points on int8 "
         "weights (W8A8), not on {} weights", where, a.ToString(), w.ToString());
  if (a.granularity.kind == GranularityKind::kToken && a.scale_type != ScaleType::kF32)
    Fail("{}: input_quant '{}': asymmetric per-token inputs need fp32 scales (compressed-tensors computes the "
         "zero-point before rounding the scale): use {}:scale=f32", where, a.ToString(), "int8:token:asym");
}

// Block FP8 weights with FP8 inputs per group (llm-compressor's FP8_BLOCK, DeepSeek-V3's scheme): vLLM
// quantizes such inputs per 1 x (the block's columns) group per call, whatever else the config says.
void CheckBlockFp8Input(const QuantScheme& w, const InputQuant& input, const std::string& where) {
  const bool block = w.granularity.kind == GranularityKind::kBlock;
  if (!IsDynamicFp8Input(input) || !block || input.scheme.granularity.group != w.granularity.block_cols)
    Fail("{}: input_quant '{}' on '{}': compressed-tensors quantizes FP8 inputs per group only on block FP8 weights, "
         "one group per block column (vLLM's block kernels): use {}", where, input.scheme.ToString(), w.ToString(),
         block ? fmt::format("fp8_e4m3:g{}:scale=f32", w.granularity.block_cols)
               : std::string("fp8_e4m3:token, or block weights (fp8_e4m3:block128x128:scale=f32)"));
}

}  // namespace

std::string CompressedTensorsFormatOf(const QuantScheme& w, const std::optional<InputQuant>& input, const std::string& where) {
  const std::string scheme = w.ToString();
  const bool fp8 = w.element->name == "fp8_e4m3";
  const bool int8 = w.element->kind == ElementKind::kInt && w.element->bits == 8;
  if (const std::optional<std::string> microscaled = MicroscaledFormatOf(w)) {
    const bool nvfp4 = *microscaled == kNvfp4Format, mxfp4 = *microscaled == "mxfp4-pack-quantized";
    if (input && !(nvfp4 ? IsNvfp4Input(*input) : IsMxInput(*input) || (mxfp4 && IsDynamicFp8Input(*input))))
      Fail("{}: scheme '{}' with input_quant '{}': compressed-tensors exports of {} weights are weight-only (W4A16 "
           "/ W8A16), or with nvfp4 inputs on nvfp4 weights, MX inputs (mxfp4, mxfp6_e2m3, mxfp8_e4m3) on MX weights, "
           "fp8_e4m3 inputs per token or group (dynamic) on mxfp4 weights",
           where, scheme, input->scheme.ToString(), *microscaled);
    if (input && IsMxInput(*input) && !input->scheme.e8m0_round)
      Fail("{}: input_quant '{}': compressed-tensors and vLLM choose dynamic MX input scales by their own rule (the "
           "amax rounded to the element's precision first), not the OCP floor rule; quantize with --act-format "
           "{}:e8m0=round so that lowbit measures what they run", where, input->scheme.ToString(),
           input->scheme.ToString());
    if (input && nvfp4 && !(input->static_scale > 0))
      Fail("{}: input_quant '{}' has no calibrated tensor scale, which compressed-tensors stores as input_global_scale "
           "(quantize with --calib)", where, input->scheme.ToString());
    return *microscaled;
  }
  if (!input) {
    if (w.element->kind == ElementKind::kInt) {
      CheckPackQuantized(w, where);
      return "pack-quantized";
    }
    if (!fp8)
      Fail("{}: scheme '{}': element format {}: compressed-tensors holds integer and fp8_e4m3 weights, and the "
           "microscaled nvfp4 (fp4_e2m1:g16:scale=ue4m3:tscale), mxfp4, mxfp6_e2m3 and mxfp8_e4m3 (g32, e8m0 scales)",
           where, scheme, w.element->name);
  } else {
    const QuantScheme& a = input->scheme;
    const GranularityKind g = a.granularity.kind;
    if (fp8 && g == GranularityKind::kGroup) CheckBlockFp8Input(w, *input, where);
    else if ((a.element->name != "fp8_e4m3" && !(a.element->kind == ElementKind::kInt && a.element->bits == 8)) ||
             (g != GranularityKind::kToken && g != GranularityKind::kTensor))
      Fail("{}: input_quant '{}': compressed-tensors quantizes inputs to int8 or fp8_e4m3, per token (dynamic) or "
           "per tensor (static), and fp8_e4m3 per group on block FP8 weights", where, a.ToString());
    if (a.asymmetric()) CheckAsymmetricInput(w, a, where);
    // WnA8 (the W4A8 and W4AFP8 presets): packed integer weights, inputs quantized per token per call.
    if (w.element->kind == ElementKind::kInt && !int8) {
      if (g != GranularityKind::kToken)
        Fail("{}: scheme '{}' with input_quant '{}': compressed-tensors' W4A8 runs packed {} weights on dynamic "
             "per-token inputs (int8:token or fp8_e4m3:token), not static ones", where, scheme, a.ToString(),
             w.element->name);
      CheckPackQuantized(w, where);
      return "pack-quantized";
    }
    if (!(int8 && a.element->kind == ElementKind::kInt) && !(fp8 && a.element->name == "fp8_e4m3"))
      Fail("{}: scheme '{}' with input_quant '{}': compressed-tensors pairs int8 weights with int8 inputs and fp8 "
           "with fp8", where, scheme, a.ToString());
    if (int8 && w.asymmetric())
      Fail("{}: scheme '{}': int-quantized W8A8 weights are symmetric", where, scheme);
  }
  if (!FloatScale(w.scale_type) || w.tensor_scale)
    Fail("{}: scheme '{}': scale type {}: compressed-tensors stores f32, f16 or bf16 scales here", where, scheme,
         ScaleTypeName(w.scale_type));
  const GranularityKind g = w.granularity.kind;
  if (g != GranularityKind::kTensor && g != GranularityKind::kChannel && g != GranularityKind::kGroup &&
      g != GranularityKind::kBlock)
    Fail("{}: scheme '{}': granularity: compressed-tensors weights have tensor, channel, group or block scales", where, scheme);
  if (!input) return "naive-quantized";
  return int8 ? "int-quantized" : "float-quantized";
}

nlohmann::ordered_json CompressedTensorsInputArgs(const InputQuant& input) {
  OrderedJson a;
  if (IsNvfp4Input(input)) {  // the NVFP4 preset's input_activations (W4A4)
    a["num_bits"] = 4;
    a["type"] = "float";
    a["symmetric"] = true;
    a["group_size"] = 16;
    a["strategy"] = "tensor_group";
    a["block_structure"] = nullptr;
    a["dynamic"] = "local";
    a["actorder"] = nullptr;
    a["observer"] = "static_minmax";
    a["scale_dtype"] = "torch.float8_e4m3fn";
    a["zp_dtype"] = "torch.float8_e4m3fn";
    return a;
  }
  if (IsMxInput(input)) {  // MX inputs: E8M0 scales per 32 inputs, chosen per call (no tensor to store)
    a["num_bits"] = input.scheme.element->bits;
    a["type"] = "float";
    a["symmetric"] = true;
    a["group_size"] = 32;
    a["strategy"] = "group";
    a["block_structure"] = nullptr;
    a["dynamic"] = true;
    a["actorder"] = nullptr;
    a["observer"] = nullptr;
    a["scale_dtype"] = "torch.uint8";
    a["zp_dtype"] = "torch.uint8";
    return a;
  }
  const GranularityKind g = input.scheme.granularity.kind;
  const bool token = g == GranularityKind::kToken, group = g == GranularityKind::kGroup;
  a["num_bits"] = 8;
  a["type"] = input.scheme.element->kind == ElementKind::kInt ? "int" : "float";
  a["symmetric"] = !input.scheme.asymmetric();
  a["group_size"] = group ? OrderedJson(input.scheme.granularity.group) : OrderedJson(nullptr);
  a["strategy"] = token ? "token" : group ? "group" : "tensor";
  a["block_structure"] = nullptr;
  a["dynamic"] = token || group;
  a["actorder"] = nullptr;
  a["observer"] = token || group ? OrderedJson(nullptr) : OrderedJson("minmax");
  // The dtype dynamic scales are rounded to, so that a reader computes lowbit's numbers.
  a["scale_dtype"] = TorchScaleDType(input.scheme.scale_type);
  a["zp_dtype"] = input.scheme.asymmetric() ? OrderedJson("torch.int8") : OrderedJson(nullptr);
  return a;
}

void AddCompressedTensorsLinear(TensorList& out, const std::string& prefix, const QuantizedTensor& q,
                                const std::optional<InputQuant>& input) {
  const std::string format = CompressedTensorsFormatOf(q.scheme(), input, prefix);
  if (format == "pack-quantized") return AddPackQuantizedLinear(out, prefix, q);
  if (IsMicroscaledFormat(format)) {
    AddMicroscaledLinear(out, prefix, q);
    // A divisor, as weight_global_scale (compressed_tensors_mx.h): 1 / g is the tensor scale again.
    if (input && IsNvfp4Input(*input)) out.AddOwned(prefix + ".input_global_scale", DType::kF32, {1}, std::vector<float>{1.0f / input->static_scale});
    return;
  }
  const QuantScheme& s = q.scheme();
  const uint64_t n_out = q.rows(), k_in = q.cols();
  std::vector<std::byte> weight(n_out * k_in);
  for (uint64_t n = 0; n < n_out; ++n) {
    const uint8_t* row = q.codes().data() + n * q.row_bytes();
    for (uint64_t i = 0; i < k_in; ++i)  // int8: offset binary to two's complement; fp8: the E4M3 byte as is
      weight[n * k_in + i] = static_cast<std::byte>(s.element->kind == ElementKind::kInt ? row[i] ^ 0x80 : row[i]);
  }
  out.AddOwnedBytes(prefix + ".weight", s.element->kind == ElementKind::kInt ? DType::kI8 : DType::kF8E4M3, {n_out, k_in},
                    std::move(weight));
  const auto scales = std::as_bytes(q.scale_bytes());
  out.AddOwnedBytes(prefix + ".weight_scale", ScaleDType(s.scale_type), ScaleShape(s, q.grid()), {scales.begin(), scales.end()});
  if (input && input->scheme.granularity.kind == GranularityKind::kTensor) {
    out.AddOwned(prefix + ".input_scale", DType::kF32, {1}, std::vector<float>{input->static_scale});
    if (input->scheme.asymmetric())  // lowbit's codes 0..255, compressed-tensors' int8 -128..127
      out.AddOwned(prefix + ".input_zero_point", DType::kI8, {1},
                   std::vector<int8_t>{static_cast<int8_t>(input->static_zero - 128)});
  }
}

QuantScheme UnpackedScheme(const JsonView& w, DType scale_dtype) {
  const std::string type = w.Get<std::string>("type", "int");
  if (w.Get<int>("num_bits", 8) != 8) w["num_bits"].Fail("int-, float- and naive-quantized weights here are 8-bit");
  if (!w.Get<bool>("symmetric", true)) w["symmetric"].Fail("asymmetric unpacked weights are not supported yet");
  std::string text;
  if (type == "int") text = "int8";
  else if (type == "float") text = "fp8_e4m3";
  else w["type"].Fail(fmt::format("is '{}'; expected int or float", type));
  const int64_t group = w.Get<int64_t>("group_size", 0);
  const std::string strategy = w.Get<std::string>("strategy", group > 0 ? "group" : group == -1 ? "channel" : "tensor");
  if (strategy == "group") {
    if (group <= 0) w["group_size"].Fail("must be a positive group size with strategy \"group\"");
    text += fmt::format(":g{}", group);
  } else if (strategy == "block") {
    const std::vector<uint32_t> block = w.Get<std::vector<uint32_t>>("block_structure");
    if (block.size() != 2 || block[0] == 0 || block[1] == 0) w["block_structure"].Fail("must be [rows, cols]");
    text += fmt::format(":block{}x{}", block[0], block[1]);
  } else if (strategy == "channel" || strategy == "tensor") {
    text += ":" + strategy;
  } else {
    w["strategy"].Fail(fmt::format("is '{}'; lowbit reads tensor, channel, group and block weights", strategy));
  }
  return ParseScheme(text + std::string(ScaleSuffix(scale_dtype, w)));
}

QuantizedTensor ReadUnpackedLinear(const SafetensorsModel& st, const std::string& prefix, uint64_t rows, uint64_t cols,
                                   const QuantScheme& s) {
  const std::string what = fmt::format("{} for a [{} x {}] linear", s.ToString(), rows, cols);
  const bool is_int = s.element->kind == ElementKind::kInt;
  QuantizedTensor q(s, rows, cols);
  const std::span<const std::byte> weight =
      ExpectTensor(st, prefix + ".weight", is_int ? DType::kI8 : DType::kF8E4M3, {rows, cols}, what);
  for (uint64_t n = 0; n < rows; ++n)
    for (uint64_t i = 0; i < cols; ++i) {
      const auto b = static_cast<uint8_t>(weight[n * cols + i]);
      q.codes()[n * q.row_bytes() + i] = is_int ? b ^ 0x80 : b;
    }
  const std::span<const std::byte> scales =
      ExpectTensor(st, prefix + ".weight_scale", ScaleDType(s.scale_type), ScaleShape(s, q.grid()), what);
  std::memcpy(q.scale_bytes().data(), scales.data(), q.scale_bytes().size());
  if (st.Find(prefix + ".weight_zero_point"))
    Fail("{}: tensor '{}.weight_zero_point': asymmetric unpacked weights are not supported yet", st.path().string(), prefix);
  return q;
}

namespace {

// compressed-tensors' NVFP4 input_activations: tensor_group, 16, dynamic "local" (block scales per
// call), and a static input_global_scale, a divisor as weight_global_scale.
InputQuant Nvfp4Input(const JsonView& a, const SafetensorsModel& st, const std::string& prefix) {
  if (a.Get<std::string>("type", "int") != "float") a["type"].Fail("4-bit inputs are NVFP4 here: type float");
  if (a.Get<std::string>("strategy", "") != "tensor_group")
    a["strategy"].Fail("4-bit inputs are NVFP4 (strategy tensor_group) or MX (strategy group) here");
  if (a.Get<int64_t>("group_size", 0) != 16) a["group_size"].Fail("NVFP4 inputs have groups of 16");
  if (!a.Has("dynamic") || a["dynamic"].value() != "local")
    a["dynamic"].Fail("NVFP4 inputs are dynamic \"local\": block scales per call under a static global scale");
  const TensorView* global = st.Find(prefix + ".input_global_scale");
  if (!global || global->numel() != 1)
    Fail("{}: tensor '{}.input_global_scale' (one value) is missing; {} says NVFP4 inputs", st.path().string(), prefix,
         a.path());
  const float g = ToFloat32(*global)[0];
  if (!(g > 0) || !std::isfinite(g) || !std::isfinite(1.0f / g) || !(1.0f / g > 0))
    Fail("{}: tensor '{}.input_global_scale' is {}, not a positive scale with a finite reciprocal", st.path().string(),
         prefix, g);
  return InputQuant{ParseScheme("nvfp4"), 1.0f / g};
}

// The scale type of inputs quantized per call: scale_dtype when given (lowbit writes it), else fp32
// as vLLM computes them.
std::string_view DynamicScaleType(const JsonView& a) {
  const std::string dtype = a.Get<std::string>("scale_dtype", "torch.float32");
  if (dtype == "torch.float16") return "f16";
  if (dtype == "torch.bfloat16") return "bf16";
  if (dtype != "torch.float32")
    a["scale_dtype"].Fail(fmt::format("is '{}'; expected torch.float32, torch.float16 or torch.bfloat16", dtype));
  return "f32";
}

// Dynamic FP8 inputs per group (MXFP4xFP8: groups of 128), scales in scale_dtype (fp32 by default).
InputQuant Fp8GroupInput(const JsonView& a) {
  const int64_t group = a.Get<int64_t>("group_size", 0);
  if (group <= 0) a["group_size"].Fail("must be a positive group size with strategy \"group\"");
  if (!a.Has("dynamic") || a["dynamic"].value() != true)
    a["dynamic"].Fail("grouped FP8 inputs are dynamic here: their scales are chosen per call");
  return InputQuant{ParseScheme(fmt::format("fp8_e4m3:g{}:scale={}", group, DynamicScaleType(a))), 0};
}

// compressed-tensors' MX input_activations (the MXFP4, MXFP6A8 and MXFP8 presets): float codes per
// group of 32 with E8M0 scales (scale_dtype uint8) chosen per call by its own rule (e8m0=round).
InputQuant MxInput(const JsonView& a) {
  const int bits = a.Get<int>("num_bits", 8);
  if (bits == 8 && a.Get<std::string>("scale_dtype", "torch.float32") != "torch.uint8") return Fp8GroupInput(a);
  const char* element = bits == 4 ? "fp4_e2m1" : bits == 6 ? "fp6_e2m3" : bits == 8 ? "fp8_e4m3" : nullptr;
  if (!element) a["num_bits"].Fail(fmt::format("is {}; MX inputs have 4, 6 or 8 bits", bits));
  if (a.Get<int64_t>("group_size", 0) != 32) a["group_size"].Fail("MX inputs have groups of 32");
  if (!a.Has("dynamic") || a["dynamic"].value() != true)
    a["dynamic"].Fail("MX inputs are dynamic: their E8M0 scales are chosen per call");
  if (const std::string dtype = a.Get<std::string>("scale_dtype", ""); dtype != "torch.uint8")
    a["scale_dtype"].Fail(fmt::format("is '{}'; MX input scales are E8M0 exponents, torch.uint8 (lowbit reads no "
                                      "other grouped float inputs)", dtype));
  return InputQuant{ParseScheme(fmt::format("{}:g32:scale=e8m0:e8m0=round", element)), 0};
}

// The input_scale (and input_zero_point) tensor of static per-tensor inputs: one positive value.
float StaticInputValue(const SafetensorsModel& st, const std::string& prefix, const JsonView& a, const char* name) {
  const TensorView* t = st.Find(prefix + "." + name);
  if (!t || t->numel() != 1)
    Fail("{}: tensor '{}.{}' (one value) is missing; {} says static per-tensor inputs", st.path().string(), prefix,
         name, a.path());
  return ToFloat32(*t)[0];
}

float StaticInputScale(const SafetensorsModel& st, const std::string& prefix, const JsonView& a) {
  const float value = StaticInputValue(st, prefix, a, "input_scale");
  if (!(value > 0) || !std::isfinite(value))
    Fail("{}: tensor '{}.input_scale' is {}, not a positive scale", st.path().string(), prefix, value);
  return value;
}

// Asymmetric int8 inputs (vLLM's W8A8 with azp): per token with fp32 scales chosen per call, or per
// tensor with a calibrated input_scale and int8 input_zero_point (lowbit's codes are that plus 128).
InputQuant AsymmetricInput(const JsonView& a, const SafetensorsModel& st, const std::string& prefix) {
  if (a.Get<std::string>("type", "int") != "int" || a.Get<int>("num_bits", 8) != 8)
    a["symmetric"].Fail("asymmetric inputs are int8 here (type int, num_bits 8)");
  const std::string strategy = a.Get<std::string>("strategy", "tensor");
  const bool dynamic = a.Has("dynamic") && a["dynamic"].value() == true;
  if (strategy == "token" && dynamic) {
    if (DynamicScaleType(a) != "f32")
      a["scale_dtype"].Fail("asymmetric per-token inputs are read with fp32 scales (compressed-tensors takes the "
                            "zero-point from the unrounded scale)");
    return InputQuant{ParseScheme("int8:token:asym:scale=f32")};
  }
  if (strategy != "tensor" || dynamic)
    a["strategy"].Fail(fmt::format("is '{}'{}; lowbit reads asymmetric inputs per token (dynamic) and per tensor "
                                   "(static)", strategy, dynamic ? " (dynamic)" : ""));
  const float scale = StaticInputScale(st, prefix, a);
  const float zero = StaticInputValue(st, prefix, a, "input_zero_point");
  if (!(zero >= -128 && zero <= 127) || zero != std::nearbyint(zero))
    Fail("{}: tensor '{}.input_zero_point' is {}, not an int8 zero-point", st.path().string(), prefix, zero);
  return InputQuant{ParseScheme("int8:tensor:asym:scale=f32"), scale, zero + 128};
}

}  // namespace

InputQuant CompressedTensorsInput(const JsonView& a, const SafetensorsModel& st, const std::string& prefix) {
  const std::string type = a.Get<std::string>("type", "int");
  if (!a.Get<bool>("symmetric", true)) return AsymmetricInput(a, st, prefix);
  if (a.Get<std::string>("strategy", "") == "group" && type == "float") return MxInput(a);
  if (a.Get<int>("num_bits", 8) == 4) return Nvfp4Input(a, st, prefix);
  if (a.Get<int>("num_bits", 8) != 8) a["num_bits"].Fail("lowbit runs 8-bit input quantization, and NVFP4's 4-bit");
  if (type != "int" && type != "float") a["type"].Fail(fmt::format("is '{}'; expected int or float", type));
  const std::string element = type == "int" ? "int8" : "fp8_e4m3";
  const std::string strategy = a.Get<std::string>("strategy", "tensor");
  const bool dynamic = a.Has("dynamic") && a["dynamic"].value() == true;
  if (strategy == "token") {
    if (!dynamic) a["dynamic"].Fail("per-token input quantization must be dynamic");
    return InputQuant{ParseScheme(fmt::format("{}:token:scale={}", element, DynamicScaleType(a))), 0};
  }
  if (strategy != "tensor" || dynamic)
    a["strategy"].Fail(fmt::format("is '{}'{}; lowbit reads per-token dynamic and per-tensor static inputs", strategy,
                                   dynamic ? " (dynamic)" : ""));
  return InputQuant{ParseScheme(element + ":tensor:scale=f32"), StaticInputScale(st, prefix, a)};
}

}  // namespace lowbit
