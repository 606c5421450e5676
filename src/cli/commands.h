// One function per subcommand; each adds itself to the app with its flags and its action.
#pragma once

#include <CLI/CLI.hpp>

namespace lowbit::cli {

void AddFormatsCommand(CLI::App& app);
void AddQuantizeTensorCommand(CLI::App& app);
void AddOutliersCommand(CLI::App& app);
void AddDemoCommand(CLI::App& app);
void AddBenchCommand(CLI::App& app);  // codecs, then the runtime benchmarks below
void AddBenchRuntimeCommands(CLI::App& bench);  // memory, gemv, decode, prefill, attention
void AddSynthCommand(CLI::App& app);
void AddCalibrateKvCommand(CLI::App& app);
void AddEvalCommands(CLI::App& app);  // ppl, compare
void AddGenerateCommand(CLI::App& app);
void AddTokenizeCommand(CLI::App& app);
void AddPlanCommands(CLI::App& app);  // plan, advise
void AddQuantizeCommand(CLI::App& app);
void AddInspectCommands(CLI::App& app);  // inspect, report
void AddExportCommand(CLI::App& app);
void AddConvertCommand(CLI::App& app);
void AddImatrixCommand(CLI::App& app);

}  // namespace lowbit::cli
