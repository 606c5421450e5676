// lowbit: quantize, run and evaluate LLMs on the CPU. The commands are thin wrappers over the
// library; errors from bad input print one line naming the file/field and exit with status 1.
#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <new>

#include "cli/commands.h"
#include "cli/front_door.h"
#include "core/cpu.h"
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
  lowbit::cli::AddConvertCommand(app);
  lowbit::cli::AddImatrixCommand(app);
  lowbit::cli::GuardUnsignedOptions(app);
  const bool json = std::any_of(argv + 1, argv + argc, [](const char* a) { return std::strcmp(a, "--json") == 0; });
  for (const std::string& unknown : {lowbit::cli::UnknownCommandMessage(app, argc, argv),
                                     lowbit::cli::UnknownOptionMessage(app, argc, argv)})
    if (!unknown.empty()) {
      lowbit::cli::PrintError(unknown, "", "", json);
      return 1;
    }
  try {
    lowbit::CpuLevelCap();  // LOWBIT_CPU, before any kernel dispatches
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help and --version
    lowbit::cli::PrintError(lowbit::cli::ParseErrorMessage(e, app, argc, argv), "", lowbit::cli::ParseErrorField(e),
                            json);
    return 1;
  } catch (const lowbit::Error& e) {
    lowbit::cli::PrintError(e.what(), e.file(), e.field(), json);
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {  // a path the user gave cannot be read or written
    const std::string file = e.path1().string();
    lowbit::cli::PrintError(fmt::format("{}: {}", file, e.code().message()), file, "", json);
    return 1;
  } catch (const std::bad_alloc&) {
    lowbit::cli::PrintError("out of memory: the model or file asks for more than this machine can give", "", "",
                            json);
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lowbit: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
