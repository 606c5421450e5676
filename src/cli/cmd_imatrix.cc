// `lowbit imatrix MODEL --calib FILE -o imatrix.gguf`: the flags of an ImatrixJob
// (pipeline/imatrix_job.h), a progress bar, and its result as a table or JSON.
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/front_door.h"
#include "cli/output.h"
#include "pipeline/imatrix_job.h"

namespace lowbit::cli {
namespace {

struct ImatrixOptions {
  ImatrixJob job;
  bool json = false;
};

void Run(ImatrixOptions& o) {
  std::unique_ptr<ProgressBar> bar;
  o.job.progress = [&bar](size_t done, size_t total) {
    if (!bar) bar = std::make_unique<ProgressBar>("imatrix", total);
    bar->Update(done);
  };
  const nlohmann::json r = RunImatrixJob(o.job);
  bar.reset();  // gives its line back before the table
  if (o.json) {
    std::puts(r.dump(2).c_str());
    return;
  }
  PrintTable({"entries", "chunks", "ctx", "tokens"},
             {{r["entries"].dump(), r["chunks"].dump(), r["ctx"].dump(), r["tokens"].dump()}});
  std::printf("\nWrote %s (llama.cpp imatrix GGUF).\n", o.job.out.c_str());
}

}  // namespace

void AddImatrixCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("imatrix", "Importance matrix of the decoder linears (llama.cpp's imatrix.gguf format)");
  auto o = std::make_shared<ImatrixOptions>();
  ImatrixJob& j = o->job;
  cmd->add_option("model", j.model, "Model folder or file")->required();
  cmd->add_option("--calib", j.calib, "Calibration text")->required();
  cmd->add_option("-o,--out", j.out, "Output file (imatrix.gguf)")->required();
  cmd->add_option("--ctx", j.ctx, "Tokens per chunk")->default_val(512)->check(Positive());
  cmd->add_option("--chunks", j.chunks, "At most this many chunks (default: the whole text)")->check(Positive());
  cmd->add_option("--tokenizer", j.tokenizer, "Tokenizer (default: the model's own)");
  cmd->add_option("--threads", j.threads, "Threads (default: all cores)");
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o] { Run(*o); });
}

}  // namespace lowbit::cli
