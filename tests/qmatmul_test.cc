// The fused quantized matmul kernels against the scalar reference, for every weight format the
// quantizers produce, on every SIMD target this CPU runs, with ragged groups and token tails.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>

#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/qgemm_int8.h"
#include "kernels/qmatmul.h"
#include "kernels/qmatmul_bf16.h"
#include "kernels/qmatmul_int8.h"
#include "formats/codec.h"
#include "formats/minifloat.h"
#include "quant/rtn.h"
#include "test_util.h"

namespace lowbit {
namespace {

using testing_util::ForEachTarget;

std::vector<float> Gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// |a - b| relative to sum |w| |x| of the row: float accumulation order is all that may differ.
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, double tolerance,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tolerance) << what << " at " << i;
}

constexpr const char* kFusedSchemes[] = {
    "int8", "int8:g128", "int8:g32:asym", "int4", "int4:g32", "int4:g64:asym", "int4:channel", "int4:g128:asym:zero=f16",
    "int2", "int2:g32:asym", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3:block32x64", "mxfp8_e4m3", "mxfp4", "nvfp4", "nf4",
    "fp4_e2m1", "ternary", "mxint8", "fp16", "bf16", "fp32",
    // codes that straddle bytes (3, 5, 6, 7 bits): 8 or 16 lanes per chunk
    "int3:g128", "int3:g16", "int5:g32:asym", "int6:g16", "int6:channel", "int7:g64", "fp6_e2m3", "fp6_e3m2",
    "mxfp6_e2m3", "mxfp6_e3m2:g16"};

bool StraddlesBytes(const QuantizedTensor& q) {
  const int bits = q.scheme().element->bits;
  return bits == 3 || bits == 5 || bits == 6 || bits == 7;
}

// Targets of 4 float lanes: a chunk of codes that straddle bytes is not whole bytes there, so such
// weights take the row-decode path.
bool NarrowTarget(const std::string& target) {
  return target == "SSE2" || target == "SSSE3" || target == "SSE4" || target == "EMU128" || target == "SCALAR";
}

TEST(QuantDotRows, MatchesReferenceForEveryFormatOnEveryTarget) {
  const size_t rows = 37, n_tokens = 6;
  // 320: a ragged last group of 64 at g128; 304: a ragged last group of 16 at g32 (one chunk per group)
  for (const size_t cols : {size_t{256}, size_t{320}, size_t{304}}) {
    const std::vector<float> w = Gaussian(rows * cols, 1), x = Gaussian(n_tokens * cols, 2);
    for (const char* spec : kFusedSchemes) {
      const QuantizedTensor q = QuantizeRtn(w, rows, cols, ParseScheme(spec), "w");
      std::vector<float> want(n_tokens * rows);
      QuantDotRowsRef(q, x.data(), n_tokens, 0, rows, want.data(), rows);
      double magnitude = 0;
      for (float v : want) magnitude = std::max(magnitude, std::fabs(static_cast<double>(v)));
      ForEachTarget([&](const std::string& target) {
        const std::string what = fmt::format("{} cols {} on {}", spec, cols, target);
        if (StraddlesBytes(q) && NarrowTarget(target)) return;
        ASSERT_TRUE(HasFusedKernel(q)) << what;
        std::vector<float> got(n_tokens * rows, NAN);
        const QuantInput in = PrepareQuantInput(q, x.data(), n_tokens);
        QuantDotRows(q, in, 0, rows, got.data(), rows);
        ExpectClose(got, want, 2e-5 * (magnitude + 1), what);
      });
    }
  }
}

