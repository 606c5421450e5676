#include "io/compressed_tensors_mx.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace lowbit {
namespace {

struct Microscaled {
  std::string_view format;
  std::string_view element;  // lowbit's element format
  int bits;
  uint32_t group;
  ScaleType scale;
  bool tensor_scale;
  std::string_view scheme;   // the lowbit scheme it reads into
  std::string_view torch_scale_dtype;
};

constexpr Microscaled kFormats[] = {
    {"nvfp4-pack-quantized", "fp4_e2m1", 4, 16, ScaleType::kUE4M3, true, "fp4_e2m1:g16:scale=ue4m3:tscale",
     "torch.float8_e4m3fn"},
    {"mxfp4-pack-quantized", "fp4_e2m1", 4, 32, ScaleType::kE8M0, false, "fp4_e2m1:g32:scale=e8m0", "torch.uint8"},
    {"mxfp6-pack-quantized", "fp6_e2m3", 6, 32, ScaleType::kE8M0, false, "fp6_e2m3:g32:scale=e8m0", "torch.uint8"},
    {"mxfp8-quantized", "fp8_e4m3", 8, 32, ScaleType::kE8M0, false, "fp8_e4m3:g32:scale=e8m0", "torch.uint8"},
};

const Microscaled* Find(const QuantScheme& s) {
  if (s.granularity.kind != GranularityKind::kGroup || s.asymmetric()) return nullptr;
  for (const Microscaled& m : kFormats)
    if (s.element->name == m.element && s.granularity.group == m.group && s.scale_type == m.scale &&
        s.tensor_scale == m.tensor_scale)
      return &m;
  return nullptr;
}

const Microscaled* Find(std::string_view format) {
  for (const Microscaled& m : kFormats)
    if (m.format == format) return &m;
  return nullptr;
}

// mxfp8 keeps compressed-tensors' unpacked name.
std::string CodesName(const Microscaled& m, const std::string& prefix) {
  return prefix + (m.bits == 8 ? ".weight" : ".weight_packed");
}

DType CodesDType(const Microscaled& m) { return m.bits == 8 ? DType::kF8E4M3 : DType::kU8; }
DType ScalesDType(const Microscaled& m) { return m.scale == ScaleType::kUE4M3 ? DType::kF8E4M3 : DType::kU8; }

}  // namespace

std::optional<std::string> MicroscaledFormatOf(const QuantScheme& s) {
  const Microscaled* m = Find(s);
  return m ? std::optional<std::string>(m->format) : std::nullopt;
}

bool IsMicroscaledFormat(std::string_view format) { return Find(format) != nullptr; }

void AddMicroscaledLinear(TensorList& out, const std::string& prefix, const QuantizedTensor& q) {
  const Microscaled* m = Find(q.scheme());
  LOWBIT_CHECK(m != nullptr);
  const uint64_t rows = q.rows(), cols = q.cols();
  if (cols % m->group != 0)
    Fail("{}: {} input columns are not whole groups of {}: {} needs them", prefix, cols, m->group, m->format);
  const uint64_t row_bytes = cols * m->bits / 8;
  LOWBIT_CHECK(q.row_bytes() == row_bytes);
  std::vector<std::byte> codes(rows * row_bytes);
  std::copy_n(reinterpret_cast<const std::byte*>(q.codes().data()), codes.size(), codes.begin());
  out.AddOwnedBytes(CodesName(*m, prefix), CodesDType(*m), {rows, row_bytes}, std::move(codes));
  const auto scales = std::as_bytes(q.scale_bytes());
  out.AddOwnedBytes(prefix + ".weight_scale", ScalesDType(*m), {rows, cols / m->group}, {scales.begin(), scales.end()});
  if (m->tensor_scale)
    out.AddOwned(prefix + ".weight_global_scale", DType::kF32, {1}, std::vector<float>{1.0f / q.tensor_scale()});
}

