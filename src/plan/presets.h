// Model presets for `--preset`: the architecture numbers of well-known checkpoints, copied from
// their published config.json files, with the published parameter counts to cross-check them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "plan/arch.h"

namespace lowbit {

// In display order: llama-2-7b/13b/70b, llama-3-8b/70b/405b, qwen2.5-7b/72b, mistral-7b,
// mixtral-8x7b, deepseek-v3.
const std::vector<ModelArch>& ModelPresets();

// Case- and dash-insensitive ("llama2-7b" finds llama-2-7b). Throws Error listing the known presets when `name` is unknown.
const ModelArch& FindPreset(std::string_view name);

std::string KnownPresetNames();

}  // namespace lowbit