TEST(QuantDotRows, DecodesEveryCodeThatStraddlesBytesExactly) {
  // One-hot activations: each output is one weight times 1, so every code of every width must come
  // out as the format's value times its scale: FP6, moved bit by bit into fp16, to the bit; integers,
  // whose offset or zero point the kernel adds as a separate bias, to float rounding. The last row
  // ends within 16 bytes of the codes' end (the padded copy).
  const size_t cols = 64;
  for (const char* spec : {"fp6_e2m3", "fp6_e3m2", "mxfp6_e2m3", "int3:g16", "int5:g32:asym", "int6:channel", "int7:g64"}) {
    QuantizedTensor q(ParseScheme(spec), 1, 1);
    const int bits = q.scheme().element->bits;
    const size_t codes = size_t{1} << bits, rows = codes * 2;
    q = QuantizedTensor(q.scheme(), rows, cols);
    for (size_t r = 0; r < rows; ++r)  // every code in every column position
      for (size_t c = 0; c < cols; ++c)
        WriteCode(q.codes().data() + r * q.row_bytes(), c, bits, static_cast<uint32_t>((r * 7 + c * 3) % codes));
    for (uint64_t cell = 0; cell < q.grid().cells(); ++cell) {  // powers of two: every scale type holds them
      q.SetScale(cell, std::ldexp(1.0f, static_cast<int>(cell % 5) - 2));
      if (q.scheme().asymmetric()) q.SetZero(cell, static_cast<float>(cell % codes));
    }
    const std::vector<float> dense = q.Dequantize();
    const bool minifloat = q.scheme().element->minifloat != nullptr;
    ForEachTarget([&](const std::string& target) {
      if (NarrowTarget(target)) return;
      const std::string what = fmt::format("{} on {}", spec, target);
      ASSERT_TRUE(HasFusedKernel(q)) << what;
      for (const size_t c : {size_t{0}, size_t{5}, size_t{31}, size_t{63}}) {
        std::vector<float> x(cols, 0.0f), got(rows, NAN);
        x[c] = 1.0f;
        const QuantInput in = PrepareQuantInput(q, x.data(), 1);
        QuantDotRows(q, in, 0, rows, got.data(), rows);
        for (size_t r = 0; r < rows; ++r) {
          const float want = dense[r * cols + c];
          if (minifloat) ASSERT_EQ(got[r], want) << what << " row " << r << " col " << c;
          else ASSERT_NEAR(got[r], want, 1e-6f * (std::fabs(want) + 1)) << what << " row " << r << " col " << c;
        }
      }
    });
  }
}

TEST(QuantDotRows, ReferenceEqualsDequantizedDenseProduct) {
  // The reference itself against an independent route: dequantize the whole tensor, plain loops.
  const size_t rows = 5, cols = 96;
  const std::vector<float> w = Gaussian(rows * cols, 3), x = Gaussian(2 * cols, 4);
  const QuantizedTensor q = QuantizeRtn(w, rows, cols, ParseScheme("int4:g32:asym"), "w");
  const std::vector<float> dense = q.Dequantize();
  std::vector<float> got(2 * rows);
  QuantDotRowsRef(q, x.data(), 2, 0, rows, got.data(), rows);
  for (size_t t = 0; t < 2; ++t)
    for (size_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (size_t i = 0; i < cols; ++i) sum += static_cast<double>(dense[r * cols + i]) * x[t * cols + i];
      EXPECT_NEAR(got[t * rows + r], sum, 1e-4);
    }
}

TEST(MatMul, QuantizedAgreesWithReferenceForDecodeAndPrefillBatches) {
  const size_t rows = 83, cols = 384;  // 41 or 42 rows a thread: a GEMM panel of 36 and a short one
  const std::vector<float> w = Gaussian(rows * cols, 5);
  ThreadPool pool(2);
  for (const char* spec : {"int4:g128", "int3:g128", "fp6_e2m3", "fp6_e3m2", "nf4:g64", "bf16", "fp8_e4m3", "mxint8"}) {
    Linear linear;
    linear.weight = QuantizeRtn(w, rows, cols, ParseScheme(spec), "w");
    const QuantizedTensor& q = std::get<QuantizedTensor>(linear.weight);
    for (const size_t n_tokens : {size_t{1}, size_t{7}, size_t{33}, size_t{70}})
      for (const Activations mode : {Activations::kExact, Activations::kFast}) {
        const std::vector<float> x = Gaussian(n_tokens * cols, 6);
        std::vector<float> got(n_tokens * rows), want(n_tokens * rows);
        MatMul(linear, x.data(), n_tokens, got.data(), pool, mode);
        QuantDotRowsRef(q, x.data(), n_tokens, 0, rows, want.data(), rows);
        double magnitude = 0;
        for (float v : want) magnitude = std::max(magnitude, std::fabs(static_cast<double>(v)));
        // Fast mode may round activations to int8 blocks (int4 with VNNI) or, decoding bf16 or FP8
        // weights, to bf16: about 2% of the largest output here at worst. Exact mode, and the fp32 GEMM that
        // takes 9+ tokens of 16-bit weights, differ from the reference by float rounding only.
        const bool low_precision = mode == Activations::kFast && (HasInt8DotKernel(q) || (HasBf16DotKernel(q) && n_tokens <= 8));
        ExpectClose(got, want, low_precision ? 2e-2 * magnitude : 1e-3,
                    fmt::format("{} tokens {} {}", spec, n_tokens, mode == Activations::kFast ? "fast" : "exact"));
      }
  }
}

