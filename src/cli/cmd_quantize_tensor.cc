// `lowbit quantize-tensor`: RTN on one tensor of a safetensors model, with the error report.
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/front_door.h"
#include "cli/output.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "quant/error_report.h"
#include "quant/rtn.h"

namespace lowbit::cli {
namespace {

struct Options {
  std::string model, tensor, format, granularity;
  int group = 0;
  bool asym = false, json = false;
};

// Folds --granularity / --group / --asym into the scheme text.
std::string SchemeText(const Options& o) {
  std::string text = o.format;
  if (!o.granularity.empty()) {
    if (o.granularity == "group") {
      if (o.group == 0) Fail("--granularity group needs --group N");
      text += ":g" + std::to_string(o.group);
    } else if (o.granularity == "tensor" || o.granularity == "channel" || o.granularity == "token") {
      text += ":" + o.granularity;
    } else if (o.granularity.starts_with("block")) {
      text += ":" + o.granularity;
    } else {
      Fail("--granularity: unknown value '{}' (known: tensor, channel, group, block<R>x<C>, token)", o.granularity);
    }
    if (o.asym) text += ":asym";
    return text;
  }
  return SchemeTextFromFlags(text, o.group, o.asym);
}

void Run(const Options& o) {
  const QuantScheme scheme = ParseScheme(SchemeText(o));
  const SafetensorsModel model = SafetensorsModel::Open(o.model);
  const TensorView& t = model.Get(o.tensor);
  if (t.shape.empty() || t.shape.size() > 2)
    Fail("{}: tensor '{}' has {} dimensions; quantize-tensor takes 1-D or 2-D tensors", o.model, o.tensor,
         t.shape.size());
  const uint64_t rows = t.shape.size() == 2 ? t.shape[0] : 1;
  const uint64_t cols = t.shape.back();
  const std::vector<float> w = ToFloat32(t);
  const QuantizedTensor q = QuantizeRtn(w, rows, cols, scheme, o.tensor);
  const std::vector<float> back = q.Dequantize();
  const ErrorReport e = MeasureError(w, back, rows, cols);
  if (o.json) {
    nlohmann::json out = {{"tensor", o.tensor},
                          {"shape", {rows, cols}},
                          {"format", scheme.ToString()},
                          {"bits_per_weight", q.bits_per_weight()},
                          {"bytes", q.storage_bytes()}};
    out.update(ErrorReportJson(e));
    std::puts(out.dump(2).c_str());
    return;
  }
  PrintTable({"field", "value"},
             {{"tensor", o.tensor},
              {"shape", fmt::format("{} x {}", rows, cols)},
              {"format", scheme.ToString()},
              {"bits/weight", fmt::format("{:.5f}", q.bits_per_weight())},
              {"bytes", fmt::format("{} (fp32: {})", q.storage_bytes(), rows * cols * 4)},
              {"MSE", FormatNumber(e.mse)},
              {"SQNR dB", FormatNumber(e.sqnr_db)},
              {"max |error|", FormatNumber(e.max_abs_error)},
              {"worst channel", fmt::format("{} (MSE {})", e.worst_channel, FormatNumber(e.worst_channel_mse))}});
}

}  // namespace

void AddQuantizeTensorCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("quantize-tensor", "Round-to-nearest on one tensor, with its error report");
  auto o = std::make_shared<Options>();
  cmd->add_option("--model", o->model, "Model folder or .safetensors file")->required();
  cmd->add_option("--tensor", o->tensor, "Tensor name")->required();
  cmd->add_option("--format", o->format, "Format, e.g. int4, int4:g32, fp8_e4m3, mxfp4, nvfp4 (see `lowbit formats`)")
      ->required()
      ->check(SchemeName());
  cmd->add_option("--granularity", o->granularity, "tensor | channel | group | block<R>x<C> | token");
  cmd->add_option("--group", o->group, "Group size along the input dimension (-1 = whole row)")->check(GroupSize());
  cmd->add_flag("--asym", o->asym, "Asymmetric (zero-point) integers");
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o] { Run(*o); });
}

}  // namespace lowbit::cli
