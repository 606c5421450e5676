// Row ranges of quantized tensors and stacks of them (quant/row_slices.h): slicing a tensor and stacking
// the slices gives it back byte for byte in every storage whose scale cells the cuts respect; cuts through
// cells and stacks of tensors that cannot be one matrix are errors naming what they were given.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "quant/row_slices.h"
#include "quant/rtn.h"
#include "test_util.h"

namespace lowbit {
namespace {

QuantizedTensor Random(const std::string& scheme, uint64_t rows, uint64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> w(rows * cols);
  for (float& v : w) v = n(rng);
  return QuantizeRtn(w, rows, cols, ParseScheme(scheme));
}

bool Same(const QuantizedTensor& a, const QuantizedTensor& b) {
  return a.scheme().ToString() == b.scheme().ToString() && a.rows() == b.rows() &&
         std::ranges::equal(a.codes(), b.codes()) && std::ranges::equal(a.scale_bytes(), b.scale_bytes()) &&
         std::ranges::equal(a.zero_bytes(), b.zero_bytes()) && a.tensor_scale() == b.tensor_scale();
}

using testing_util::ExpectError;

TEST(RowSlices, SlicesStackBackToTheTensor) {
  // q/k/v-like cuts (32, 16, 16 rows) of channel, group (integer and float zeros), block, tensor-wide and
  // two-level (NVFP4) scales, and 16-bit plain rows.
  for (const char* scheme : {"int8:channel", "int4:g32:asym", "int3:g16:asym:zero=f16", "fp8_e4m3:block16x32:scale=f32",
                             "int8:tensor", "nvfp4", "mxfp6_e2m3", "bf16"}) {
    SCOPED_TRACE(scheme);
    const QuantizedTensor whole = Random(scheme, 64, 64, 3);
    const QuantizedTensor q = SliceRows(whole, 0, 32, "qkv"), k = SliceRows(whole, 32, 16, "qkv"),
                          v = SliceRows(whole, 48, 16, "qkv");
    // A slice decodes to the same values as its rows of the whole.
    const std::vector<float> all = whole.Dequantize(), middle = k.Dequantize();
    EXPECT_TRUE(std::equal(middle.begin(), middle.end(), all.begin() + 32 * 64));
    const QuantizedTensor* parts[] = {&q, &k, &v};
    EXPECT_TRUE(Same(StackRows(parts, "qkv"), whole));
  }
}

TEST(RowSlices, CutsThroughCellsAndMismatchedPartsAreNamedErrors) {
  const QuantizedTensor blocks = Random("fp8_e4m3:block16x32:scale=f32", 64, 64, 4);
  ExpectError([&] { (void)SliceRows(blocks, 8, 16, "model.layers.0.self_attn.qkv_proj"); }, {"qkv_proj: rows 8..24"});
  const QuantizedTensor a = Random("int4:g32", 16, 64, 5), b = Random("int4:g16", 16, 64, 6),
                        c = Random("int8:tensor", 16, 64, 7), d = Random("int8:tensor", 16, 64, 8),
                        e = Random("nvfp4", 16, 64, 9), f = Random("nvfp4", 16, 64, 10), g = Random("int4:g32", 16, 32, 11);
  const auto stack = [](std::vector<const QuantizedTensor*> parts) { (void)StackRows(parts, "gate_up_proj"); };
  ExpectError([&] { stack({&a, &b}); }, {"one scheme and width"});
  ExpectError([&] { stack({&a, &g}); }, {"one scheme and width"});
  ExpectError([&] { stack({&c, &d}); }, {"tensor-wide scale"});
  ExpectError([&] { stack({&e, &f}); }, {"tensor scale"});
  const QuantizedTensor h = Random("fp8_e4m3:block16x32:scale=f32", 8, 64, 12), i = Random("fp8_e4m3:block16x32:scale=f32", 8, 64, 13);
  ExpectError([&] { stack({&blocks, &h, &i}); }, {"part 1 has 8 rows"});
}

}  // namespace
}  // namespace lowbit
