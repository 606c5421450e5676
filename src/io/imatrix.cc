#include "io/imatrix.h"

#include <cstring>

#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"

namespace lowbit {
namespace {

constexpr std::string_view kSums = ".in_sum2", kCounts = ".counts";

std::span<const std::byte> AsBytes(const std::vector<float>& v) { return std::as_bytes(std::span(v)); }

}  // namespace

ImportanceMatrix ReadImatrix(const std::filesystem::path& path) {
  if (path.extension() == ".dat")
    Fail("{}: the legacy imatrix .dat format is not read; convert it with llama.cpp's `llama-imatrix --in-file {} -o "
         "imatrix.gguf`", path.string(), path.string());
  const GgufFile f = GgufFile::Open(path);
  const std::string source = path.string();
  if (!f.Find("general.type") || f.GetString("general.type") != "imatrix")
    Fail("{}: key 'general.type' must be \"imatrix\" (not an importance matrix)", source);
  ImportanceMatrix m;
  if (f.Find("imatrix.datasets")) m.datasets = f.GetArrayOf<std::string>("imatrix.datasets");
  m.chunk_count = f.GetU32Or("imatrix.chunk_count", 0);
  m.chunk_size = f.GetU32Or("imatrix.chunk_size", 0);
  for (const GgufTensorInfo& t : f.tensors()) {
    if (!t.name.ends_with(kSums)) continue;
    const std::string name = t.name.substr(0, t.name.size() - kSums.size());
    const GgufTensorInfo* counts = f.FindTensor(name + std::string(kCounts));
    if (!counts) Fail("{}: tensor '{}' has no '{}{}' beside it", source, t.name, name, kCounts);
    if (t.ggml_type != kGgmlF32 || counts->ggml_type != kGgmlF32)
      Fail("{}: tensors '{}' and '{}' must be F32", source, t.name, counts->name);
    const uint64_t n_mat = counts->n_elements;
    if (n_mat == 0 || t.n_elements % n_mat != 0 || t.row_length() * n_mat != t.n_elements)
      Fail("{}: tensor '{}' ({} values) does not split into the {} matrices of '{}'", source, t.name, t.n_elements,
           n_mat, counts->name);
    const std::vector<float> sums = DequantizeGgufTensor(t), count = DequantizeGgufTensor(*counts);
    const uint64_t cols = t.row_length();
    std::vector<float> mean(sums.size());
    for (uint64_t j = 0; j < n_mat; ++j)
      for (uint64_t i = 0; i < cols; ++i) mean[j * cols + i] = count[j] > 0 ? sums[j * cols + i] / count[j] : 1.0f;
    m.columns.emplace(name, std::move(mean));
  }
  if (m.columns.empty()) Fail("{}: no '*{}' tensors (an empty importance matrix)", source, kSums);
  return m;
}

void WriteImatrix(const std::filesystem::path& path, const std::map<std::string, ImatrixEntry, std::less<>>& entries,
                  const std::vector<std::string>& datasets, uint32_t chunk_count, uint32_t chunk_size) {
  GgufWriter out(path);
  out.Set("general.type", std::string("imatrix"));
  out.Set("imatrix.datasets", GgufArray{datasets});
  out.Set("imatrix.chunk_count", chunk_count);
  out.Set("imatrix.chunk_size", chunk_size);
  for (const auto& [name, e] : entries) {
    const uint64_t n_mat = e.counts.size();
    LOWBIT_CHECK(n_mat > 0 && e.sum_squares.size() % n_mat == 0);
    out.DeclareTensor(name + std::string(kSums), {e.sum_squares.size() / n_mat, n_mat});
    out.DeclareTensor(name + std::string(kCounts), {1, n_mat});
  }
  for (const auto& [name, e] : entries) {
    out.WriteTensor(name + std::string(kSums), kGgmlF32, AsBytes(e.sum_squares));
    out.WriteTensor(name + std::string(kCounts), kGgmlF32, AsBytes(e.counts));
  }
  out.Commit();
}

}  // namespace lowbit
