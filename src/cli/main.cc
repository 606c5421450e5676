// lowbit: quantize, run and evaluate LLMs on the CPU. The commands are thin wrappers over the
// library; errors from bad input print one line naming the file/field and exit with status 1.
#include <malloc.h>

#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  // lowbit allocates and frees buffers of hundreds of MB again and again (a block's weights, the
  // calibration activations). glibc would map each afresh and unmap it on free, and faulting
  // fresh pages in costs seconds per GB on virtual machines. Kept in the heap, a freed buffer is
  // reused at once: a streamed 4-block 7B quantization runs in 20 s instead of 30 s, the same peak.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, -1);
  CLI::App app{"lowbit " LOWBIT_VERSION " -- LLM quantization toolkit and CPU engine"};
  app.require_subcommand(1);
  app.set_version_flag("--version", LOWBIT_VERSION);
  lowbit::cli::AddFormatsCommand(app);
  lowbit::cli::AddQuantizeTensorCommand(app);
  lowbit::cli::AddOutliersCommand(app);
  lowbit::cli::AddDemoCommand(app);
  lowbit::cli::AddBenchCommand(app);
  lowbit::cli::AddSynthCommand(app);
  lowbit::cli::AddCalibrateKvCommand(app);
  lowbit::cli::AddEvalCommands(app);
  lowbit::cli::AddGenerateCommand(app);
  lowbit::cli::AddTokenizeCommand(app);
  lowbit::cli::AddPlanCommands(app);
  lowbit::cli::AddQuantizeCommand(app);
  lowbit::cli::AddInspectCommands(app);
  lowbit::cli::AddExportCommand(app);
  lowbit::cli::AddImatrixCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const lowbit::Error& e) {
    std::fprintf(stderr, "lowbit: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lowbit: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
