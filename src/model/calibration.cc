#include "model/calibration.h"

#include <random>

#include "core/error.h"
#include "kernels/dot.h"

namespace lowbit {

namespace {

// Text is tokenized in segments: lines, with lines longer than this cut at a space (tokens do not
// span words, so the cut changes nothing but the cost: BPE encoders slow down on long inputs,
// and some corpora hold a whole book per line).
constexpr size_t kMaxSegmentBytes = 2048;

// The end of the segment starting at `begin` (exclusive); the next one starts after it.
size_t SegmentEnd(std::string_view text, size_t begin) {
  const std::string_view ahead = text.substr(begin, kMaxSegmentBytes + 1);
  const size_t newline = ahead.find('\n');
  if (newline != std::string_view::npos) return begin + newline;
  if (ahead.size() <= kMaxSegmentBytes) return text.size();
  const size_t space = ahead.rfind(' ');
  return begin + (space != std::string_view::npos && space > 0 ? space : kMaxSegmentBytes);
}

// The start of the segment holding byte `at`.
size_t SegmentStart(std::string_view text, size_t at) {
  const size_t previous_newline = at == 0 ? std::string_view::npos : text.rfind('\n', at - 1);
  size_t begin = previous_newline == std::string_view::npos ? 0 : previous_newline + 1;
  for (size_t end = SegmentEnd(text, begin); end < at; end = SegmentEnd(text, begin)) begin = end + 1;
  return begin;
}

}  // namespace

std::vector<std::vector<int32_t>> SampleTextWindows(std::string_view text, const LineEncoder& encode, size_t samples,
                                                    size_t length, uint64_t seed) {
  if (length == 0 || samples == 0) Fail("calibration needs at least one window of at least one token");
  if (text.empty()) Fail("calibration text is empty");
  constexpr size_t kMaxDraws = 1000;  // per window: only a text with almost no full windows gets near it
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> byte(0, text.size() - 1);
  std::vector<std::vector<int32_t>> windows;
  for (size_t i = 0; i < samples; ++i) {
    std::vector<int32_t> window;
    for (size_t draw = 0; window.size() < length; ++draw) {
      if (draw == kMaxDraws)
        Fail("calibration text has too few tokens for windows of {} (no full window in {} draws)", length, kMaxDraws);
      window.clear();
      bool first = true;
      for (size_t begin = SegmentStart(text, byte(rng)); window.size() < length && begin < text.size();) {
        const size_t end = SegmentEnd(text, begin);
        const std::vector<int32_t> ids = end > begin ? encode(text.substr(begin, end - begin)) : std::vector<int32_t>{};
        size_t from = 0;
        if (first && !ids.empty()) {
          from = std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng);
          first = false;
        }
        window.insert(window.end(), ids.begin() + static_cast<ptrdiff_t>(from), ids.end());
        begin = end + 1;
      }
    }
    window.resize(length);
    windows.push_back(std::move(window));
  }
  return windows;
}

void HessianAccumulator::Add(const float* x, size_t n_tokens, ThreadPool& pool) {
  // Transpose a chunk of tokens so each input feature is a contiguous vector; then every entry
  // is one SIMD dot product of two such vectors (DotRows blocks four of them per weight load).
  // H is symmetric: each block of kRowBlock features computes only the features from its own first
  // one on, into a scratch of kRowBlock x cols (a full cols x cols one would be 1.4 GB at a 7B
  // model's 18944 MLP columns), and adds it to the lower triangle; the upper one is mirrored at the end.
  constexpr size_t kChunk = 512, kTile = 16, kRowBlock = 16;
  transposed_.resize(cols_ * kChunk);
  float* xt = transposed_.data();
  const size_t blocks = (cols_ + kRowBlock - 1) / kRowBlock;
  for (size_t t0 = 0; t0 < n_tokens; t0 += kChunk) {
    const size_t n = std::min(kChunk, n_tokens - t0);
    pool.ParallelFor(blocks, [&](size_t begin, size_t end) {  // tiled transpose: both sides stay in cache
      for (size_t cb = begin * kRowBlock; cb < std::min(cols_, end * kRowBlock); cb += kTile)
        for (size_t tb = 0; tb < n; tb += kTile)
          for (size_t t = tb; t < std::min(n, tb + kTile); ++t)
            for (size_t c = cb; c < std::min(cols_, cb + kTile); ++c) xt[c * n + t] = x[(t0 + t) * cols_ + c];
    });
    pool.ParallelFor(blocks, [&](size_t begin, size_t end) {
      std::vector<float> block(kRowBlock * cols_);  // block[(c - r0) * kRowBlock + (r - r0)] = H[r][c]
      for (size_t b = begin; b < end; ++b) {
        const size_t r0 = b * kRowBlock, k = std::min(cols_, r0 + kRowBlock) - r0;
        const float* features = xt + r0 * n;
        DotRows(features, n, 0, k, features, cols_ - r0, block.data(), kRowBlock);
        for (size_t c = r0; c < cols_; ++c) {
          const float* from = &block[(c - r0) * kRowBlock];
          double* to = &h_[c * cols_ + r0];
          for (size_t r = 0; r < std::min(k, c - r0 + 1); ++r) to[r] += from[r];
        }
      }
    });
  }
  for (size_t r = 0; r < cols_; ++r)
    for (size_t c = r + 1; c < cols_; ++c) h_[r * cols_ + c] = h_[c * cols_ + r];
  tokens_ += n_tokens;
}

}  // namespace lowbit
