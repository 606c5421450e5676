// The paged KV cache in every dtype against the values written, the KIVI recent window, and the
// blocked online-softmax attention against the two-pass reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"
#include "kernels/dot.h"
#include "model/attention.h"
#include "model/kv_cache.h"

namespace lowbit {
namespace {

ModelConfig SmallConfig() {
  ModelConfig c;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 32;
  c.dim = 128;
  return c;
}

struct Filled {
  KvCache cache;
  std::vector<float> k, v;  // [layer][pos][kv_dim] as written
};

// One position per step, as decoding writes them; k and v are [layer][pos][kv_dim].
void WriteAll(KvCache& cache, const std::vector<float>& k, const std::vector<float>& v, size_t positions) {
  const ModelConfig c = SmallConfig();
  for (size_t p = 0; p < positions; ++p)
    for (size_t l = 0; l < c.n_layers; ++l) {
      const size_t at = (l * positions + p) * c.kv_dim();
      cache.Write(l, p, &k[at], &v[at]);
      if (l + 1 == c.n_layers) cache.Advance(1);
    }
}

Filled Fill(KvDtype dtype, size_t positions, uint32_t seed, std::vector<float> k_scales = {}) {
  const ModelConfig c = SmallConfig();
  KvCacheOptions o;
  o.dtype = dtype;
  o.k_scales = k_scales;
  o.block_tokens = 16;
  o.recent_tokens = 16;
  Filled f{KvCache(c, positions, o), {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  f.k.resize(c.n_layers * positions * c.kv_dim());
  f.v.resize(f.k.size());
  for (float& x : f.k) x = normal(rng);
  for (float& x : f.v) x = normal(rng);
  WriteAll(f.cache, f.k, f.v, positions);
  return f;
}

// Largest |read - written| over every position of every head, as the last token reads them.
std::pair<double, double> MaxReadError(const Filled& f, size_t positions, size_t first, size_t last) {
  const ModelConfig c = SmallConfig();
  std::vector<float> scratch(16 * c.head_dim);
  double k_err = 0, v_err = 0;
  for (size_t l = 0; l < c.n_layers; ++l)
    for (size_t h = 0; h < c.n_kv_heads; ++h)
      for (size_t p = first; p < last; ++p) {
        const KvCache::Tile k = f.cache.ReadK(l, h, p, p + 1, positions - 1, scratch.data());
        for (size_t i = 0; i < c.head_dim; ++i)
          k_err = std::max<double>(k_err, std::fabs(k.data[i] - f.k[(l * positions + p) * c.kv_dim() + h * c.head_dim + i]));
        const KvCache::Tile v = f.cache.ReadV(l, h, p, p + 1, positions - 1, scratch.data());
        for (size_t i = 0; i < c.head_dim; ++i)
          v_err = std::max<double>(v_err, std::fabs(v.data[i] - f.v[(l * positions + p) * c.kv_dim() + h * c.head_dim + i]));
      }
  return {k_err, v_err};
}

TEST(KvCache, EveryDtypeReadsBackWithinItsPrecision) {
  // Gaussian values (|x| < ~4.5): bounds are half a step of each format at that range.
  const std::pair<KvDtype, double> cases[] = {
      {KvDtype::kF32, 0.0},     {KvDtype::kF16, 4.5 * 0x1p-11}, {KvDtype::kBF16, 4.5 * 0x1p-8},
      {KvDtype::kFp8E4M3, 0.25}, {KvDtype::kFp8E5M2, 0.5},      {KvDtype::kInt8, 4.5 / 127},
      {KvDtype::kInt4, 9.0 / 15}, {KvDtype::kInt2, 9.0 / 3}};
  const size_t positions = 70;  // four full blocks and a partial one
  for (const auto& [dtype, bound] : cases) {
    const Filled f = Fill(dtype, positions, 1);
    const auto [k_err, v_err] = MaxReadError(f, positions, 0, positions);
    EXPECT_LE(k_err, bound) << KvDtypeName(dtype);
    EXPECT_LE(v_err, bound) << KvDtypeName(dtype);
    if (dtype != KvDtype::kF32) {
      EXPECT_GT(k_err + v_err, 0.0) << KvDtypeName(dtype) << " lost nothing?";
    }
  }
}

TEST(KvCache, KiviKeepsTheRecentWindowExactToFp16AndHistoryCompact) {
  const size_t positions = 70;
  const Filled f = Fill(KvDtype::kInt4, positions, 2);
  // Reader at 69 with recent 16, block 16: positions >= 48 are read from the fp16 window.
  const auto [k_recent, v_recent] = MaxReadError(f, positions, 48, positions);
  EXPECT_LE(k_recent, 4.5 * 0x1p-11);
  EXPECT_LE(v_recent, 4.5 * 0x1p-11);
  const auto [k_old, v_old] = MaxReadError(f, positions, 0, 48);
  EXPECT_GT(k_old, 0.01);  // quantized
  // Held bytes: int4 blocks for the history, fp16 rows only for the window.
  const Filled fp16 = Fill(KvDtype::kF16, positions, 2);
  EXPECT_LT(f.cache.bytes(), fp16.cache.bytes() * 3 / 4);
  EXPECT_LT(f.cache.BytesPerToken(), fp16.cache.BytesPerToken() / 3);
}

// Clear keeps the blocks for reuse; a cleared and refilled cache must read exactly like a fresh
// one (per-layer FP8 scales reset, KIVI blocks requantized) and hold no more memory.
TEST(KvCache, ClearedCacheReusesItsBlocksAndReadsLikeAFreshOne) {
  const size_t positions = 40;
  for (const KvDtype dtype : {KvDtype::kF32, KvDtype::kFp8E4M3, KvDtype::kInt8, KvDtype::kInt4}) {
    Filled reused = Fill(dtype, positions, 3, {0.5f, 4.0f});
    const size_t held = reused.cache.bytes();
    const Filled fresh = Fill(dtype, positions, 4, {0.5f, 4.0f});
    reused.cache.Clear();
    EXPECT_EQ(reused.cache.size(), 0u);
    WriteAll(reused.cache, fresh.k, fresh.v, positions);
    EXPECT_EQ(reused.cache.bytes(), held) << KvDtypeName(dtype);
    std::vector<float> a(16 * 32), b(16 * 32);
    for (size_t l = 0; l < 2; ++l)
      for (size_t h = 0; h < 2; ++h)
        for (size_t p = 0; p < positions; ++p)
          for (const bool key : {true, false}) {
            const KvCache::Tile x = key ? reused.cache.ReadK(l, h, p, p + 1, positions - 1, a.data())
                                        : reused.cache.ReadV(l, h, p, p + 1, positions - 1, a.data());
            const KvCache::Tile y = key ? fresh.cache.ReadK(l, h, p, p + 1, positions - 1, b.data())
                                        : fresh.cache.ReadV(l, h, p, p + 1, positions - 1, b.data());
            for (size_t i = 0; i < 32; ++i)
              ASSERT_EQ(x.data[i], y.data[i]) << KvDtypeName(dtype) << " layer " << l << " pos " << p << " key " << key;
          }
  }
}

// Blocks live in the cache's own arena: a copy (batched decode copies a prefilled cache) must read as
// the original, and positions written to either later must not show in the other.
TEST(KvCache, ACopyReadsAsTheOriginalAndWritesApartFromIt) {
  const size_t positions = 70, shared = 40;  // the copy is taken after 40 positions
  const Filled a = Fill(KvDtype::kInt4, positions, 5), b = Fill(KvDtype::kInt4, positions, 6);
  const ModelConfig c = SmallConfig();
  KvCacheOptions o;
  o.dtype = KvDtype::kInt4;
  o.block_tokens = 16;
  o.recent_tokens = 16;
  KvCache original(c, positions, o);
  const auto write = [&](KvCache& cache, const Filled& from, size_t begin, size_t end) {
    for (size_t p = begin; p < end; ++p) {
      for (size_t l = 0; l < c.n_layers; ++l) {
        const size_t at = (l * positions + p) * c.kv_dim();
        cache.Write(l, p, &from.k[at], &from.v[at]);
      }
      cache.Advance(1);
    }
  };
  write(original, a, 0, shared);
  KvCache copy = original;
  write(original, a, shared, positions);  // the original goes on as a did
  write(copy, b, shared, positions);      // the copy as b did from there
  std::vector<float> x(16 * 32), y(16 * 32), z(16 * 32);
  for (size_t l = 0; l < c.n_layers; ++l)
    for (size_t h = 0; h < c.n_kv_heads; ++h)
      for (size_t p = 0; p < positions; ++p)
        for (const bool key : {true, false}) {
          const auto read = [&](const KvCache& cache, std::vector<float>& scratch) {
            return key ? cache.ReadK(l, h, p, p + 1, positions - 1, scratch.data())
                       : cache.ReadV(l, h, p, p + 1, positions - 1, scratch.data());
          };
          const KvCache::Tile mine = read(original, x), theirs = read(copy, y), as_a = read(a.cache, z);
          for (size_t i = 0; i < c.head_dim; ++i) {
            ASSERT_EQ(mine.data[i], as_a.data[i]) << "layer " << l << " pos " << p << " key " << key;
            const float written = (key ? b.k : b.v)[(l * positions + p) * c.kv_dim() + h * c.head_dim + i];
            if (p >= 48) {  // the copy's own exact window (fp16), b's values
              ASSERT_NEAR(theirs.data[i], written, 4.5 * 0x1p-11) << "pos " << p;
            } else if (p < 32) {  // blocks quantized before the copy: a's
              ASSERT_EQ(theirs.data[i], as_a.data[i]) << "pos " << p;
            }
          }
        }
}

TEST(KvCache, DtypeNamesRoundTripAndUnknownNamesFail) {
  for (const KvDtype d : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16, KvDtype::kFp8E4M3, KvDtype::kFp8E5M2,
                          KvDtype::kInt8, KvDtype::kInt4, KvDtype::kInt2})
    EXPECT_EQ(ParseKvDtype(KvDtypeName(d)), d);
  EXPECT_THROW(ParseKvDtype("int3"), Error);
}

TEST(Attention, BlockedOnlineSoftmaxEqualsTwoPass) {
  const ModelConfig c = SmallConfig();
  // fp32, the 16-bit dtypes, FP8 and int8 are read in place (the kernel widens them in registers
  // and prefetches the next tile), KIVI's int4 / int2 from their codes.
  for (const KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16, KvDtype::kInt8, KvDtype::kInt4,
                              KvDtype::kInt2, KvDtype::kFp8E4M3, KvDtype::kFp8E5M2}) {
    const size_t positions = 70;
    const Filled f = Fill(dtype, positions, 3);
    std::mt19937 rng(4);
    std::normal_distribution<float> normal(0.0f, 2.0f);  // peaked softmax: exercises rescaling
    std::vector<float> q(2 * c.head_dim);
    for (float& x : q) x = normal(rng);
    AttentionScratch scratch;
    // Readers behind the newest position only exist for caches without a recent window (KIVI's
    // window has moved on), so int4 and int2 are read at the last position.
    const bool kivi = dtype == KvDtype::kInt4 || dtype == KvDtype::kInt2;
    // Sliding windows start inside a block (window 5) or blocks back (20); soft-capped scores too; GPT-OSS's
    // sinks (a logit per head in the denominator: the output shrinks by Z / (Z + e^sink), Z the scores' sum).
    const float sinks[] = {2.0f, -1.0f};
    for (const size_t position : kivi ? std::vector<size_t>{69} : std::vector<size_t>{0, 15, 16, 69})
      for (const size_t window : {size_t{0}, size_t{5}, size_t{20}})
        for (const float softcap : {0.0f, 3.0f})
          for (const float* sink : {static_cast<const float*>(nullptr), sinks}) {
            const size_t first = window > 0 && position >= window ? position + 1 - window : 0;
            AttentionQuery query{1, 1, position, q.data(), 2, 1.0f / std::sqrt(32.0f), first, softcap};
            query.sinks = sink;
            std::vector<float> blocked(q.size()), two_pass(q.size());
            AttendBlocked(f.cache, query, scratch, blocked.data());
            AttendTwoPass(f.cache, query, scratch, two_pass.data());
            for (size_t i = 0; i < q.size(); ++i)
              ASSERT_NEAR(blocked[i], two_pass[i], 1e-5) << KvDtypeName(dtype) << " position " << position << " window "
                                                         << window << " cap " << softcap << " sinks " << (sink != nullptr);
            if (sink == nullptr || softcap > 0 || window > 0 || position != 15) continue;
            query.sinks = nullptr;  // the same query without sinks, and Z by hand from the scores
            std::vector<float> plain(q.size()), k_rows(16 * c.head_dim);
            AttendTwoPass(f.cache, query, scratch, plain.data());
            const KvCache::Tile k = f.cache.ReadK(1, 1, 0, 16, position, k_rows.data());
            for (size_t h = 0; h < 2; ++h) {
              std::vector<double> scores(16);
              for (size_t p = 0; p < 16; ++p)
                scores[p] = Dot(&q[h * c.head_dim], k.data + p * k.stride, c.head_dim) / std::sqrt(32.0);
              const double top = *std::max_element(scores.begin(), scores.end());
              double z = 0;
              for (const double s : scores) z += std::exp(s - top);
              const double shrink = z / (z + std::exp(sinks[h] - top));
              for (size_t i = 0; i < c.head_dim; ++i)
                EXPECT_NEAR(blocked[h * c.head_dim + i], plain[h * c.head_dim + i] * shrink, 1e-5) << KvDtypeName(dtype);
            }
          }
    if (kivi) continue;
    // A window of one position sees only the token itself: the output is its V row.
    const AttentionQuery itself{1, 1, 40, q.data(), 1, 0.2f, 40};
    std::vector<float> own(c.head_dim), own_v(16 * c.head_dim);
    AttendBlocked(f.cache, itself, scratch, own.data());
    const KvCache::Tile v40 = f.cache.ReadV(1, 1, 40, 41, 40, own_v.data());
    for (size_t i = 0; i < c.head_dim; ++i) EXPECT_NEAR(own[i], v40.data[i], 1e-6);
    // Position 0 sees only itself: the output is V[0] of that head, as the cache reads it.
    const AttentionQuery first{1, 1, 0, q.data(), 1, 0.2f};
    std::vector<float> out(c.head_dim), scratch_v(16 * c.head_dim);
    AttendBlocked(f.cache, first, scratch, out.data());
    const KvCache::Tile v = f.cache.ReadV(1, 1, 0, 1, 0, scratch_v.data());
    for (size_t i = 0; i < c.head_dim; ++i) EXPECT_NEAR(out[i], v.data[i], 1e-6);
  }
}

// Few long jobs are split into segments over the threads, each with its own online softmax, merged
// at the end: the merged output equals one pass over the whole range, for caches read in place and
// decoded, with windows that cut the range and soft-capping.
TEST(Attention, SplitSegmentsMergeToTheWholeRange) {
  EXPECT_EQ(AttentionSegments(1, 2, 16384, 32), 4u);  // one KV head: twice the threads
  EXPECT_EQ(AttentionSegments(2, 2, 16384, 32), 2u);
  EXPECT_EQ(AttentionSegments(8, 2, 16384, 32), 1u);  // enough jobs already
  EXPECT_EQ(AttentionSegments(1, 2, 100, 32), 1u);    // too short to be worth splitting
  EXPECT_EQ(AttentionSegments(1, 1, 16384, 32), 1u);
  const ModelConfig c = SmallConfig();
  ThreadPool pool(3);
  for (const KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kInt8, KvDtype::kInt4}) {
    const size_t positions = 300;  // 19 blocks of 16: 4 segments of 4 or 5 blocks
    const Filled f = Fill(dtype, positions, 5);
    std::mt19937 rng(6);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> q(2 * c.head_dim);
    for (float& x : q) x = normal(rng);
    const float sinks[] = {2.0f, -1.0f};  // GPT-OSS's: added to the merged denominator
    for (const size_t window : {size_t{0}, size_t{70}, size_t{250}})
      for (const float softcap : {0.0f, 3.0f}) {
        const size_t position = positions - 1, first = window > 0 ? position + 1 - window : 0;
        AttentionQuery query{1, 1, position, q.data(), 2, 1.0f / std::sqrt(32.0f), first, softcap};
        if (softcap > 0) query.sinks = sinks;
        EXPECT_GT(AttentionSegments(1, pool.size(), position + 1 - first, 16), window == 70 ? 0u : 1u);
        std::vector<float> whole(q.size()), split(q.size());
        AttentionScratch scratch;
        AttendBlocked(f.cache, query, scratch, whole.data());
        const AttentionJob job{&f.cache, query, split.data()};
        AttendJobs(std::span(&job, 1), pool);
        for (size_t i = 0; i < q.size(); ++i)
          ASSERT_NEAR(split[i], whole[i], 1e-5) << KvDtypeName(dtype) << " window " << window << " cap " << softcap;
      }
  }
}

// A sliding layer hands blocks behind its window back as the sequence advances, and a chunked one (Llama 4) those
// before its chunk: its memory stops growing, a full layer's does not, and what the window or chunk still sees reads
// the same as in a cache that keeps everything.
TEST(KvCache, SlidingAndChunkedLayersReleaseBlocksTheyNoLongerSee) {
  ModelConfig sliding = SmallConfig(), chunked = SmallConfig();
  sliding.sliding_window = 20;
  sliding.sliding_layers = {0, 1};  // layer 1 slides, layer 0 attends to everything
  chunked.attention_chunk = 32;
  chunked.nope_layers = {1, 0};  // layer 1 (RoPE) is chunked, layer 0 (NoPE) attends to everything
  const size_t positions = 200;
  KvCacheOptions o;
  o.block_tokens = 16;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> k(SmallConfig().n_layers * positions * SmallConfig().kv_dim()), v(k.size());
  for (float& x : k) x = normal(rng);
  for (float& x : v) x = normal(rng);
  KvCache full(SmallConfig(), positions, o);
  WriteAll(full, k, v, positions);
  const size_t block_bytes = full.bytes() / 26;  // 13 blocks per layer
  EXPECT_EQ(full.bytes(), 26 * block_bytes);
  std::vector<float> q(2 * SmallConfig().head_dim);
  for (float& x : q) x = normal(rng);
  // Layer 0 holds 13 blocks; layer 1 reuses its released ones: the window (20) spans at most 3 blocks and a chunk
  // (32) 2, plus the one being filled.
  for (const auto& [config, held] : {std::pair{sliding, size_t{4}}, std::pair{chunked, size_t{3}}}) {
    KvCache released(config, positions, o);
    WriteAll(released, k, v, positions);
    EXPECT_LE(released.bytes(), (13 + held) * block_bytes);
    const size_t first = config.first_visible(1, positions - 1);
    EXPECT_EQ(first, config.sliding_window > 0 ? positions - 20 : 192u);
    AttentionScratch scratch;
    const AttentionQuery query{1, 1, positions - 1, q.data(), 2, 0.2f, first};
    std::vector<float> a(q.size()), b(q.size());
    AttendBlocked(released, query, scratch, a.data());
    AttendBlocked(full, query, scratch, b.data());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]);
    released.Clear();  // released entries are not handed back twice
    WriteAll(released, k, v, positions);
    EXPECT_LE(released.bytes(), (13 + held) * block_bytes);
  }
}

}  // namespace
}  // namespace lowbit
