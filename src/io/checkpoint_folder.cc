#include "io/checkpoint_folder.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <system_error>

#include "core/error.h"
#include "core/file_util.h"
#include "formats/minifloat.h"
#include "io/hf_names.h"
#include "model/config.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;

// What a loader or tokenizer may need next to the weights (SentencePiece and BPE tokenizers).
constexpr const char* kCopiedFiles[] = {"tokenizer.model",  "tokenizer.json",          "tokenizer_config.json",
                                        "special_tokens_map.json", "added_tokens.json", "vocab.json",
                                        "merges.txt",       "generation_config.json"};

// The saved config.json is the source's, so its geometry must be the model's, or the folder
// would not load back.
void CheckSameArchitecture(const ModelConfig& src, const ModelConfig& m, const std::string& source) {
  const std::pair<const char*, std::pair<uint64_t, uint64_t>> fields[] = {
      {"vocab_size", {src.vocab_size, m.vocab_size}},     {"hidden_size", {src.dim, m.dim}},
      {"num_hidden_layers", {src.n_layers, m.n_layers}}, {"num_attention_heads", {src.n_heads, m.n_heads}},
      {"num_key_value_heads", {src.n_kv_heads, m.n_kv_heads}}, {"head_dim", {src.head_dim, m.head_dim}},
      {"intermediate_size", {src.ffn_dim, m.ffn_dim}},
      {"attention bias", {src.qkv_bias, m.qkv_bias}}};
  for (const auto& [name, v] : fields)
    if (v.first != v.second)
      Fail("{}: {} is {} but the model being saved has {}; config.json must come from the model's source", source,
           name, v.first, v.second);
  // A model may untie lm_head (rotation folds the final norm into it; a quantized lm_head is its own
  // tensor), and config.json then says so; it cannot tie one the source keeps apart.
  if (m.tie_embeddings && !src.tie_embeddings)
    Fail("{}: tie_word_embeddings is false but the model being saved ties lm_head to the embeddings; config.json "
         "must come from the model's source", source);
}

}  // namespace

std::vector<NamedLinear> HfBlockLinears(const ModelConfig& c, const LayerWeights& l, size_t index) {
  const std::string p = fmt::format("model.layers.{}.", index);
  std::vector<NamedLinear> out;
  for (const ConstBlockLinear& bl : BlockLinears(l)) out.push_back({p + HfLinearName(c, bl.name), bl.linear});
  return out;
}

std::vector<NamedLinear> ModelLinears(const Model& m, size_t blocks) {
  std::vector<NamedLinear> out;
  for (size_t i = 0; i < blocks; ++i) {
    const std::vector<NamedLinear> block = HfBlockLinears(m.config, m.weights.layers[i], i);
    out.insert(out.end(), block.begin(), block.end());
  }
  if (!m.config.tie_embeddings) out.push_back({"lm_head", &m.weights.lm_head});
  return out;
}

void TensorList::AddFloats(std::string name, std::vector<uint64_t> shape, std::span<const float> values) {
  const auto exact = [&](auto narrow, auto widen) {
    return std::all_of(values.begin(), values.end(), [&](float v) { return widen(narrow(v)) == v; });
  };
  const auto store16 = [&](DType dtype, auto narrow) {
    std::vector<std::byte> bytes(values.size() * 2);
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t h = narrow(values[i]);
      std::memcpy(&bytes[2 * i], &h, 2);
    }
    AddOwnedBytes(std::move(name), dtype, std::move(shape), std::move(bytes));
  };
  if (exact(Fp32ToBf16, Bf16ToFp32)) store16(DType::kBF16, Fp32ToBf16);
  else if (exact(Fp32ToFp16, Fp16ToFp32)) store16(DType::kF16, Fp32ToFp16);
  else Add(std::move(name), DType::kF32, std::move(shape), values);
}

void TensorList::AddOwnedFloats(std::string name, std::vector<uint64_t> shape, const std::vector<float>& values) {
  const auto bytes = std::as_bytes(std::span(values));
  const std::vector<std::byte>& kept = owned_.emplace_back(bytes.begin(), bytes.end());
  AddFloats(std::move(name), std::move(shape), std::span(reinterpret_cast<const float*>(kept.data()), values.size()));
}