TEST(MatMul, SharedInputGivesEachLinearTheProductItsOwnCallGives) {
  // q / k / v and gate / up in one pass: the same numbers as one MatMul each, for linears of one
  // scheme (whose int8 activations are shared), of other schemes, dense, with a bias, in every batch.
  const size_t cols = 256;
  ThreadPool pool(2);
  const auto make = [&](const char* spec, size_t rows, uint32_t seed) {
    Linear l;
    const std::vector<float> w = Gaussian(rows * cols, seed);
    if (std::string_view(spec) == "dense") l.weight = DenseMatrix{rows, cols, w};
    else l.weight = QuantizeRtn(w, rows, cols, ParseScheme(spec), "w");
    return l;
  };
  std::vector<Linear> linears;
  linears.push_back(make("int8", 67, 11));
  linears.push_back(make("int8", 29, 12));
  linears.push_back(make("int4:g32", 40, 13));
  linears.back().bias = Gaussian(40, 14);
  linears.push_back(make("int8", 33, 15));  // shares the first's activations past a linear of another layout
  linears.push_back(make("bf16", 21, 16));
  linears.push_back(make("dense", 17, 17));
  linears.push_back(make("fp6_e3m2", 9, 18));
  for (const size_t n_tokens : {size_t{1}, size_t{5}, size_t{12}})
    for (const Activations mode : {Activations::kExact, Activations::kFast}) {
      const std::vector<float> x = Gaussian(n_tokens * cols, 19);
      std::vector<std::vector<float>> got, want;
      std::vector<LinearOutput> outputs;
      for (const Linear& l : linears) {
        want.emplace_back(n_tokens * l.rows());
        MatMul(l, x.data(), n_tokens, want.back().data(), pool, mode);
        got.emplace_back(n_tokens * l.rows(), -1.0f);
      }
      for (size_t i = 0; i < linears.size(); ++i) outputs.push_back({linears[i], got[i].data()});
      MatMulShared(outputs, x.data(), n_tokens, pool, mode);
      // Integer dots are exact whatever rows a thread takes; fp32 and bf16 dots sum a row in an order
      // that depends on where the thread's rows start.
      for (size_t i = 0; i < linears.size(); ++i)
        ExpectClose(got[i], want[i], 1e-4, fmt::format("linear {}, {} tokens", i, n_tokens));
      for (const size_t integer : {0, 1, 3}) EXPECT_EQ(got[integer], want[integer]) << n_tokens << " tokens";
    }
}

