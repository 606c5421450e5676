// What every command shares at the door: refusing negative values for unsigned options (CLI11
// would wrap "--ctx -5" to 2^64 - 5), naming the closest command for a mistyped one, and printing
// errors as one line, or as JSON for commands run with --json.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

#include "io/model_loader.h"

namespace lowbit::cli {

// Adds a non-negative check to every unsigned option of `app` and its subcommands.
void GuardUnsignedOptions(CLI::App& app);

// "unknown command 'quantiz', did you mean 'quantize'?" when argv[1] names no command; empty otherwise.
std::string UnknownCommandMessage(const CLI::App& app, int argc, char** argv);
// "lowbit ppl: unknown option '--modle', did you mean '--model'?" for the first option argv's command does
// not have (checked before parsing, where CLI11 would first complain of a missing required option); empty
// otherwise.
std::string UnknownOptionMessage(const CLI::App& app, int argc, char** argv);
// A CLI11 parse error as one line naming the command, in lowbit's words where CLI11's say less
// ("--model needs a value", "--batch: must be in [1, 16777216], not '-3'").
std::string ParseErrorMessage(const CLI::ParseError& e, const CLI::App& app, int argc, char** argv);
// The option a parse error is about ("--batch"), for --json errors' "field"; empty when it names none.
std::string ParseErrorField(const CLI::ParseError& e);

// Validators with messages that say what is wanted ("--ctx: must be a positive number, not '-5'").
CLI::Validator Positive();
CLI::Validator NonNegative();
// A number in [lo, hi] ("--top-p: must be in [0, 1], not '1.5'").
CLI::Validator Between(double lo, double hi);

// A validator that runs `parse` on the option's text, so a name the library refuses is refused at the door
// with the option named ("quantize: --format: unknown format 'int9' (known: ...)").
CLI::Validator ParsedBy(std::function<void(const std::string&)> parse);
// ParsedBy the library's own readers of a format ("int4:g128"), a quantization method, a KV cache dtype, a
// GGUF type or mix, a model preset.
CLI::Validator SchemeName();
CLI::Validator MethodName();
CLI::Validator KvDtypeName();
CLI::Validator GgufTypeName();
CLI::Validator PresetName();

// A validator for --group: a positive group size, or -1 for one group per row.
CLI::Validator GroupSize();

// Prints `message` to stderr, or when `json` is set as {"error", "file", "field"} on stdout.
// `file`/`field` empty: the file is the message's first "path: " prefix when that path exists.
void PrintError(const std::string& message, const std::string& file, const std::string& field, bool json);

// Adds --allow-nonfinite (load weights holding NaN / Inf instead of failing) to a model-loading command.
void AddAllowNonfiniteFlag(CLI::App* cmd, LoadOptions& options);

}  // namespace lowbit::cli