uint64_t TensorList::bytes() const {
  uint64_t total = 0;
  for (const TensorToWrite& t : tensors_) total += t.data.size();
  return total;
}

std::vector<TensorToWrite> TensorList::Sorted() && {
  std::stable_sort(tensors_.begin(), tensors_.end(), [](const TensorToWrite& a, const TensorToWrite& b) {
    const uint64_t sa = DTypeSize(a.dtype), sb = DTypeSize(b.dtype);
    return sa != sb ? sa > sb : a.name < b.name;
  });
  return std::move(tensors_);
}

DType ScaleDType(ScaleType t) {
  switch (t) {
    case ScaleType::kF32: return DType::kF32;
    case ScaleType::kF16: return DType::kF16;
    case ScaleType::kBF16: return DType::kBF16;
    case ScaleType::kE8M0:
    case ScaleType::kUE4M3: return DType::kU8;
    case ScaleType::kI8: return DType::kI8;
  }
  return DType::kU8;
}

ShardedSafetensorsWriter::ShardedSafetensorsWriter(fs::path dir, uint64_t max_shard_bytes,
                                                   std::map<std::string, std::string> metadata)
    : dir_(std::move(dir)), max_shard_bytes_(max_shard_bytes), metadata_(std::move(metadata)) {}

namespace {
// A dtype's element-size class: 0 for 8-byte elements, 1 for 4, 2 for 2, 3 for 1.
size_t SizeClass(DType dtype) { return static_cast<size_t>(std::countr_zero(8 / DTypeSize(dtype))); }
}  // namespace

fs::path ShardedSafetensorsWriter::SpillPath(size_t size_class) const {
  return dir_ / fmt::format("shard-{}.partial.{}", written_.size(), 8 >> size_class);
}

void ShardedSafetensorsWriter::Add(TensorList list) {
  const uint64_t size = list.bytes();
  const uint64_t in_shard = spilled_[0] + spilled_[1] + spilled_[2] + spilled_[3];
  if (!pending_.empty() && in_shard + size > max_shard_bytes_) Flush();
  total_ += size;
  std::array<std::ofstream, 4> spills;
  for (const TensorToWrite& t : std::move(list).Sorted()) {
    const size_t c = SizeClass(t.dtype);
    if (!spills[c].is_open()) spills[c].open(SpillPath(c), std::ios::binary | std::ios::app);
    spills[c].write(reinterpret_cast<const char*>(t.data.data()), static_cast<std::streamsize>(t.data.size()));
    if (!spills[c]) Fail("{}: cannot write (disk full?)", SpillPath(c).string());
    pending_.push_back({t.name, t.dtype, t.shape, t.data.size()});
    spilled_[c] += t.data.size();
  }
  for (std::ofstream& f : spills)
    if (f.is_open() && !f.flush()) Fail("{}: cannot write (disk full?)", dir_.string());
}

void ShardedSafetensorsWriter::Flush() {
  std::vector<TensorEntry> entries = std::move(pending_);
  std::stable_sort(entries.begin(), entries.end(),
                   [](const TensorEntry& a, const TensorEntry& b) { return SizeClass(a.dtype) < SizeClass(b.dtype); });
  std::vector<std::string> names;
  for (const TensorEntry& t : entries) names.push_back(t.name);
  const fs::path path = dir_ / fmt::format("shard-{}.partial", written_.size());
  const std::string prefix = SafetensorsPrefix(path.string(), entries, metadata_);
  AtomicFileWriter out(path);
  out.Write(std::as_bytes(std::span(prefix)));
  std::vector<char> buffer(size_t{4} << 20);
  for (size_t c = 0; c < spilled_.size(); ++c) {
    if (spilled_[c] == 0) continue;
    const fs::path spill = SpillPath(c);
    std::ifstream in(spill, std::ios::binary);
    uint64_t left = spilled_[c];
    while (left > 0) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(left, buffer.size()));
      if (!in.read(buffer.data(), static_cast<std::streamsize>(n))) Fail("{}: cannot read back", spill.string());
      out.Write(std::as_bytes(std::span(buffer.data(), n)));
      left -= n;
    }
    in.close();
    fs::remove(spill);
  }
  out.Commit();
  written_.emplace_back(path, std::move(names));
  spilled_ = {};
}

