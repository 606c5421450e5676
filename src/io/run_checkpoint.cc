#include "io/run_checkpoint.h"

#include <fmt/format.h>

#include <cstring>
#include <memory>

#include "core/checksum.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/json_util.h"
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

// Checks the layout of hidden.N.bin up front and returns where each batch's values start; the
// values are then read a batch at a time.
std::vector<std::span<const std::byte>> IndexHidden(const MappedFile& file) {
  const std::string path = file.path().string();
  const std::span<const std::byte> bytes = file.bytes();
  size_t at = 0;
  auto get_u64 = [&] {
    uint64_t v = 0;
    if (bytes.size() - at < 8) Fail("{}: truncated at byte {}", path, at);
    std::memcpy(&v, bytes.data() + at, 8);
    at += 8;
    return v;
  };
  const uint64_t batches = get_u64();
  if (batches > bytes.size()) Fail("{}: bad batch count {}", path, batches);
  std::vector<std::span<const std::byte>> index;
  for (uint64_t i = 0; i < batches; ++i) {
    const uint64_t n = get_u64();
    if (n > (bytes.size() - at) / sizeof(float)) Fail("{}: batch {}: {} values run past the end", path, i, n);
    index.push_back(bytes.subspan(at, n * sizeof(float)));
    at += n * sizeof(float);
  }
  if (at != bytes.size()) Fail("{}: {} trailing bytes", path, bytes.size() - at);
  return index;
}

std::filesystem::path ModelDir(const std::filesystem::path& dir, size_t n) { return dir / fmt::format("model.{}", n); }
std::filesystem::path HiddenFile(const std::filesystem::path& dir, size_t n) {
  return dir / fmt::format("hidden.{}.bin", n);
}

// The checksum of every file of block n's state, by path relative to `dir`: progress.json names
// them, and a resumed run refuses state that changed since (an edit, a partial copy, a bad disk).
nlohmann::json StateChecksums(const std::filesystem::path& dir, size_t n) {
  std::vector<std::filesystem::path> files = {HiddenFile(dir, n)};
  for (const auto& entry : std::filesystem::recursive_directory_iterator(ModelDir(dir, n)))
    if (entry.is_regular_file()) files.push_back(entry.path());
  nlohmann::json sums = nlohmann::json::object();
  for (const std::filesystem::path& file : files) {
    const MappedFile mapped(file);
    sums[std::filesystem::relative(file, dir).generic_string()] = fmt::format("{:016x}", Fnv1a64(mapped.bytes()));
  }
  return sums;
}

void VerifyChecksums(const std::filesystem::path& dir, const JsonView& saved) {
  for (const auto& [name, unused] : saved.ExpectObject().value().items()) {
    const std::filesystem::path file = dir / name;
    if (!std::filesystem::exists(file)) saved[name].Fail(fmt::format("names {}, which is missing", file.string()));
    const MappedFile mapped(file);
    if (fmt::format("{:016x}", Fnv1a64(mapped.bytes())) != saved.Get<std::string>(name))
      Fail("{}: its contents changed since the run saved it (checksum mismatch); delete {} to start over",
           file.string(), dir.string());
  }
}

}  // namespace

void SaveRunCheckpoint(const std::filesystem::path& dir, const Model& model, const BlockCheckpoint& state,
                       const nlohmann::json& run, const std::filesystem::path& source_dir) {
  std::filesystem::create_directories(dir);
  RemoveStaleTemporariesIn(dir);  // model.N.tmp-<pid>, hidden.N.bin.tmp-<pid> of a killed run
  const size_t n = state.next_layer;
  std::filesystem::remove_all(ModelDir(dir, n));  // a leftover of a crash before progress.json named it
  SaveQuantizedModel(model, ModelDir(dir, n), source_dir, {{"partial", true}, {"next_layer", n}}, n);
  WriteHidden(HiddenFile(dir, n), state);
  const nlohmann::json progress = {{"next_layer", n}, {"run", run}, {"report", ReportToJson(state.report)},
                                   {"checksums", StateChecksums(dir, n)}};
  WriteFileAtomic(dir / "progress.json", progress.dump(1) + "\n");
  for (size_t old = 0; old < n; ++old) {  // superseded blocks
    std::filesystem::remove_all(ModelDir(dir, old));
    std::filesystem::remove(HiddenFile(dir, old));
  }
}

BlockCheckpoint LoadRunCheckpoint(const std::filesystem::path& dir, const nlohmann::json& run, Model& model) {
  const std::filesystem::path progress_path = dir / "progress.json";
  if (!std::filesystem::exists(progress_path)) Fail("{}: nothing to resume (no progress.json)", dir.string());
  const nlohmann::json parsed = ReadJsonFile(progress_path);
  const JsonView progress = JsonView(parsed, progress_path.string()).ExpectObject();
  if (progress["run"].value() != run)
    Fail("{}: the interrupted run used another recipe, calibration or model; delete {} to start over",
         progress_path.string(), dir.string());
  const size_t n = progress.Get<uint32_t>("next_layer");
  VerifyChecksums(dir, progress["checksums"]);
  const std::filesystem::path saved_dir = ModelDir(dir, n);
  // Written by the interrupted run from a source it checked (or was told to accept with
  // --allow-nonfinite): its values are taken as they are.
  Model saved = LoadModel(saved_dir, LoadOptions{.allow_nonfinite = true});
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
  auto hidden_file = std::make_shared<const MappedFile>(HiddenFile(dir, n));
  auto index = std::make_shared<const std::vector<std::span<const std::byte>>>(IndexHidden(*hidden_file));
  state.hidden_batches = index->size();
  state.read_hidden = [hidden_file, index](size_t batch) {
    const std::span<const std::byte> bytes = index->at(batch);
    std::vector<float> values(bytes.size() / sizeof(float));
    std::memcpy(values.data(), bytes.data(), bytes.size());
    ReleasePages(bytes);
    return values;
  };
  state.report = ReportFromJson(progress["report"]);
  return state;
}

}  // namespace lowbit
