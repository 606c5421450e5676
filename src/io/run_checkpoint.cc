#include "io/run_checkpoint.h"

#include <fmt/format.h>

#include <cstring>

#include "core/error.h"
#include "core/file_util.h"
#include "io/model_loader.h"
#include "io/quantized_checkpoint.h"

namespace lowbit {
namespace {

// hidden.N.bin: u64 batch count, then per batch a u64 value count and the fp32 values. Written
// a batch at a time: the batches may be read back from the activation spill file one by one.
void WriteHidden(const std::filesystem::path& path, const BlockCheckpoint& state) {
  AtomicFileWriter out(path);
  const auto put = [&](const void* p, size_t n) { out.Write({static_cast<const std::byte*>(p), n}); };
  const uint64_t batches = state.hidden_batches;
  put(&batches, 8);
  uint64_t written = 0;
  state.for_each_hidden([&](std::span<const float> h) {
    const uint64_t n = h.size();
    put(&n, 8);
    put(h.data(), n * sizeof(float));
    ++written;
  });
  LOWBIT_CHECK(written == batches);
  out.Commit();
}

std::vector<std::vector<float>> DecodeHidden(const std::filesystem::path& path) {
  const MappedFile file(path);
  const std::span<const std::byte> bytes = file.bytes();
  size_t at = 0;
  auto get = [&](void* p, size_t n) {
    if (bytes.size() - at < n) Fail("{}: truncated at byte {}", path.string(), at);
    std::memcpy(p, bytes.data() + at, n);
    at += n;
  };
  uint64_t batches = 0;
  get(&batches, 8);
  if (batches > bytes.size()) Fail("{}: bad batch count {}", path.string(), batches);
  std::vector<std::vector<float>> hidden(batches);
  for (auto& h : hidden) {
    uint64_t n = 0;
    get(&n, 8);
    if (n > bytes.size() / sizeof(float)) Fail("{}: bad value count {}", path.string(), n);
    h.resize(n);
    get(h.data(), n * sizeof(float));
  }
  if (at != bytes.size()) Fail("{}: {} trailing bytes", path.string(), bytes.size() - at);
  return hidden;
}

std::filesystem::path ModelDir(const std::filesystem::path& dir, size_t n) { return dir / fmt::format("model.{}", n); }
std::filesystem::path HiddenFile(const std::filesystem::path& dir, size_t n) {
  return dir / fmt::format("hidden.{}.bin", n);
}

}  // namespace

void SaveRunCheckpoint(const std::filesystem::path& dir, const Model& model, const BlockCheckpoint& state,
                       const nlohmann::json& run, const std::filesystem::path& source_dir) {
  std::filesystem::create_directories(dir);
  const size_t n = state.next_layer;
  std::filesystem::remove_all(ModelDir(dir, n));  // a leftover of a crash before progress.json named it
  SaveQuantizedModel(model, ModelDir(dir, n), source_dir, {{"partial", true}, {"next_layer", n}}, n);
  WriteHidden(HiddenFile(dir, n), state);
  const nlohmann::json progress = {{"next_layer", n}, {"run", run}, {"report", ReportToJson(state.report)}};
  WriteFileAtomic(dir / "progress.json", progress.dump(1) + "\n");
  for (size_t old = 0; old < n; ++old) {  // superseded blocks
    std::filesystem::remove_all(ModelDir(dir, old));
    std::filesystem::remove(HiddenFile(dir, old));
  }
}

BlockCheckpoint LoadRunCheckpoint(const std::filesystem::path& dir, const nlohmann::json& run, Model& model) {
  const std::filesystem::path progress_path = dir / "progress.json";
  if (!std::filesystem::exists(progress_path)) Fail("{}: nothing to resume (no progress.json)", dir.string());
  nlohmann::json progress;
  try {
    progress = nlohmann::json::parse(ReadTextFile(progress_path));
  } catch (const nlohmann::json::parse_error& e) {
    Fail("{}: not valid JSON: {}", progress_path.string(), e.what());
  }
  if (!progress.is_object() || !progress.contains("next_layer") || !progress["next_layer"].is_number_unsigned() ||
      !progress.contains("report"))
    Fail("{}: missing field 'next_layer' or 'report'", progress_path.string());
  if (progress.value("run", nlohmann::json()) != run)
    Fail("{}: the interrupted run used another recipe, calibration or model; delete {} to start over",
         progress_path.string(), dir.string());
  const size_t n = progress["next_layer"].get<size_t>();
  const std::filesystem::path saved_dir = ModelDir(dir, n);
  Model saved = LoadModel(saved_dir);
  if (saved.config.n_layers != n || n > model.config.n_layers)
    Fail("{}: holds {} blocks, progress.json says {} of {}", saved_dir.string(), saved.config.n_layers, n,
         model.config.n_layers);
  ModelWeights& w = model.weights;
  w.embed = std::move(saved.weights.embed);
  w.final_norm = std::move(saved.weights.final_norm);
  w.lm_head = std::move(saved.weights.lm_head);
  model.config.tie_embeddings = saved.config.tie_embeddings;  // a rotated run unties them
  ValidateEnds(model.config, w, saved_dir.string());
  for (size_t i = 0; i < n; ++i) {
    w.layers[i] = std::move(saved.weights.layers[i]);
    ValidateLayer(model.config, w.layers[i], i, saved_dir.string());
  }
  BlockCheckpoint state;
  state.next_layer = n;
  state.hidden = DecodeHidden(HiddenFile(dir, n));
  state.hidden_batches = state.hidden.size();
  state.report = ReportFromJson(progress["report"]);
  return state;
}

}  // namespace lowbit
