#include "pipeline/speed_job.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "io/model_loader.h"
#include "model/quantize_weights.h"
#include "pipeline/session.h"
#include "quant/scheme.h"

namespace lowbit {
namespace {

// The model as loaded ("loaded", or "fp32": 16-bit linears widened), or RTN-quantized in `format`
// (every linear, lm_head included). The last format takes the loaded model itself, so a
// single-format run holds one copy (its peak memory is the model's).
Model ModelIn(Model& loaded, const std::string& format, bool last) {
  Model model = last ? std::move(loaded) : loaded;
  if (format == "fp32") {
    for (LayerWeights& l : model.weights.layers)
      for (const BlockLinear& bl : BlockLinears(l)) WidenPlainFloat(*bl.linear);
    WidenPlainFloat(model.weights.lm_head);
  } else if (format != "loaded") {
    QuantizeLinears(model.weights, ParseScheme(format), "rtn", /*include_lm_head=*/true);
  }
  return model;
}

}  // namespace

std::vector<FormatSpeeds> RunSpeedJob(const SpeedJob& job) {
  Model loaded = LoadModel(job.model, LoadOptions{.keep_16bit = true});  // as the runtime commands load it
  std::vector<FormatSpeeds> results(job.formats.size());
  std::vector<Model> models;  // rounds > 1: every format's model, built up front
  for (size_t i = 0; job.rounds > 1 && i < job.formats.size(); ++i)
    models.push_back(ModelIn(loaded, job.formats[i], i + 1 == job.formats.size()));
  for (size_t round = 0; round < std::max<size_t>(1, job.rounds); ++round)
    for (size_t i = 0; i < job.formats.size(); ++i) {
      const Model single = models.empty() ? ModelIn(loaded, job.formats[i], i + 1 == job.formats.size()) : Model{};
      const Model& model = models.empty() ? single : models[i];
      const KvCacheOptions kv = KvCacheOptionsFor(job.kv_cache_dtype, job.model, "", model.config.n_layers);
      const std::vector<BatchSpeed> speeds =
          job.decode ? MeasureDecode(model, job.batches, job.ctx, job.steps, job.threads, kv)
                     : MeasurePrefill(model, job.batches, job.ctx, job.threads, kv);
      FormatSpeeds& r = results[i];
      if (r.speeds.empty()) {
        r = {job.formats[i], LinearWeightBytes(model.weights), speeds};
        continue;
      }
      // A shared machine's slow phases hit every format alike: keep each one's best.
      for (size_t b = 0; b < speeds.size(); ++b)
        if (speeds[b].tokens_per_second > r.speeds[b].tokens_per_second) r.speeds[b] = speeds[b];
    }
  return results;
}

nlohmann::json SpeedsJson(const std::vector<FormatSpeeds>& results) {
  nlohmann::json out = nlohmann::json::array();
  for (const FormatSpeeds& r : results)
    for (const BatchSpeed& s : r.speeds)
      out.push_back({{"format", r.format}, {"batch", s.batch}, {"tokens_per_second", s.tokens_per_second},
                     {"ms_per_token", s.ms_per_token}, {"weight_gbps", s.weight_gbps},
                     {"weight_bytes", r.weight_bytes}});
  return out;
}

}  // namespace lowbit