TEST(Int8Activations, SharedOnlyBetweenWeightsOfOneLayout) {
  const std::vector<float> w = Gaussian(8 * 512, 20);
  const auto q = [&](const char* spec, size_t cols = 512) {
    return QuantizeRtn(std::span(w).first(8 * cols), 8, cols, ParseScheme(spec), "w");
  };
  EXPECT_TRUE(SameInt8Activations(q("int8"), q("int8")));
  EXPECT_TRUE(SameInt8Activations(q("int4:g32"), q("int4:g32")));
  EXPECT_FALSE(SameInt8Activations(q("int8"), q("int8:g128")));  // one scale per row vs per 128
  EXPECT_FALSE(SameInt8Activations(q("int8"), q("int8", 256)));
  EXPECT_FALSE(SameInt8Activations(q("int4:g32"), q("int8:g32")));  // bit planes
  EXPECT_FALSE(SameInt8Activations(q("mxfp4"), q("nvfp4")));         // blocks of 32 vs 16
  EXPECT_FALSE(SameInt8Activations(q("int4:g32"), q("iq4_nl")));     // the level table
}

}  // namespace
}  // namespace lowbit

namespace lowbit {
namespace {

TEST(Int8DotRows, VnniAndAvx2MatchIntegerReferenceAndStayCloseToExact) {
  const size_t rows = 19, cols = 512, n_tokens = 5;
  const std::vector<float> w = Gaussian(rows * cols, 7), x = Gaussian(n_tokens * cols, 8);
  for (const char* spec : {"int4", "int4:g256:asym", "int4:channel", "int4:g32", "int4:g64:asym", "int8", "int8:g64:asym",
                           "int8:g32", "int8:g16", "int2:g16:asym", "int2:g32", "int2:g64:asym", "int2:g128", "int2:g512",
                           "int3:g128", "int3:g16", "int5:g32:asym", "int6:g16", "int7:g64", "int4:g16",
                           // K-quant storage: fp32 scales, fp32 zero-points
                           "int4:g32:asym:scale=f32:zero=f32", "int6:g16:scale=f32", "int2:g16:asym:scale=f32:zero=f32",
                           // half-precision scales and zero-points
                           "int4:g32:asym:scale=bf16:zero=f16", "int8:g64:asym:zero=bf16", "int3:g128:scale=bf16",
                           // level tables: codes through a byte shuffle
                           "mxfp4", "nvfp4", "fp4_e2m1", "iq4_nl", "fp6_e2m3", "mxfp6_e2m3", "ternary",
                           // two's complement 8-bit codes (OCP MXINT8, E8M0 scales): the sign bit flipped
                           "mxint8",
                           // NF4: levels rounded to int8 (below)
                           "nf4:g64", "nf4:g32:scale=f16"}) {
    const QuantizedTensor q = QuantizeRtn(w, rows, cols, ParseScheme(spec), "w");
    ASSERT_TRUE(Int8DotKernelFits(q)) << spec;
    const Int8Activations a = QuantizeActivationsInt8(q, x.data(), n_tokens);
    const Int8Activations a_ref = QuantizeActivationsInt8Ref(q, x.data(), n_tokens);
    EXPECT_TRUE(std::equal(a.values.begin(), a.values.end(), a_ref.values.begin(), a_ref.values.end())) << spec;
    EXPECT_EQ(a.scales, a_ref.scales) << spec;
    EXPECT_EQ(a.group_sums, a_ref.group_sums) << spec;
    EXPECT_EQ(a.layout.shared_blocks, 1u) << spec;  // one activation scale per block (K-quants: gguf_repack_test)
    std::vector<float> reference(n_tokens * rows), exact(n_tokens * rows);
    Int8DotRowsRef(q, a, 0, rows, reference.data(), rows);
    QuantDotRowsRef(q, x.data(), n_tokens, 0, rows, exact.data(), rows);
    double magnitude = 0;
    for (float v : exact) magnitude = std::max(magnitude, std::fabs(static_cast<double>(v)));
    // int8 activations in blocks: about 0.4% error per input, far less on the sum.
    ExpectClose(reference, exact, 1e-2 * magnitude, std::string(spec) + " int8 activations vs exact");
    if (HasInt8DotKernelAvx2(q)) {  // the AVX2 form (2, 4 and 8-bit codes), wherever the CPU has AVX2
      const Int8Activations a_avx2 = QuantizeActivationsInt8Avx2(q, x.data(), n_tokens);
      EXPECT_TRUE(std::equal(a_avx2.values.begin(), a_avx2.values.end(), a_ref.values.begin(), a_ref.values.end())) << spec;
      EXPECT_EQ(a_avx2.scales, a_ref.scales) << spec;
      EXPECT_EQ(a_avx2.group_sums, a_ref.group_sums) << spec;
      std::vector<float> avx2(n_tokens * rows, NAN);
      Int8DotRowsAvx2(q, a, 1, rows, avx2.data(), rows);
      for (size_t i = 0; i < avx2.size(); ++i)
        if (i % rows < 1) EXPECT_TRUE(std::isnan(avx2[i])) << spec << " at " << i;
        else ASSERT_NEAR(avx2[i], reference[i], 1e-5 * magnitude) << spec << " AVX2 vs reference at " << i;
    }
    if (!HasInt8GemmKernel(q)) continue;  // no VNNI on this CPU: the reference and AVX2 are all there is
    std::vector<float> got(n_tokens * rows, NAN);
    Int8DotRows(q, a, 0, rows, got.data(), rows);
    ExpectClose(got, reference, 1e-5 * magnitude, std::string(spec) + " VNNI vs reference");
    // A range of rows not from 0 (a thread's share): the same values there, nothing written before.
    std::vector<float> part(n_tokens * rows, NAN);
    Int8DotRows(q, a, 2, rows, part.data(), rows);
    for (size_t i = 0; i < part.size(); ++i)
      if (i % rows < 2) EXPECT_TRUE(std::isnan(part[i])) << spec << " at " << i;
      else EXPECT_EQ(part[i], got[i]) << spec << " at " << i;
    // The prefill GEMM: 37 tokens (two tiles of 16 and a padded one), 19 rows (two bands of 8 and
    // single rows), rows 3.. (a thread's share, nothing written before it).
    const size_t many = 37;
    const std::vector<float> xs = Gaussian(many * cols, 9);
    const Int8Activations tokens = QuantizeActivationsInt8(q, xs.data(), many);
    std::vector<float> tokens_ref(many * rows), gemm(many * rows, NAN);
    Int8DotRowsRef(q, tokens, 0, rows, tokens_ref.data(), rows);
    Int8TokenTiles tiles(tokens);
    tiles.Fill(tokens, 0, tiles.tiles());
    Int8GemmRows(q, tiles, 3, rows, gemm.data(), rows);
    double tokens_magnitude = 0;
    for (float v : tokens_ref) tokens_magnitude = std::max(tokens_magnitude, std::fabs(static_cast<double>(v)));
    for (size_t i = 0; i < gemm.size(); ++i)
      if (i % rows < 3) EXPECT_TRUE(std::isnan(gemm[i])) << spec << " at " << i;
      else ASSERT_NEAR(gemm[i], tokens_ref[i], 1e-5 * tokens_magnitude) << spec << " GEMM vs reference at " << i;
  }
  // The AVX2 kernel folds two chunks of two or four blocks at a time: an odd count of chunks (576 / 64
  // codes, 384 / 128) leaves the last to the one-chunk loop.
  for (const auto& [spec, odd_cols] : {std::pair{"int8:g32", 576}, {"int5:g32:asym", 576},
                                       {"int8:g32:asym:zero=bf16", 576}, {"int4:g32", 384}, {"iq4_nl", 384}}) {
    const std::vector<float> w_odd = Gaussian(rows * odd_cols, 10), x_odd = Gaussian(n_tokens * odd_cols, 11);
    const QuantizedTensor q = QuantizeRtn(w_odd, rows, odd_cols, ParseScheme(spec), "w");
    if (!HasInt8DotKernelAvx2(q)) continue;  // a CPU without AVX2
    const Int8Activations a = QuantizeActivationsInt8(q, x_odd.data(), n_tokens);
    std::vector<float> reference(n_tokens * rows), avx2(n_tokens * rows, NAN);
    Int8DotRowsRef(q, a, 0, rows, reference.data(), rows);
    Int8DotRowsAvx2(q, a, 0, rows, avx2.data(), rows);
    double magnitude = 0;
    for (float v : reference) magnitude = std::max(magnitude, std::fabs(static_cast<double>(v)));
    ExpectClose(avx2, reference, 1e-5 * magnitude, fmt::format("{} AVX2, {} columns", spec, odd_cols));
  }
  // E8M0 scales decoded inside the kernel, 0 (2^-127, a subnormal) included: every group at one
  // exponent, so the outputs are on one scale. Near 2^-127 the products are subnormal in fp32
  // (about 16 bits left), hence the looser bound there.
  for (const uint8_t e : {0, 1, 127, 200}) {
    QuantizedTensor q = QuantizeRtn(w, rows, cols, ParseScheme("mxfp4"), "w");
    std::fill(q.scale_bytes().begin(), q.scale_bytes().end(), e);
    const Int8Activations a = QuantizeActivationsInt8(q, x.data(), n_tokens);
    std::vector<float> reference(n_tokens * rows), got(n_tokens * rows, NAN);
    Int8DotRowsRef(q, a, 0, rows, reference.data(), rows);
    if (!HasInt8DotKernel(q)) break;
    Int8DotRows(q, a, 0, rows, got.data(), rows);
    double magnitude = 0;
    for (float v : reference) magnitude = std::max(magnitude, std::fabs(static_cast<double>(v)));
    ASSERT_GT(magnitude, 0) << int{e};
    ExpectClose(got, reference, (e <= 1 ? 1e-3 : 1e-5) * magnitude, fmt::format("mxfp4 scales 2^({} - 127)", e));
  }
  // UE4M3 scales (NVFP4) decoded inside the kernel: every code but NaN's, subnormals and codes
  // with the unused top bit set included, group after group.
  {
    QuantizedTensor q = QuantizeRtn(w, rows, cols, ParseScheme("nvfp4"), "w");
    std::span<uint8_t> codes = q.scale_bytes();
    for (size_t i = 0, code = 0; i < codes.size(); ++i, code = (code + 1) % 256) {
      if ((code & 0x7F) == 0x7F) ++code;
      codes[i] = static_cast<uint8_t>(code);
    }
    const Int8Activations a = QuantizeActivationsInt8(q, x.data(), n_tokens);
    std::vector<float> reference(n_tokens * rows), got(n_tokens * rows, NAN);
    Int8DotRowsRef(q, a, 0, rows, reference.data(), rows);
    if (HasInt8DotKernel(q)) {
      Int8DotRows(q, a, 0, rows, got.data(), rows);
      double magnitude = 0;
      for (float v : reference) magnitude = std::max(magnitude, std::fabs(static_cast<double>(v)));
      ExpectClose(got, reference, 1e-5 * magnitude, "nvfp4 with every UE4M3 scale code");
    }
  }
  // Groups that do not tile a 64-byte load of codes are not for this kernel.
  EXPECT_FALSE(Int8DotKernelFits(QuantizeRtn(w, rows, cols, ParseScheme("int4:g96"), "w")));
  EXPECT_FALSE(Int8DotKernelFits(QuantizeRtn(w, rows, cols, ParseScheme("int8:g8"), "w")));
  // NF4's levels are rounded to 127ths of its largest, round(127 v) + 127 by hand from the QLoRA
  // table (-1, -0.6962, -0.5251, ..., 0.7230, 1); every exact table keeps its levels unrounded.
  const Int8DotLayout nf4 = QuantizeActivationsInt8Ref(QuantizeRtn(w, rows, cols, ParseScheme("nf4:g64"), "w"), x.data(), 1).layout;
  EXPECT_TRUE(nf4.rounded && nf4.lookup);
  EXPECT_FLOAT_EQ(nf4.step, 1.0f / 127);
  EXPECT_EQ(nf4.offset, -127);
  const std::array<uint8_t, 16> nf4_levels = {0, 39, 60, 77, 91, 104, 115, 127, 137, 147, 158, 170, 183, 198, 219, 254};
  EXPECT_TRUE(std::equal(nf4_levels.begin(), nf4_levels.end(), nf4.level.begin()));
  EXPECT_FALSE(QuantizeActivationsInt8Ref(QuantizeRtn(w, rows, cols, ParseScheme("iq4_nl"), "w"), x.data(), 1).layout.rounded);
  // Levels that are not whole numbers of one step within a byte's range, and that rounding would
  // move by more than 1/16 of their gaps.
  for (const char* spec : {"fp8_e4m3", "fp6_e3m2", "mxfp8_e5m2"})
    EXPECT_FALSE(Int8DotKernelFits(QuantizeRtn(w, rows, cols, ParseScheme(spec), "w"))) << spec;
}

}  // namespace
}  // namespace lowbit

