#include "io/compressed_tensors.h"

#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "core/error.h"
#include "formats/codec.h"

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
  if (w.Has("actorder")) {
    const nlohmann::json& a = w["actorder"].value();
    if (a == true || a == "group" || a == "dynamic")
      w["actorder"].Fail("is \"group\": act-order with weight_g_idx is not supported yet");
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

QuantizedTensor ReadPackQuantizedLinear(const SafetensorsModel& st, const std::string& prefix, uint64_t rows,
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
  for (uint64_t n = 0; n < rows; ++n) {
    uint8_t* row = q.codes().data() + n * q.row_bytes();
    const uint32_t* words = packed.data() + n * row_words;
    if (!legacy) {
      std::memcpy(row, words, q.row_bytes());
    } else {
      for (uint64_t i = 0; i < cols; ++i) WriteCode(row, i, b, (words[i / per_word] >> (b * (i % per_word))) & ((1u << b) - 1));
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
  if (st.Find(prefix + ".weight_g_idx"))
    Fail("{}: tensor '{}.weight_g_idx': act-order checkpoints are not supported yet", st.path().string(), prefix);
  return q;
}

}  // namespace lowbit
