// The on-disk state of an interrupted `lowbit quantize` run, so it can continue from the last
// finished block (--resume). A folder OUT.partial holds, for the newest finished block N:
//   model.N/       the finished part: blocks < N (quantized) and the tensors outside the blocks,
//                  a lowbit checkpoint folder of a model N blocks deep. The blocks from N on are
//                  read again from the source on resume, so a save never rewrites them.
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

// Puts the saved blocks and the tensors outside the blocks into `model` (the source model, its
// later blocks read or not) and returns the state to continue from. Throws Error naming the
// folder when it holds no checkpoint, or one of a different run (recipe, calibration or source
// model), or when a file is damaged.
BlockCheckpoint LoadRunCheckpoint(const std::filesystem::path& dir, const nlohmann::json& run, Model& model);

}  // namespace lowbit