size_t ShardedSafetensorsWriter::Finish() {
  if (!pending_.empty() || written_.empty()) Flush();
  const size_t n = written_.size();
  if (n == 1) {
    fs::rename(written_[0].first, dir_ / "model.safetensors");
    return 1;
  }
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (size_t i = 0; i < n; ++i) {
    const std::string name = fmt::format("model-{:05}-of-{:05}.safetensors", i + 1, n);
    fs::rename(written_[i].first, dir_ / name);
    for (const std::string& tensor : written_[i].second) weight_map[tensor] = name;
  }
  const nlohmann::ordered_json index = {{"metadata", {{"total_size", total_}}}, {"weight_map", std::move(weight_map)}};
  WriteFileAtomic(dir_ / "model.safetensors.index.json", index.dump(2) + "\n");
  return n;
}

fs::path CheckpointDestination(const fs::path& out_dir) {
  fs::path dest = out_dir.lexically_normal();
  return dest.has_filename() ? dest : dest.parent_path();
}

void CheckQuantizedModelTarget(const ModelConfig& config, const fs::path& out_dir, const fs::path& source_dir) {
  const fs::path dest = CheckpointDestination(out_dir);
  const std::string out = dest.string();
  RemoveStaleTemporaries(dest);  // OUT.tmp-<pid> of a run killed while writing OUT
  std::error_code ec;
  const fs::file_status status = fs::symlink_status(dest, ec);
  if (fs::exists(status)) {
    if (!fs::is_directory(status)) Fail("{}: already exists and is not a directory; refusing to overwrite it", out);
    if (!fs::is_empty(dest, ec)) Fail("{}: already exists and is not empty; refusing to overwrite it", out);
  }
  // An empty source_dir must not resolve to ./config.json.
  if (source_dir.empty() || !fs::is_regular_file(source_dir / "config.json"))
    Fail("{}: quantized checkpoints are written as Hugging Face folders and take config.json and the tokenizer "
         "from the source folder, which has none (GGUF sources are written through the folder they came from; "
         "llama2.c sources are not supported yet)",
         source_dir.empty() ? std::string("model source") : source_dir.string());
  // Adjacent-pair RoPE where the architecture rotates halves means Q/K rows in llama.cpp's permuted order;
  // stored under HF names they would be read as rotate-half and silently give wrong logits
  // (GgufSourceFolder puts them back first). DeepSeek's checkpoints rotate adjacent pairs themselves.
  const fs::path source_config = source_dir / "config.json";
  const ModelConfig source = ReadHfConfig(source_config);
  if (config.rope_style != source.rope_style)
    Fail("{}: the model uses adjacent-pair RoPE (GGUF / llama2.c row order); writing it as a Hugging Face "
         "checkpoint needs the Q/K rows in rotate-half order", out);
  CheckSameArchitecture(source, config, source_config.string());
}

void CopySideFiles(const fs::path& source_dir, const fs::path& dest) {
  for (const char* name : kCopiedFiles) {
    const fs::path src = source_dir / name;
    std::error_code ec;
    if (!fs::exists(src, ec)) continue;
    if (!fs::is_regular_file(src, ec)) Fail("{}: not a regular file; cannot copy it into the checkpoint", src.string());
    if (!fs::copy_file(src, dest / name, ec) || ec)
      Fail("{}: cannot copy to {}: {}", src.string(), (dest / name).string(), ec.message());
  }
}

void WriteFolderAtomic(const fs::path& out_dir, const std::function<void(const fs::path&)>& fill) {
  const fs::path dest = CheckpointDestination(out_dir);
  const fs::path tmp = dest.string() + ".tmp-" + std::to_string(::getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);  // left by a crashed run that had our pid (other dead pids: swept by the target check)
  fs::create_directories(tmp, ec);
  if (ec) Fail("{}: cannot create: {}", tmp.string(), ec.message());
  try {
    fill(tmp);
    // rename(2) fails if dest appeared meanwhile with content, so a concurrent writer's folder
    // is never clobbered.
    fs::rename(tmp, dest, ec);
    if (ec) Fail("{}: cannot move the finished checkpoint into place: {}", dest.string(), ec.message());
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw;
  }
}

}  // namespace lowbit