namespace lowbit {
namespace {

// 1088 columns: a full 1024-column slice and a short one (partial dots added to y); 23 rows: a
// row block, tiles of 4 and single rows; 261 tokens: a full 256-token chunk and a tail.
TEST(Bf16DotRows, MatchesReferenceForDecodeAndPrefillTiles) {
  // FP8 and FP6: widened to bf16 in registers; their scales per row, per tensor, per 32 columns (MX, the
  // E8M0 scale of each 32-column partial dot) or per 64 x 128 block
  for (const char* spec : {"bf16", "fp8_e4m3", "fp8_e4m3:tensor", "fp6_e3m2", "fp6_e2m3:tensor", "mxfp8_e4m3",
                           "mxfp6_e3m2", "fp6_e3m2:g64:scale=f16", "fp8_e4m3:block64x128:scale=f32", "fp8_e5m2",
                           "mxfp8_e5m2"}) {
    SCOPED_TRACE(spec);
    for (const size_t cols : {size_t{256}, size_t{1088}}) {
      for (const size_t n_tokens : {size_t{1}, size_t{6}, size_t{70}, size_t{261}}) {
        const size_t rows = 23;
        const std::vector<float> w = Gaussian(rows * cols, 9);
        const QuantizedTensor q = QuantizeRtn(w, rows, cols, ParseScheme(spec), "w");
        const std::vector<float> x = Gaussian(n_tokens * cols, 10);
        const AlignedVector<uint16_t> xb = ToBf16Activations(x.data(), n_tokens, cols);
        std::vector<float> reference(n_tokens * rows), exact(n_tokens * rows);
        Bf16DotRowsRef(q, xb.data(), n_tokens, 0, rows, reference.data(), rows);
        QuantDotRowsRef(q, x.data(), n_tokens, 0, rows, exact.data(), rows);
        ExpectClose(reference, exact, 0.5 * std::sqrt(cols / 256.0), "bf16 activations vs fp32 activations");  // bf16: 2^-9
        if (!HasBf16DotKernel(q)) continue;  // no AVX512_BF16 here
        std::vector<float> got(n_tokens * rows, NAN);
        const Bf16Input in = PrepareBf16Input(q, x.data(), n_tokens);
        Bf16DotRows(q, in, 0, 9, got.data(), rows);  // two threads' shares: scales from row 9 on
        Bf16DotRows(q, in, 9, rows, got.data(), rows);
        ExpectClose(got, reference, 1e-4 * std::sqrt(cols / 256.0),
                    "vdpbf16ps vs reference, cols " + std::to_string(cols) + " tokens " + std::to_string(n_tokens));
      }
    }
  }
}

// Every finite FP8 code, through the kernel's widening to bf16: with one-hot activations each output
// is one code's value times its row's scale, which must be the format's value exactly (OCP FP8
// tables: E4M3 subnormals m * 2^-9, normals up to 448; E5M2 subnormals m * 2^-16, normals up to
// 57344; both signs).
TEST(Bf16DotRows, WidensEveryFp8CodeExactly) {
  struct Case {
    const char* spec;
    const MiniFloat& format;
    size_t subnormals;
    float smallest, largest;
  };
  for (const Case& c : {Case{"fp8_e4m3", kE4M3, 14, std::ldexp(1.0f, -9), 448.0f},
                        Case{"fp8_e5m2", kE5M2, 6, std::ldexp(1.0f, -16), 57344.0f}}) {
    SCOPED_TRACE(c.spec);
    const size_t rows = 2, cols = 256;
    QuantizedTensor q(ParseScheme(c.spec), rows, cols);
    if (!HasBf16DotKernel(q)) GTEST_SKIP() << "no AVX512_BF16 here";
    const auto finite = [&](size_t code) { return std::isfinite(DecodeMiniFloat(c.format, static_cast<uint32_t>(code))); };
    for (size_t r = 0; r < rows; ++r) {
      for (size_t k = 0; k < cols; ++k) q.codes()[r * q.row_bytes() + k] = static_cast<uint8_t>(finite(k) ? k : 0);
      q.SetScale(r, r == 0 ? 1.0f : 0.5f);
    }
    std::vector<float> x(cols * cols, 0.0f);
    for (size_t t = 0; t < cols; ++t) x[t * cols + t] = 1.0f;  // token t picks column t
    std::vector<float> y(cols * rows, NAN);
    Bf16DotRows(q, PrepareBf16Input(q, x.data(), cols), 0, rows, y.data(), rows);
    size_t subnormals = 0;
    float largest = 0;
    for (size_t k = 0; k < cols; ++k) {
      if (!finite(k)) continue;
      const float value = DecodeMiniFloat(c.format, static_cast<uint32_t>(k));
      EXPECT_EQ(y[k * rows], value) << "code " << k;
      EXPECT_EQ(y[k * rows + 1], 0.5f * value) << "code " << k;
      subnormals += value != 0 && std::fabs(value) < std::ldexp(1.0f, 1 - c.format.bias);
      largest = std::max(largest, y[k * rows]);
    }
    EXPECT_EQ(subnormals, c.subnormals);
    EXPECT_EQ(DecodeMiniFloat(c.format, 0x01), c.smallest);
    EXPECT_EQ(largest, c.largest);
  }
}

// Every FP6 code at every position of a 64-column block (the byte permutation and shifts differ per
// lane): column c of row r holds code (c + r) % 64, so each of the 64 codes meets each lane once
// over 64 rows; one-hot activations read them back, each must be its OCP MX value times the row's
// scale (E3M2: subnormals m/16, max 28; E2M3: subnormals m/8, max 7.5; both signs).
TEST(Bf16DotRows, WidensEveryFp6CodeAtEveryLaneExactly) {
  for (const MiniFloat* format : {&kE3M2, &kE2M3}) {
    SCOPED_TRACE(format->name);
    const size_t rows = 64, cols = 128;
    QuantizedTensor q(ParseScheme(format->name), rows, cols);
    if (!HasBf16DotKernel(q)) GTEST_SKIP() << "no AVX512_BF16 / AVX512_VBMI here";
    for (size_t r = 0; r < rows; ++r) {
      for (size_t c = 0; c < cols; ++c) WriteCode(q.codes().data() + r * q.row_bytes(), c, 6, (c + r) % 64);
      q.SetScale(r, r % 2 ? 0.25f : 1.0f);
    }
    std::vector<float> x(cols * cols, 0.0f);
    for (size_t t = 0; t < cols; ++t) x[t * cols + t] = 1.0f;
    std::vector<float> y(cols * rows, NAN);
    Bf16DotRows(q, PrepareBf16Input(q, x.data(), cols), 0, rows, y.data(), rows);
    for (size_t r = 0; r < rows; ++r)
      for (size_t c = 0; c < cols; ++c) {
        const uint32_t code = (c + r) % 64;
        ASSERT_EQ(y[c * rows + r], (r % 2 ? 0.25f : 1.0f) * DecodeMiniFloat(*format, code))
            << "row " << r << " column " << c << " code " << code;
      }
  }
  EXPECT_EQ(DecodeMiniFloat(kE3M2, 0x01), 0.0625f);
  EXPECT_EQ(DecodeMiniFloat(kE3M2, 0x1F), 28.0f);
  EXPECT_EQ(DecodeMiniFloat(kE2M3, 0x01), 0.125f);
  EXPECT_EQ(DecodeMiniFloat(kE2M3, 0x3F), -7.5f);
}

}  // namespace
}  // namespace lowbit
