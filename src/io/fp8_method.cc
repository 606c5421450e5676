#include "io/fp8_method.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "io/checkpoint_folder.h"
#include "quant/scheme.h"

namespace lowbit {

namespace {

std::string_view ScaleOption(const TensorView& scale, const std::string& file, const std::string& name) {
  switch (scale.dtype) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    default: Fail("{}: tensor '{}' is {}; FP8 scales are F32, BF16 or F16", file, name, DTypeName(scale.dtype));
  }
}

const TensorView& Need(const SafetensorsModel& st, const std::string& name, const std::string& why) {
  const TensorView* t = st.Find(name);
  if (!t) Fail("{}: tensor '{}' is missing; {}", st.path().string(), name, why);
  return *t;
}

}  // namespace

Fp8MethodParams ParseFp8Method(const JsonView& qc) {
  Fp8MethodParams p;
  // (MiniMax-M2's configs spell it as torch's dtype)
  if (const std::string fmt = qc.Get<std::string>("fmt", "e4m3"); fmt != "e4m3" && fmt != "float8_e4m3fn")
    qc["fmt"].Fail(fmt::format("is '{}'; FP8 checkpoints hold E4M3 weights (vLLM serializes no other)", fmt));
  const std::string scheme = qc.Get<std::string>("activation_scheme", "dynamic");
  if (scheme != "dynamic" && scheme != "static")
    qc["activation_scheme"].Fail(fmt::format("is '{}'; expected dynamic or static", scheme));
  p.static_inputs = scheme == "static";
  if (qc.Has("weight_block_size") && !qc["weight_block_size"].value().is_null()) {  // null: one scale per tensor
    const std::vector<uint32_t> block = qc.Get<std::vector<uint32_t>>("weight_block_size");
    if (block.size() != 2 || block[0] == 0 || block[1] == 0)
      qc["weight_block_size"].Fail("must be [rows, cols] of positive sizes");
    if (p.static_inputs)
      qc["activation_scheme"].Fail("is static, but block weights (weight_block_size) quantize their inputs per call");
    p.block_rows = block[0];
    p.block_cols = block[1];
  }
  return p;
}

bool IsFp8MethodLinear(const SafetensorsModel& st, const std::string& prefix) {
  const TensorView* w = st.Find(prefix + ".weight");
  return w && w->dtype == DType::kF8E4M3;
}

QuantizedTensor ReadFp8MethodLinear(const SafetensorsModel& st, const std::string& prefix, uint64_t rows, uint64_t cols,
                                    const Fp8MethodParams& p) {
  const bool block = p.block_rows != 0;
  // Per tensor, vLLM's name, or transformers' (Ministral 3, Mistral Small 4: a multiplier too, despite the name).
  const std::string scale_name =
      prefix + (block || (!st.Find(prefix + ".weight_scale") && st.Find(prefix + ".weight_scale_inv"))
                    ? ".weight_scale_inv"
                    : ".weight_scale");
  const TensorView& scale =
      Need(st, scale_name, block ? "weight_block_size gives every FP8 linear a scale per block" : "an FP8 linear");
  const std::string granularity = block ? fmt::format("block{}x{}", p.block_rows, p.block_cols) : "tensor";
  const std::string scheme =
      fmt::format("fp8_e4m3:{}:scale={}", granularity, ScaleOption(scale, st.path().string(), scale_name));
  QuantizedTensor q(ParseScheme(scheme), rows, cols);
  const std::string what = fmt::format("{} for a [{} x {}] linear", scheme, rows, cols);
  const std::span<const std::byte> codes = ExpectTensor(st, prefix + ".weight", DType::kF8E4M3, {rows, cols}, what);
  std::memcpy(q.codes().data(), codes.data(), q.codes().size());  // E4M3 bytes are lowbit's fp8 codes
  const ScaleGrid g = q.grid();
  const std::span<const std::byte> scales =
      block ? ExpectTensor(st, scale_name, scale.dtype, {g.grid_rows, g.grid_cols}, what) : scale.data;
  if (!block && scale.numel() != 1)
    Fail("{}: tensor '{}' holds {} values; the FP8 method scales a linear without weight_block_size by one",
         st.path().string(), scale_name, scale.numel());
  std::memcpy(q.scale_bytes().data(), scales.data(), q.scale_bytes().size());
  return q;
}

InputQuant Fp8MethodInput(const SafetensorsModel& st, const std::string& prefix, const Fp8MethodParams& p) {
  if (p.block_rows)  // vLLM's Fp8LinearMethod: act_quant_group_shape (1, weight_block_size[0])
    return InputQuant{ParseScheme(fmt::format("fp8_e4m3:g{}:scale=f32", p.block_rows))};
  if (!p.static_inputs) return InputQuant{ParseScheme("fp8_e4m3:token:scale=f32")};
  // stored as [] or [1]; vLLM's name, or transformers' (x / scale to E4M3 either way)
  const std::string name =
      prefix + (!st.Find(prefix + ".input_scale") && st.Find(prefix + ".activation_scale") ? ".activation_scale"
                                                                                           : ".input_scale");
  const TensorView& t = Need(st, name, "activation_scheme static gives every FP8 linear an input scale");
  const float value = t.numel() == 1 ? ToFloat32(t)[0] : 0.0f;
  if (!(value > 0) || !std::isfinite(value))
    Fail("{}: tensor '{}' is not one positive scale", st.path().string(), name);
  return InputQuant{ParseScheme("fp8_e4m3:tensor:scale=f32"), value};
}

}  // namespace lowbit
