// Inline SVG charts for `lowbit report`: plain strings of SVG markup (no scripts, no external
// references, no xmlns URL: inline SVG in HTML5 needs none), so the page renders anywhere offline.
// Tooltips are SVG <title> elements. Non-finite values are dropped before they reach a coordinate,
// so no "NaN" ever appears in the markup.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace lowbit::report {

std::string Escape(std::string_view text);       // &, <, >, ", ' for HTML text and attributes
std::string Num(double v, int significant = 4);  // "-" for NaN/inf

struct ScatterPoint {
  double x = 0, y = 0;
  std::string label;   // drawn beside the point
  std::string series;  // colour key (e.g. the quantization method)
  std::string tooltip;
};

struct ScatterOptions {
  std::string title, x_label, y_label;
  bool log_y = false;
  bool pareto = false;     // draw the lower-left frontier (lower x and lower y both better)
  double reference_y = 0;  // > 0: dashed horizontal line (e.g. the base model's PPL)
  std::string reference_label;
};
std::string ScatterSvg(const std::vector<ScatterPoint>& points, const ScatterOptions& o);

// rows x cols cells; NaN = no value. Colours on a log10 scale shared through [lo, hi].
struct Heatmap {
  std::string title;
  std::vector<std::string> row_labels, col_labels;
  std::vector<std::vector<double>> values;
};
std::string HeatmapSvg(const Heatmap& h, double lo, double hi, std::string_view value_name);

struct Roof {
  std::string label;  // "bf16", "fp8", "fp4"
  double peak_flops = 0;
};
struct RooflinePoint {
  std::string label;
  double intensity = 0;  // FLOP per byte
  double flops = 0;      // attainable FLOP/s
  bool hollow = false;   // batch-1 point (filled: at the plan's batch)
};
std::string RooflineSvg(const std::string& title, double bandwidth, const std::vector<Roof>& roofs,
                        const std::vector<RooflinePoint>& points);

struct StackedBar {
  std::string label;
  std::vector<double> values;  // one per category, same units as the limits
};
struct StackedBarOptions {
  std::string title, unit;
  std::vector<std::string> categories;
  std::vector<std::pair<std::string, double>> limits;  // vertical marker lines (e.g. device memory)
};
std::string StackedBarsSvg(const std::vector<StackedBar>& bars, const StackedBarOptions& o);

}  // namespace lowbit::report
