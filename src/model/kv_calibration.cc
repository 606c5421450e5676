#include "model/kv_calibration.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_util.h"
#include "core/file_util.h"
#include "formats/minifloat.h"
#include "model/forward.h"

namespace lowbit {

KvScales CalibrateKvScales(const Model& model, const std::vector<std::vector<int32_t>>& windows, KvDtype dtype,
                           size_t threads) {
  if (dtype != KvDtype::kFp8E4M3 && dtype != KvDtype::kFp8E5M2)
    Fail("calibrate-kv: static scales are for fp8_e4m3 / fp8_e5m2 caches, not {}", KvDtypeName(dtype));
  if (windows.empty()) Fail("calibrate-kv: no calibration windows");
  const ModelConfig& c = model.config;
  Engine engine(model, threads);  // fp32 cache: the values the FP8 cache will hold
  std::vector<float> k_max(c.n_layers, 0.0f), v_max(c.n_layers, 0.0f), scratch(c.head_dim);
  for (const std::vector<int32_t>& window : windows) {
    KvCache cache = engine.NewCache(window.size());
    engine.Forward(cache, window, false);
    const size_t last = window.size() - 1;
    for (size_t l = 0; l < c.n_layers; ++l)
      for (size_t h = 0; h < c.n_kv_heads; ++h)
        for (size_t p = 0; p <= last; ++p) {
          const float* k = cache.ReadK(l, h, p, p + 1, last, scratch.data()).data;
          for (size_t i = 0; i < c.head_dim; ++i) k_max[l] = std::max(k_max[l], std::fabs(k[i]));
          const float* v = cache.ReadV(l, h, p, p + 1, last, scratch.data()).data;
          for (size_t i = 0; i < c.head_dim; ++i) v_max[l] = std::max(v_max[l], std::fabs(v[i]));
        }
  }
  const float max_finite = static_cast<float>(MaxFinite(dtype == KvDtype::kFp8E4M3 ? kE4M3 : kE5M2));
  KvScales s{dtype, {}, {}};
  for (size_t l = 0; l < c.n_layers; ++l) {
    s.k.push_back(k_max[l] > 0 ? k_max[l] / max_finite : 1.0f);
    s.v.push_back(v_max[l] > 0 ? v_max[l] / max_finite : 1.0f);
  }
  return s;
}

std::filesystem::path KvScalesPathFor(const std::filesystem::path& model) {
  return (std::filesystem::is_directory(model) ? model : model.parent_path()) / "kv_cache_scales.json";
}

void WriteKvScales(const KvScales& s, const std::filesystem::path& path) {
  const nlohmann::json j = {{"dtype", KvDtypeName(s.dtype)}, {"k_scales", s.k}, {"v_scales", s.v}};
  WriteFileAtomic(path, j.dump(2) + "\n");
}

KvScales ReadKvScales(const std::filesystem::path& path, uint32_t n_layers) {
  const nlohmann::json parsed = ReadJsonFile(path);
  const JsonView j = JsonView(parsed, path.string()).ExpectObject();
  KvScales s;
  try {
    s.dtype = ParseKvDtype(j.Get<std::string>("dtype"));
  } catch (const Error& e) {
    if (std::string_view(e.what()).starts_with(path.string())) throw;
    j["dtype"].Fail(e.what());
  }
  for (const auto& [key, out] : {std::pair{"k_scales", &s.k}, std::pair{"v_scales", &s.v}}) {
    for (const JsonView& value : j[key].Items()) {
      out->push_back(value.As<float>());
      if (!(out->back() > 0)) value.Fail("must be a positive scale");
    }
    if (out->size() != n_layers)
      j[key].Fail(fmt::format("has {} scales for a model of {} layers", out->size(), n_layers));
  }
  return s;
}

}  // namespace lowbit
