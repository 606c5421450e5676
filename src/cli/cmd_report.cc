// `lowbit report RUN_DIR -o report.html`: one self-contained HTML page with charts from the JSON
// a run left behind (plan/report.h). Registered by AddInspectCommands (cmd_inspect.cc).
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "core/file_util.h"
#include "plan/report.h"

namespace lowbit::cli {

void AddReportCommand(CLI::App& app) {
  struct Flags {
    std::string run_dir, out = "report.html";
  };
  auto f = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand("report",
                                 "One self-contained HTML page (inline SVG charts) from the recipe cards and "
                                 "compare/ppl/bench/plan JSON found in a folder");
  cmd->add_option("run_dir", f->run_dir, "Folder with recipe.json cards and saved --json outputs")->required();
  cmd->add_option("-o,--output", f->out, "HTML file to write")->capture_default_str();
  cmd->callback([f] {
    const RunDir run = ScanRunDir(f->run_dir);
    WriteFileAtomic(f->out, RenderReportHtml(run));
    std::printf("wrote %s: %zu recipe cards, %zu compare, %zu ppl, %zu bench, %zu plan outputs\n", f->out.c_str(),
                run.recipes.size(), run.compares.size(), run.ppls.size(), run.benches.size(), run.plans.size());
  });
}

}  // namespace lowbit::cli
