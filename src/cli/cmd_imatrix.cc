// `lowbit imatrix MODEL --calib FILE -o imatrix.gguf`: the importance matrix of every decoder
// linear (mean squared input activation per column) in llama.cpp's imatrix GGUF format, so that
// `lowbit export --imatrix` and llama.cpp's `llama-quantize --imatrix` can both use it.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/front_door.h"
#include "cli/output.h"
#include "pipeline/session.h"
#include "core/error.h"
#include "io/imatrix.h"
#include "model/importance.h"

namespace lowbit::cli {
namespace {

struct ImatrixOptions {
  std::string model, calib, out, tokenizer;
  size_t ctx = 512, chunks = 0, threads = 0;
  bool json = false;
};

// The GGUF tensors that read each input group.
constexpr std::array<std::array<std::string_view, 3>, 4> kGroupTensors = {{
    {"attn_q", "attn_k", "attn_v"}, {"attn_output", "", ""}, {"ffn_gate", "ffn_up", ""}, {"ffn_down", "", ""}}};

void Run(const ImatrixOptions& o) {
  if (o.ctx < 2) Fail("imatrix: --ctx must be at least 2");
  const LoadedModel m = LoadModelWithTokenizer(o.model, o.tokenizer);
  // llama-imatrix's protocol: the text (with BOS) cut into consecutive chunks of --ctx tokens,
  // each starting with BOS.
  const std::vector<int32_t> tokens = TokenizeFile(*m.tokenizer, o.calib);
  size_t n_chunks = tokens.size() / o.ctx;
  if (o.chunks > 0) n_chunks = std::min(n_chunks, o.chunks);
  if (n_chunks == 0) Fail("{}: {} tokens, fewer than one chunk of --ctx {}", o.calib, tokens.size(), o.ctx);
  std::vector<std::vector<int32_t>> windows;
  for (size_t i = 0; i < n_chunks; ++i) {
    windows.emplace_back(tokens.begin() + static_cast<ptrdiff_t>(i * o.ctx),
                         tokens.begin() + static_cast<ptrdiff_t>((i + 1) * o.ctx));
    windows.back()[0] = m.model.config.bos_id;
  }
  Engine engine(m.model, o.threads);
  std::vector<LayerImportance> squares;
  {
    ProgressBar bar("imatrix", n_chunks);  // gives its line back before the table
    squares = CollectInputSquares(engine, windows, [&bar](size_t done) { bar.Update(done); });
  }

  std::map<std::string, ImatrixEntry, std::less<>> entries;
  for (size_t l = 0; l < squares.size(); ++l)
    for (size_t g = 0; g < 4; ++g) {
      const ColumnSquares& s = squares[l][g];
      ImatrixEntry e{std::vector<float>(s.sum.begin(), s.sum.end()), static_cast<float>(s.tokens)};
      for (std::string_view tensor : kGroupTensors[g])
        if (!tensor.empty()) entries[fmt::format("blk.{}.{}.weight", l, tensor)] = e;
    }
  WriteImatrix(o.out, entries, {std::filesystem::path(o.calib).filename().string()}, static_cast<uint32_t>(n_chunks),
               static_cast<uint32_t>(o.ctx));
  if (o.json) {
    std::puts(nlohmann::json({{"out", o.out}, {"entries", entries.size()}, {"chunks", n_chunks}, {"ctx", o.ctx},
                              {"tokens", n_chunks * o.ctx}})
                  .dump(2)
                  .c_str());
    return;
  }
  PrintTable({"entries", "chunks", "ctx", "tokens"},
             {{std::to_string(entries.size()), std::to_string(n_chunks), std::to_string(o.ctx),
               std::to_string(n_chunks * o.ctx)}});
  std::printf("\nWrote %s (llama.cpp imatrix GGUF).\n", o.out.c_str());
}

}  // namespace

void AddImatrixCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("imatrix", "Importance matrix of the decoder linears (llama.cpp's imatrix.gguf format)");
  auto o = std::make_shared<ImatrixOptions>();
  cmd->add_option("model", o->model, "Model folder or file")->required();
  cmd->add_option("--calib", o->calib, "Calibration text")->required();
  cmd->add_option("-o,--out", o->out, "Output file (imatrix.gguf)")->required();
  cmd->add_option("--ctx", o->ctx, "Tokens per chunk")->default_val(512)->check(Positive());
  cmd->add_option("--chunks", o->chunks, "At most this many chunks (default: the whole text)")->check(Positive());
  cmd->add_option("--tokenizer", o->tokenizer, "Tokenizer (default: the model's own)");
  cmd->add_option("--threads", o->threads, "Threads (default: all cores)");
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o] { Run(*o); });
}

}  // namespace lowbit::cli
