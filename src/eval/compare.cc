#include "eval/compare.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/checked_math.h"
#include "core/checksum.h"
#include "core/error.h"
#include "core/file_util.h"

namespace lowbit {

void CompareAccumulator::Record(double kl, bool agree, double p_base_true, double p_model_true, double base_nll,
                                double model_nll) {
  kld_.push_back(kl);
  agree_ += agree ? 1 : 0;
  dp_sq_ += (p_model_true - p_base_true) * (p_model_true - p_base_true);
  base_.Add(base_nll);
  model_.Add(model_nll);
}

void CompareAccumulator::Add(const std::vector<double>& lb, const std::vector<double>& lm, int32_t target) {
  double kl = 0;
  for (size_t i = 0; i < lb.size(); ++i) kl += std::exp(lb[i]) * (lb[i] - lm[i]);
  const auto argmax = [](const std::vector<double>& v) { return std::max_element(v.begin(), v.end()) - v.begin(); };
  Record(std::max(kl, 0.0), argmax(lb) == argmax(lm), std::exp(lb[target]), std::exp(lm[target]), -lb[target],
         -lm[target]);
}

void CompareAccumulator::AddMergedTail(const BaseRecord& base, const std::vector<double>& lm, int32_t target) {
  double kl = 0, model_top_mass = 0;
  for (size_t i = 0; i < base.ids.size(); ++i) {
    const double lb = base.logprobs[i], lmi = lm[base.ids[i]];
    kl += std::exp(lb) * (lb - lmi);
    model_top_mass += std::exp(lmi);
  }
  const double base_tail = std::exp(static_cast<double>(base.tail_logprob));
  const double model_tail = std::max(1.0 - model_top_mass, 1e-30);
  if (base_tail > 0) kl += base_tail * (base.tail_logprob - std::log(model_tail));
  const bool agree = std::max_element(lm.begin(), lm.end()) - lm.begin() == base.ids[0];
  Record(std::max(kl, 0.0), agree, std::exp(static_cast<double>(base.target_logprob)), std::exp(lm[target]),
         -base.target_logprob, -lm[target]);
}

CompareResult CompareAccumulator::Finish() const {
  CompareResult r;
  r.tokens = kld_.size();
  if (kld_.empty()) return r;
  std::vector<double> sorted = kld_;
  std::sort(sorted.begin(), sorted.end());
  const auto quantile = [&](double q) {
    return sorted[std::min(sorted.size() - 1, static_cast<size_t>(q * static_cast<double>(sorted.size() - 1) + 0.5))];
  };
  r.kld_mean = std::accumulate(kld_.begin(), kld_.end(), 0.0) / static_cast<double>(kld_.size());
  r.kld_median = quantile(0.5);
  r.kld_p99 = quantile(0.99);
  r.top1_agreement = static_cast<double>(agree_) / static_cast<double>(kld_.size());
  r.dp_rms = std::sqrt(dp_sq_ / static_cast<double>(kld_.size()));
  r.ppl_base = base_.ppl();
  r.ppl_base_stderr = base_.ppl_stderr();
  r.ppl = model_.ppl();
  r.ppl_stderr = model_.ppl_stderr();
  return r;
}

CompareResult CompareModels(Engine& base, Engine& model, const std::vector<int32_t>& tokens, const ChunkPlan& plan,
                            int32_t bos, const std::function<void(size_t, size_t)>& progress) {
  Engine* engines[] = {&base, &model};
  CompareAccumulator acc;
  std::vector<std::vector<double>> base_logprobs(plan.scored_per_chunk());  // one chunk's worth
  std::vector<double> logprobs;
  ScoreChunks(
      engines, tokens, plan, bos,
      [&](size_t which, const ScoredPosition& p) {
        auto& slot = base_logprobs[p.pos - plan.first_scored()];
        if (which == 0) return LogSoftmax(p.logits, slot);
        LogSoftmax(p.logits, logprobs);
        acc.Add(slot, logprobs, p.target);
      },
      progress);
  return acc.Finish();
}

BaseRecord MakeBaseRecord(const std::vector<double>& logprobs, int32_t target, size_t k) {
  k = std::min(k, logprobs.size());
  std::vector<int32_t> idx(logprobs.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + static_cast<ptrdiff_t>(k), idx.end(),
                    [&](int32_t a, int32_t b) { return logprobs[a] > logprobs[b]; });
  BaseRecord r;
  double mass = 0;
  for (size_t i = 0; i < k; ++i) {
    r.ids.push_back(idx[i]);
    r.logprobs.push_back(static_cast<float>(logprobs[idx[i]]));
    mass += std::exp(logprobs[idx[i]]);
  }
  r.tail_logprob = static_cast<float>(std::log(std::max(1.0 - mass, 0.0)));

  r.target_logprob = static_cast<float>(logprobs[target]);
  return r;
}

namespace {

constexpr char kMagic[8] = {'L', 'B', 'K', 'L', 'B', 'A', 'S', 'E'};
// Version 2 added the checksum; version 1 files (no checksum) must be regenerated.
constexpr uint32_t kVersion = 2;
// magic, version, vocab, ctx, K, positions, token hash, then the checksum.
constexpr size_t kChecksumOffset = 8 + 4 * 4 + 8 * 2;
constexpr size_t kHeaderBytes = kChecksumOffset + 8;

// FNV-1a (64-bit) of the whole file except the checksum field itself: the header fields before it
// and every record after it, so an edit anywhere in the numbers is caught.
uint64_t Checksum(std::span<const std::byte> bytes) {
  return Fnv1a64(bytes.subspan(kHeaderBytes), Fnv1a64(bytes.first(kChecksumOffset)));
}

size_t RecordBytes(uint32_t k) { return static_cast<size_t>(k) * 8 + 8; }

template <class T>
void Put(std::vector<std::byte>& out, T v) {
  const auto* p = reinterpret_cast<const std::byte*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

template <class T>
T Get(std::span<const std::byte> bytes, size_t& pos) {
  T v;
  std::memcpy(&v, bytes.data() + pos, sizeof(T));
  pos += sizeof(T);
  return v;
}

}  // namespace

uint64_t HashTokens(const std::vector<int32_t>& tokens) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (const int32_t t : tokens)
    for (int b = 0; b < 4; ++b) h = (h ^ ((static_cast<uint32_t>(t) >> (8 * b)) & 0xFF)) * 1099511628211ull;
  return h;
}

uint64_t BaseFileBytes(const BaseFileHeader& h) {
  return CheckedMul(h.positions, RecordBytes(h.k), "top-K base file: positions x record size") + kHeaderBytes;
}

void WriteBaseFile(const std::filesystem::path& path, const BaseFileHeader& h, const std::vector<BaseRecord>& records) {
  LOWBIT_CHECK(records.size() == h.positions);
  std::vector<std::byte> out;
  out.reserve(BaseFileBytes(h));
  for (char c : kMagic) out.push_back(static_cast<std::byte>(c));
  Put(out, kVersion);
  Put(out, h.vocab);
  Put(out, h.ctx);
  Put(out, h.k);
  Put(out, h.positions);
  Put(out, h.token_hash);
  Put(out, uint64_t{0});  // the checksum, filled in below
  for (const BaseRecord& r : records) {
    LOWBIT_CHECK(r.ids.size() == h.k);
    for (size_t i = 0; i < h.k; ++i) {
      Put(out, r.ids[i]);
      Put(out, r.logprobs[i]);
    }
    Put(out, r.tail_logprob);
    Put(out, r.target_logprob);
  }
  const uint64_t checksum = Checksum(out);
  std::memcpy(out.data() + kChecksumOffset, &checksum, sizeof(checksum));
  WriteFileAtomic(path, out);
}

std::vector<BaseRecord> ReadBaseFile(const std::filesystem::path& path, const BaseFileHeader& expected) {
  const MappedFile file(path);
  const auto bytes = file.bytes();
  const std::string source = path.string();
  if (bytes.size() < 12 || std::memcmp(bytes.data(), kMagic, 8) != 0)
    Fail("{}: not a lowbit base log-probability file (made by `lowbit ppl --save-base`)", source);
  size_t pos = 8;
  const uint32_t version = Get<uint32_t>(bytes, pos);
  if (version == 1)
    Fail("{}: a version 1 base file (no checksum); regenerate it with `lowbit ppl --save-base`", source);
  if (version != kVersion) Fail("{}: version {} is not supported (this lowbit reads version {})", source, version, kVersion);
  if (bytes.size() < kHeaderBytes)
    Fail("{}: truncated: {} bytes, the header alone is {}", source, bytes.size(), kHeaderBytes);
  BaseFileHeader h;
  h.vocab = Get<uint32_t>(bytes, pos);
  h.ctx = Get<uint32_t>(bytes, pos);
  h.k = Get<uint32_t>(bytes, pos);
  h.positions = Get<uint64_t>(bytes, pos);
  h.token_hash = Get<uint64_t>(bytes, pos);
  const uint64_t checksum = Get<uint64_t>(bytes, pos);
  if (h.vocab != expected.vocab) Fail("{}: made for a vocabulary of {} tokens, this model has {}", source, h.vocab, expected.vocab);
  if (h.ctx != expected.ctx) Fail("{}: made with --ctx {}, this run uses {}", source, h.ctx, expected.ctx);
  if (h.positions != expected.positions || h.token_hash != expected.token_hash)
    Fail("{}: made for a different text ({} scored positions, this run has {})", source, h.positions, expected.positions);
  if (h.k == 0 || h.k > h.vocab) Fail("{}: field K = {} is out of range", source, h.k);
  // Plausibility before allocation: the records the header announces must be exactly the bytes
  // after it (checked without overflow), so `positions` can never ask for more than the file holds.
  const uint64_t record_bytes = bytes.size() - kHeaderBytes;
  if (h.positions > record_bytes / RecordBytes(h.k) || record_bytes != h.positions * RecordBytes(h.k))
    Fail("{}: field positions = {} (K = {}, {} bytes per record) does not match the {} bytes of records in the file",
         source, h.positions, h.k, RecordBytes(h.k), record_bytes);
  if (Checksum(bytes) != checksum)
    Fail("{}: checksum mismatch: the file was modified or damaged after it was written; regenerate it with "
         "`lowbit ppl --save-base`", source);
  std::vector<BaseRecord> records(h.positions);
  for (BaseRecord& r : records) {
    r.ids.resize(h.k);
    r.logprobs.resize(h.k);
    for (size_t i = 0; i < h.k; ++i) {
      r.ids[i] = Get<int32_t>(bytes, pos);
      if (r.ids[i] < 0 || static_cast<uint32_t>(r.ids[i]) >= h.vocab) Fail("{}: token id {} out of range", source, r.ids[i]);
      r.logprobs[i] = Get<float>(bytes, pos);
    }
    r.tail_logprob = Get<float>(bytes, pos);
    r.target_logprob = Get<float>(bytes, pos);
  }
  return records;
}

}  // namespace lowbit
