#include "pipeline/imatrix_job.h"

#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <string_view>

#include "core/error.h"
#include "io/gguf_export.h"
#include "io/gguf_model.h"
#include "io/imatrix.h"
#include "model/importance.h"
#include "pipeline/session.h"
#include "tokenizer/tokenizer.h"

namespace lowbit {
namespace {

using Entries = std::map<std::string, ImatrixEntry, std::less<>>;

ImatrixEntry EntryOf(const ColumnSquares& s) {
  return {std::vector<float>(s.sum.begin(), s.sum.end()), {static_cast<float>(s.tokens)}};
}

void Add(Entries& entries, size_t layer, std::initializer_list<std::string_view> tensors, const ImatrixEntry& e) {
  for (std::string_view tensor : tensors) entries[fmt::format("blk.{}.{}.weight", layer, tensor)] = e;
}

// A MoE layer's routed experts as llama-imatrix writes ffn_*_exps: each expert's sums, one matrix per expert,
// with its own row count (an expert no token reached: zeros, count 0, which readers take as ones).
ImatrixEntry ExpertsEntry(const std::vector<ColumnSquares>& units, size_t first, size_t cols) {
  ImatrixEntry e;
  for (size_t u = first; u < units.size(); ++u) {
    const ColumnSquares& s = units[u];
    if (s.sum.empty()) e.sum_squares.insert(e.sum_squares.end(), cols, 0.0f);
    else e.sum_squares.insert(e.sum_squares.end(), s.sum.begin(), s.sum.end());
    e.counts.push_back(static_cast<float>(s.tokens));
  }
  return e;
}

// The GGUF tensors each input feeds, named as llama.cpp's converter names them for this model (gguf_export.cc):
// attn_q/k/v (Phi-3: attn_qkv) or latent attention's attn_q_a (attn_q) with attn_kv_a_mqa and attn_q_b;
// attn_output; ffn_gate/up/down (Phi-3, GLM-4, GLM: ffn_up holds gate and up, GgufFusesGateUp), or the router
// ffn_gate_inp (and ffn_gate_inp_shexp), ffn_*_shexp and ffn_*_exps. kv_b's input has no entry: in GGUF kv_b is split
// into attn_k_b and attn_v_b, which read each head's nope query and its latent attention output (one matrix per
// head, one count, as llama-imatrix's 3-d mul_mat).
Entries NameEntries(const ModelConfig& c, const std::vector<LayerImportance>& squares) {
  const std::string arch = GgufArchitectureOf(c);
  const bool phi3 = arch == "phi3", fused_gate_up = GgufFusesGateUp(arch);
  Entries entries;
  for (size_t l = 0; l < squares.size(); ++l) {
    const LayerImportance& li = squares[l];
    const auto attention = [&](LinearInput input) { return EntryOf(li.attention[static_cast<size_t>(input)]); };
    if (!c.mla()) {
      if (phi3) Add(entries, l, {"attn_qkv"}, attention(LinearInput::kQkv));
      else Add(entries, l, {"attn_q", "attn_k", "attn_v"}, attention(LinearInput::kQkv));
    } else if (c.q_lora_rank == 0) {
      Add(entries, l, {"attn_q", "attn_kv_a_mqa"}, attention(LinearInput::kLatentIn));
    } else {
      Add(entries, l, {"attn_q_a", "attn_kv_a_mqa"}, attention(LinearInput::kLatentIn));
      Add(entries, l, {"attn_q_b"}, attention(LinearInput::kLatentQ));
    }
    if (c.mla()) {
      Add(entries, l, {"attn_k_b"}, EntryOf(li.latent_query));
      Add(entries, l, {"attn_v_b"}, EntryOf(li.latent_output));
    }
    Add(entries, l, {"attn_output"}, attention(LinearInput::kO));
    if (!c.moe(l)) {
      if (fused_gate_up) Add(entries, l, {"ffn_up"}, EntryOf(li.unit_inputs[0]));
      else Add(entries, l, {"ffn_gate", "ffn_up"}, EntryOf(li.unit_inputs[0]));
      Add(entries, l, {"ffn_down"}, EntryOf(li.unit_hidden[0]));
      continue;
    }
    // The router and Qwen2-MoE's shared-expert gate are matrix products in llama.cpp too, so llama-imatrix
    // collects them (llama-quantize keeps them F32).
    Add(entries, l, {"ffn_gate_inp"}, EntryOf(li.router_input));
    if (c.shared_expert_gated) Add(entries, l, {"ffn_gate_inp_shexp"}, EntryOf(li.router_input));
    const size_t shared = c.shared_expert_ffn_dim > 0 ? 1 : 0;
    if (shared) {
      Add(entries, l, {"ffn_gate_shexp", "ffn_up_shexp"}, EntryOf(li.unit_inputs[0]));
      Add(entries, l, {"ffn_down_shexp"}, EntryOf(li.unit_hidden[0]));
    }
    Add(entries, l, {"ffn_gate_exps", "ffn_up_exps"}, ExpertsEntry(li.unit_inputs, shared, c.dim));
    Add(entries, l, {"ffn_down_exps"}, ExpertsEntry(li.unit_hidden, shared, c.expert_ffn_dim));
  }
  return entries;
}

}  // namespace

nlohmann::json RunImatrixJob(const ImatrixJob& job) {
  if (job.ctx < 2) Fail("imatrix: --ctx must be at least 2");
  const LoadedModel m = LoadModelWithTokenizer(job.model, job.tokenizer);
  // llama-imatrix's protocol: the text (with BOS) cut into consecutive chunks of --ctx tokens, each starting
  // with BOS where the tokenizer adds one.
  const int32_t bos = AddedBos(*m.tokenizer);
  const std::vector<int32_t> tokens = TokenizeFile(*m.tokenizer, job.calib);
  size_t n_chunks = tokens.size() / job.ctx;
  if (job.chunks > 0) n_chunks = std::min(n_chunks, job.chunks);
  if (n_chunks == 0) Fail("{}: {} tokens, fewer than one chunk of --ctx {}", job.calib, tokens.size(), job.ctx);
  std::vector<std::vector<int32_t>> windows;
  for (size_t i = 0; i < n_chunks; ++i) {
    windows.emplace_back(tokens.begin() + static_cast<ptrdiff_t>(i * job.ctx),
                         tokens.begin() + static_cast<ptrdiff_t>((i + 1) * job.ctx));
    if (bos >= 0) windows.back()[0] = bos;
  }
  Engine engine(m.model, job.threads);
  const std::vector<LayerImportance> squares = CollectInputSquares(engine, windows, [&](size_t done) {
    if (job.progress) job.progress(done, n_chunks);
  });
  const Entries entries = NameEntries(m.model.config, squares);
  WriteImatrix(job.out, entries, {std::filesystem::path(job.calib).filename().string()},
               static_cast<uint32_t>(n_chunks), static_cast<uint32_t>(job.ctx));
  return {{"out", job.out}, {"entries", entries.size()}, {"chunks", n_chunks}, {"ctx", job.ctx},
          {"tokens", n_chunks * job.ctx}};
}

}  // namespace lowbit