QuantScheme MicroscaledScheme(const JsonView& w, std::string_view format) {
  const Microscaled* m = Find(format);
  LOWBIT_CHECK(m != nullptr);
  if (const std::string type = w.Get<std::string>("type", "int"); type != "float")
    w["type"].Fail(fmt::format("is '{}'; {} weights are floats", type, format));
  if (const int bits = w.Get<int>("num_bits", 8); bits != m->bits)
    w["num_bits"].Fail(fmt::format("is {}; {} weights have {} bits", bits, format, m->bits));
  if (const int64_t group = w.Get<int64_t>("group_size", 0); group != m->group)
    w["group_size"].Fail(fmt::format("is {}; {} groups are {} weights", group, format, m->group));
  if (!w.Get<bool>("symmetric", true)) w["symmetric"].Fail(fmt::format("is false; {} weights are symmetric", format));
  const std::string strategy = w.Get<std::string>("strategy", m->tensor_scale ? "tensor_group" : "group");
  if (strategy != (m->tensor_scale ? "tensor_group" : "group"))
    w["strategy"].Fail(fmt::format("is '{}'; {} weights use strategy \"{}\"", strategy, format,
                                   m->tensor_scale ? "tensor_group" : "group"));
  if (w.Has("scale_dtype") && !w["scale_dtype"].value().is_null())
    if (const std::string dtype = w.Get<std::string>("scale_dtype"); dtype != m->torch_scale_dtype)
      w["scale_dtype"].Fail(fmt::format("is '{}'; {} scales are {}", dtype, format, m->torch_scale_dtype));
  return ParseScheme(std::string(m->scheme));
}

QuantizedTensor ReadMicroscaledLinear(const SafetensorsModel& st, const std::string& prefix, uint64_t rows,
                                      uint64_t cols, const QuantScheme& s) {
  const Microscaled* m = Find(s);
  LOWBIT_CHECK(m != nullptr);
  const std::string what = fmt::format("{} for a [{} x {}] linear", m->format, rows, cols);
  if (cols % m->group != 0)
    Fail("{}: '{}' has {} input columns, not whole groups of {} ({})", st.path().string(), prefix, cols, m->group, what);
  QuantizedTensor q(s, rows, cols);
  const uint64_t row_bytes = cols * m->bits / 8;
  LOWBIT_CHECK(q.row_bytes() == row_bytes);
  const std::span<const std::byte> codes = ExpectTensor(st, CodesName(*m, prefix), CodesDType(*m), {rows, row_bytes}, what);
  std::copy_n(reinterpret_cast<const uint8_t*>(codes.data()), codes.size(), q.codes().begin());
  const std::span<const std::byte> scales =
      ExpectTensor(st, prefix + ".weight_scale", ScalesDType(*m), {rows, cols / m->group}, what);
  for (size_t i = 0; i < scales.size(); ++i) {
    const auto b = static_cast<uint8_t>(scales[i]);
    // E8M0 0xFF and E4M3 0x7F are NaN; an E4M3 block scale with its sign bit set is negative.
    if (m->scale == ScaleType::kE8M0 ? b == 0xFF : b >= 0x7F)
      Fail("{}: tensor '{}.weight_scale' [{}, {}] is byte 0x{:02X}, {} ({})", st.path().string(), prefix,
           i / (cols / m->group), i % (cols / m->group), b, b == 0xFF || b == 0x7F ? "NaN" : "a negative scale", what);
  }
  std::copy_n(reinterpret_cast<const uint8_t*>(scales.data()), scales.size(), q.scale_bytes().begin());
  if (m->tensor_scale) {
    // One F32 value, shaped [1] as compressed-tensors saves it (or [] as some writers do).
    const TensorView* g = st.Find(prefix + ".weight_global_scale");
    if (!g) Fail("{}: tensor '{}.weight_global_scale' is missing ({})", st.path().string(), prefix, what);
    if (g->dtype != DType::kF32 || g->numel() != 1)
      Fail("{}: tensor '{}.weight_global_scale' is {} with {} values; expected one F32 value ({})", st.path().string(),
           prefix, DTypeName(g->dtype), g->numel(), what);
    const float global = ToFloat32(*g)[0];
    const float t = 1.0f / global;
    if (!(global > 0) || !std::isfinite(global) || !std::isfinite(t) || !std::isnormal(t))
      Fail("{}: tensor '{}.weight_global_scale' is {}, not a positive global scale with a finite reciprocal",
           st.path().string(), prefix, global);
    q.set_tensor_scale(t);
  }
  if (st.Find(prefix + ".weight_zero_point"))
    Fail("{}: tensor '{}.weight_zero_point': {} weights are symmetric", st.path().string(), prefix, m->format);
  return q;
}

}  // namespace lowbit
