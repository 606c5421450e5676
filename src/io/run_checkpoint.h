// The on-disk state of an interrupted `lowbit quantize` run, so it can continue from the last
// finished block (--resume). A folder OUT.partial holds, for the newest finished block N:
//   model.N/       the model as it stands (blocks < N quantized), a lowbit checkpoint folder
//   hidden.N.bin   the calibration hidden states entering block N
//   progress.json  {"next_layer": N, "run": <what identifies the run>, "report": <report so far>}
// progress.json is written last (atomically) and names N, so a crash at any moment leaves a
// consistent state; older blocks' files are removed after it.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>

#include "model/ptq.h"
#include "model/weights.h"

namespace lowbit {

void SaveRunCheckpoint(const std::filesystem::path& dir, const Model& model, const BlockCheckpoint& state,
                       const nlohmann::json& run, const std::filesystem::path& source_dir);

struct RunCheckpoint {
  Model model;
  BlockCheckpoint state;
};

// Throws Error naming the folder when it holds no checkpoint, or one of a different run (recipe,
// calibration or source model), or when a file is damaged.
RunCheckpoint LoadRunCheckpoint(const std::filesystem::path& dir, const nlohmann::json& run);

}  // namespace lowbit
