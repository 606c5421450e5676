#include "pipeline/imatrix_job.h"

#include <fmt/format.h>

#include <array>
#include <filesystem>
#include <map>
#include <string_view>

#include "core/error.h"
#include "io/imatrix.h"
#include "model/importance.h"
#include "pipeline/session.h"

namespace lowbit {
namespace {

// The GGUF tensors that read each input group.
constexpr std::array<std::array<std::string_view, 3>, 4> kGroupTensors = {{
    {"attn_q", "attn_k", "attn_v"}, {"attn_output", "", ""}, {"ffn_gate", "ffn_up", ""}, {"ffn_down", "", ""}}};

}  // namespace

nlohmann::json RunImatrixJob(const ImatrixJob& job) {
  if (job.ctx < 2) Fail("imatrix: --ctx must be at least 2");
  const LoadedModel m = LoadModelWithTokenizer(job.model, job.tokenizer);
  // Its entries are named for llama.cpp's q/k/v layout; GGUF deepseek2 (q_a, kv_a, k_b, v_b) is not written yet.
  if (m.model.config.mla())
    Fail("{}: imatrix of {} (multi-head latent attention) is not supported yet: lowbit writes no GGUF deepseek2",
         job.model, m.model.config.architecture);
  // llama-imatrix's protocol: the text (with BOS) cut into consecutive chunks of --ctx tokens,
  // each starting with BOS.
  const std::vector<int32_t> tokens = TokenizeFile(*m.tokenizer, job.calib);
  size_t n_chunks = tokens.size() / job.ctx;
  if (job.chunks > 0) n_chunks = std::min(n_chunks, job.chunks);
  if (n_chunks == 0) Fail("{}: {} tokens, fewer than one chunk of --ctx {}", job.calib, tokens.size(), job.ctx);
  std::vector<std::vector<int32_t>> windows;
  for (size_t i = 0; i < n_chunks; ++i) {
    windows.emplace_back(tokens.begin() + static_cast<ptrdiff_t>(i * job.ctx),
                         tokens.begin() + static_cast<ptrdiff_t>((i + 1) * job.ctx));
    windows.back()[0] = m.model.config.bos_id;
  }
  Engine engine(m.model, job.threads);
  const std::vector<LayerImportance> squares = CollectInputSquares(engine, windows, [&](size_t done) {
    if (job.progress) job.progress(done, n_chunks);
  });
  std::map<std::string, ImatrixEntry, std::less<>> entries;
  for (size_t l = 0; l < squares.size(); ++l)
    for (size_t g = 0; g < 4; ++g) {
      const ColumnSquares& s = squares[l][g];
      ImatrixEntry e{std::vector<float>(s.sum.begin(), s.sum.end()), static_cast<float>(s.tokens)};
      for (std::string_view tensor : kGroupTensors[g])
        if (!tensor.empty()) entries[fmt::format("blk.{}.{}.weight", l, tensor)] = e;
    }
  WriteImatrix(job.out, entries, {std::filesystem::path(job.calib).filename().string()},
               static_cast<uint32_t>(n_chunks), static_cast<uint32_t>(job.ctx));
  return {{"out", job.out}, {"entries", entries.size()}, {"chunks", n_chunks}, {"ctx", job.ctx},
          {"tokens", n_chunks * job.ctx}};
}

}  // namespace lowbit
