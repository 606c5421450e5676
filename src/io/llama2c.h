// llama2.c checkpoints: the legacy .bin that run.c reads (7 int32 header, fp32 arrays) and the
// versioned v1 fp32 export ("ak42" magic). RoPE runs on adjacent pairs, as in Meta's layout.
#pragma once

#include <filesystem>

#include "model/weights.h"

namespace lowbit {

Model LoadLlama2cModel(const std::filesystem::path& path);

}  // namespace lowbit
