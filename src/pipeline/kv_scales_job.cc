#include "pipeline/kv_scales_job.h"

#include <filesystem>

#include "core/file_util.h"
#include "model/kv_calibration.h"
#include "pipeline/session.h"

namespace lowbit {

nlohmann::json RunKvScalesJob(const KvScalesJob& job) {
  const KvDtype dtype = ParseKvDtype(job.dtype);  // a bad dtype fails before the model is read
  const LoadedModel m = LoadModelWithTokenizer(job.model, "");
  const auto windows =
      CalibrationWindows(*m.tokenizer, ReadTextFile(job.calib), job.calib, job.samples, job.length, job.seed);
  const KvScales s = CalibrateKvScales(m.model, windows, dtype, job.threads);
  const std::filesystem::path out = job.out.empty() ? KvScalesPathFor(job.model) : std::filesystem::path(job.out);
  WriteKvScales(s, out);
  return {{"out", out.string()}, {"dtype", job.dtype}, {"k_scales", s.k}, {"v_scales", s.v},
          {"windows", windows.size()}};
}

}  // namespace lowbit
