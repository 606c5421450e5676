#include "plan/report_charts.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace lowbit::report {
namespace {

constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                    "#9467bd", "#8c564b", "#e377c2", "#17becf"};
constexpr double kLeft = 72, kRight = 24, kTop = 38, kBottom = 54;

std::string P(double v) { return fmt::format("{:.1f}", v); }  // a pixel coordinate

// 1, 2 or 5 times a power of ten, at least `raw`.
double NiceStep(double raw) {
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  double p0 = 0, p1 = 1;  // pixels of lo and hi

  double Map(double v) const {
    const double t = log ? (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo)) : (v - lo) / (hi - lo);
    return p0 + t * (p1 - p0);
  }
  std::vector<double> Ticks() const {
    std::vector<double> t;
    if (log) {
      for (double d = std::pow(10.0, std::ceil(std::log10(lo) - 1e-9)); d <= hi * (1 + 1e-9); d *= 10) t.push_back(d);
    } else {
      const double step = NiceStep((hi - lo) / 5);
      for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) t.push_back(v);
    }
    return t;
  }
};

// An axis covering the finite (and, for log, positive) values, padded to round numbers.
Axis FitAxis(std::vector<double> values, bool log, double p0, double p1) {
  std::erase_if(values, [&](double v) { return !std::isfinite(v) || (log && v <= 0); });
  Axis a;
  a.log = log;
  a.p0 = p0;
  a.p1 = p1;
  if (values.empty()) {
    a.lo = log ? 1 : 0;
    a.hi = log ? 10 : 1;
    return a;
  }
  const auto [mn, mx] = std::minmax_element(values.begin(), values.end());
  if (log) {
    a.lo = std::pow(10.0, std::floor(std::log10(*mn)));
    a.hi = std::pow(10.0, std::ceil(std::log10(*mx)));
    if (a.hi <= a.lo) a.hi = a.lo * 10;
  } else {
    double lo = *mn, hi = *mx;
    if (hi - lo < 1e-12 * std::max(1.0, std::abs(hi)))
      lo -= std::max(0.5, std::abs(lo) * 0.1), hi += std::max(0.5, std::abs(hi) * 0.1);
    const double step = NiceStep((hi - lo) / 5);
    a.lo = std::floor(lo / step) * step;
    a.hi = std::ceil(hi / step) * step;
  }
  return a;
}

std::string Open(double w, double h, const std::string& title) {
  return fmt::format(
      "<svg class=\"chart\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" role=\"img\">"
      "<title>{2}</title><rect width=\"{0}\" height=\"{1}\" fill=\"#fff\"/>"
      "<text x=\"{3}\" y=\"22\" class=\"ct\">{2}</text>",
      w, h, Escape(title), P(kLeft));
}

// Log-axis ticks are powers of ten: plain up to 10^4, then 1e+05 and so on.
std::string TickText(double v, bool log) {
  if (!log) return Num(v, 3);
  return v >= 1 && v < 1e5 ? fmt::format("{:.0f}", v) : Num(v, 1);
}

// Grid, tick labels and axis titles of a plot area.
std::string Frame(const Axis& x, const Axis& y, const std::string& x_label, const std::string& y_label) {
  std::string s;
  for (double t : x.Ticks()) {
    const double px = x.Map(t);
    s += fmt::format(
        "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" class=\"grid\"/>"
        "<text x=\"{0}\" y=\"{3}\" class=\"tick\" text-anchor=\"middle\">{4}</text>",
        P(px), P(y.p0), P(y.p1), P(y.p0 + 16), TickText(t, x.log));
  }
  for (double t : y.Ticks()) {
    const double py = y.Map(t);
    s += fmt::format(
        "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" class=\"grid\"/>"
        "<text x=\"{3}\" y=\"{4}\" class=\"tick\" text-anchor=\"end\">{5}</text>",
        P(x.p0), P(py), P(x.p1), P(x.p0 - 6), P(py + 4), TickText(t, y.log));
  }
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" class=\"frame\"/>", P(x.p0), P(y.p1),
                   P(x.p1 - x.p0), P(y.p0 - y.p1));
  s += fmt::format("<text x=\"{}\" y=\"{}\" class=\"label\" text-anchor=\"middle\">{}</text>", P((x.p0 + x.p1) / 2),
                   P(y.p0 + 38), Escape(x_label));
  s += fmt::format("<text transform=\"translate({},{}) rotate(-90)\" class=\"label\" text-anchor=\"middle\">{}</text>",
                   P(x.p0 - 54), P((y.p0 + y.p1) / 2), Escape(y_label));
  return s;
}

// Point labels that do not overlap: sorted by height, each label is pushed down until it clears the
// one above it in the same column band, with a leader line when it moved.
struct Label {
  double x, y;  // the point
  std::string text;
};
std::string PlaceLabels(std::vector<Label> labels) {
  constexpr double kLine = 11;
  std::sort(labels.begin(), labels.end(), [](const Label& a, const Label& b) { return a.y < b.y; });
  std::vector<std::pair<double, double>> placed;  // (x, baseline) of labels drawn so far
  std::string s;
  for (const Label& l : labels) {
    double y = l.y - 6;
    for (bool moved = true; moved;) {
      moved = false;
      for (const auto& [px, py] : placed)
        if (std::abs(px - l.x) < 90 && std::abs(py - y) < kLine - 0.01) {
          y = py + kLine;
          moved = true;
        }
    }
    placed.push_back({l.x, y});
    if (y - (l.y - 6) > 1)
      s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"leader\"/>", P(l.x + 3), P(l.y),
                       P(l.x + 7), P(y - 3));
    s += fmt::format("<text x=\"{}\" y=\"{}\" class=\"pl\">{}</text>", P(l.x + 8), P(y), Escape(l.text));
  }
  return s;
}

// Viridis, sampled at five stops and interpolated.
std::string Viridis(double t) {
  static const int stops[5][3] = {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
  t = std::clamp(t, 0.0, 1.0) * 4;
  const int i = std::min(3, static_cast<int>(t));
  const double f = t - i;
  int c[3];
  for (int k = 0; k < 3; ++k) c[k] = static_cast<int>(std::lround(stops[i][k] + f * (stops[i + 1][k] - stops[i][k])));
  return fmt::format("#{:02x}{:02x}{:02x}", c[0], c[1], c[2]);
}

}  // namespace

std::string Escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string Num(double v, int significant) {
  if (!std::isfinite(v)) return "-";
  if (v != 0 && (std::abs(v) >= 1e6 || std::abs(v) < 1e-3))
    return fmt::format("{:.{}e}", v, std::max(0, significant - 1));
  return fmt::format("{:.{}g}", v, significant);
}

std::string ScatterSvg(const std::vector<ScatterPoint>& points, const ScatterOptions& o) {
  constexpr double kW = 560, kH = 380;
  std::vector<ScatterPoint> pts;
  for (const ScatterPoint& p : points)
    if (std::isfinite(p.x) && std::isfinite(p.y) && (!o.log_y || p.y > 0)) pts.push_back(p);
  std::vector<double> xs, ys;
  for (const ScatterPoint& p : pts) xs.push_back(p.x), ys.push_back(p.y);
  if (o.reference_y > 0) ys.push_back(o.reference_y);
  const Axis x = FitAxis(xs, false, kLeft, kW - kRight);
  const Axis y = FitAxis(ys, o.log_y, kH - kBottom, kTop);
  std::string s = Open(kW, kH, o.title) + Frame(x, y, o.x_label, o.y_label);
  if (o.reference_y > 0 && std::isfinite(o.reference_y)) {
    const double py = y.Map(o.reference_y);
    s += fmt::format(
        "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"ref\"/>"
        "<text x=\"{}\" y=\"{}\" class=\"tick\">{}</text>",
        P(x.p0), P(py), P(x.p1), P(py), P(x.p0 + 4), P(py - 4), Escape(o.reference_label));
  }
  if (o.pareto && !pts.empty()) {
    std::vector<ScatterPoint> sorted = pts;
    std::sort(sorted.begin(), sorted.end(),
              [](const auto& a, const auto& b) { return a.x != b.x ? a.x < b.x : a.y < b.y; });
    std::string line;
    double best = INFINITY;
    for (const ScatterPoint& p : sorted)
      if (p.y < best) {
        best = p.y;
        line += fmt::format("{},{} ", P(x.Map(p.x)), P(y.Map(p.y)));
      }
    s += fmt::format("<polyline points=\"{}\" class=\"pareto\"><title>Pareto frontier</title></polyline>", line);
  }
  std::map<std::string, size_t> colours;
  std::vector<Label> labels;
  for (const ScatterPoint& p : pts) {
    const size_t c = colours.emplace(p.series, colours.size()).first->second;
    s += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"5\" fill=\"{}\"><title>{}</title></circle>", P(x.Map(p.x)),
                     P(y.Map(p.y)), kPalette[c % 8], Escape(p.tooltip.empty() ? p.label : p.tooltip));
    labels.push_back({x.Map(p.x), y.Map(p.y), p.label});
  }
  s += PlaceLabels(labels);
  // Legend in the title row, right-aligned.
  double lx = kW - kRight;
  for (auto it = colours.rbegin(); it != colours.rend(); ++it) {
    if (it->first.empty()) continue;
    lx -= 16 + 6.5 * static_cast<double>(it->first.size());
    s +=
        fmt::format("<circle cx=\"{}\" cy=\"18\" r=\"4\" fill=\"{}\"/><text x=\"{}\" y=\"22\" class=\"tick\">{}</text>",
                    P(lx), kPalette[it->second % 8], P(lx + 7), Escape(it->first));
  }
  if (pts.empty())
    s += fmt::format("<text x=\"{}\" y=\"{}\" class=\"label\" text-anchor=\"middle\">no data</text>", P(kW / 2),
                     P(kH / 2));
  return s + "</svg>";
}

std::string HeatmapSvg(const Heatmap& h, double lo, double hi, std::string_view value_name) {
  const size_t rows = h.row_labels.size(), cols = h.col_labels.size();
  const double cell_w = 56, cell_h = rows > 40 ? 8 : rows > 16 ? 14 : 20, left = 78, top = 64;
  const double w = left + cell_w * static_cast<double>(cols) + 24;
  const double h_px = top + cell_h * static_cast<double>(rows) + 58;
  std::string s = fmt::format(
      "<svg class=\"chart\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" role=\"img\">"
      "<title>{2}</title><rect width=\"{0}\" height=\"{1}\" fill=\"#fff\"/>"
      "<text x=\"8\" y=\"22\" class=\"ct\">{2}</text>",
      P(w), P(h_px), Escape(h.title));
  const double llo = std::log10(lo), lhi = std::log10(hi);
  for (size_t c = 0; c < cols; ++c)
    s += fmt::format("<text x=\"{}\" y=\"{}\" class=\"tick\" text-anchor=\"middle\">{}</text>",
                     P(left + cell_w * (c + 0.5)), P(top - 8), Escape(h.col_labels[c]));
  for (size_t r = 0; r < rows; ++r) {
    if (rows <= 40 || r % 4 == 0)
      s += fmt::format("<text x=\"{}\" y=\"{}\" class=\"tick\" text-anchor=\"end\">{}</text>", P(left - 6),
                       P(top + cell_h * (r + 0.5) + 4), Escape(h.row_labels[r]));
    for (size_t c = 0; c < cols; ++c) {
      const double v = r < h.values.size() && c < h.values[r].size() ? h.values[r][c] : NAN;
      const bool ok = std::isfinite(v) && v > 0 && lhi > llo;
      const std::string fill = ok                          ? Viridis((std::log10(v) - llo) / (lhi - llo))
                               : std::isfinite(v) && v > 0 ? Viridis(0.5)
                                                           : "#eeeeee";
      s += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{} {}: {} {}</title></rect>",
          P(left + cell_w * c), P(top + cell_h * r), P(cell_w - 1), P(cell_h - 1), fill, Escape(h.row_labels[r]),
          Escape(h.col_labels[c]), Escape(value_name), Num(v));
    }
  }
  // Colour bar.
  const double by = top + cell_h * static_cast<double>(rows) + 16, bw = std::min(240.0, w - left - 24);
  for (int i = 0; i < 24; ++i)
    s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"10\" fill=\"{}\"/>", P(left + bw * i / 24), P(by),
                     P(bw / 24 + 0.5), Viridis(i / 23.0));
  s += fmt::format(
      "<text x=\"{}\" y=\"{}\" class=\"tick\">{}</text><text x=\"{}\" y=\"{}\" class=\"tick\" "
      "text-anchor=\"end\">{}</text><text x=\"{}\" y=\"{}\" class=\"tick\" text-anchor=\"middle\">{} (log "
      "scale)</text>",
      P(left), P(by + 24), Num(lo, 3), P(left + bw), P(by + 24), Num(hi, 3), P(left + bw / 2), P(by + 24),
      Escape(value_name));
  return s + "</svg>";
}

std::string RooflineSvg(const std::string& title, double bandwidth, const std::vector<Roof>& roofs,
                        const std::vector<RooflinePoint>& points) {
  constexpr double kW = 620, kH = 400;
  double peak_max = 0, ridge_max = 1;
  for (const Roof& r : roofs)
    if (r.peak_flops > 0 && bandwidth > 0)
      peak_max = std::max(peak_max, r.peak_flops), ridge_max = std::max(ridge_max, r.peak_flops / bandwidth);
  std::vector<double> xs = {0.5, ridge_max * 8}, ys = {peak_max * 2};
  for (const RooflinePoint& p : points)
    if (std::isfinite(p.intensity) && p.intensity > 0) xs.push_back(p.intensity), ys.push_back(p.flops);
  const Axis x = FitAxis(xs, true, kLeft, kW - kRight);
  ys.push_back(bandwidth * x.lo);
  Axis y = FitAxis(ys, true, kH - kBottom, kTop);
  std::string s = Open(kW, kH, title) + Frame(x, y, "arithmetic intensity (FLOP/byte)", "attainable FLOP/s");
  size_t c = 0;
  for (const Roof& r : roofs) {
    if (!(r.peak_flops > 0) || !(bandwidth > 0)) continue;
    const double ridge = r.peak_flops / bandwidth;
    s += fmt::format(
        "<polyline points=\"{},{} {},{} {},{}\" class=\"roof\" stroke=\"{}\"><title>{} roof: {} FLOP/s, "
        "ridge {} FLOP/byte</title></polyline>",
        P(x.Map(x.lo)), P(y.Map(bandwidth * x.lo)), P(x.Map(ridge)), P(y.Map(r.peak_flops)), P(x.Map(x.hi)),
        P(y.Map(r.peak_flops)), kPalette[c % 8], Escape(r.label), Num(r.peak_flops, 4), Num(ridge, 3));
    s += fmt::format("<text x=\"{}\" y=\"{}\" class=\"tick\" text-anchor=\"end\" fill=\"{}\">{} {} TFLOP/s</text>",
                     P(x.p1 - 4), P(y.Map(r.peak_flops) - 5), kPalette[c % 8], Escape(r.label),
                     Num(r.peak_flops / 1e12, 4));
    ++c;
  }
  std::vector<Label> labels;
  for (const RooflinePoint& p : points) {
    if (!(p.intensity > 0) || !(p.flops > 0) || !std::isfinite(p.intensity) || !std::isfinite(p.flops)) continue;
    s += fmt::format(
        "<circle cx=\"{}\" cy=\"{}\" r=\"5\" class=\"{}\"><title>{}: {} FLOP/byte, {} FLOP/s</title></circle>",
        P(x.Map(p.intensity)), P(y.Map(p.flops)), p.hollow ? "pt hollow" : "pt", Escape(p.label), Num(p.intensity, 3),
        Num(p.flops, 3));
    labels.push_back({x.Map(p.intensity), y.Map(p.flops), p.label});
  }
  return s + PlaceLabels(labels) + "</svg>";
}

std::string StackedBarsSvg(const std::vector<StackedBar>& bars, const StackedBarOptions& o) {
  constexpr double kW = 760, kLabel = 120, kBar = 22, kGap = 10, kTopPad = 84;
  const double h = kTopPad + (kBar + kGap) * static_cast<double>(bars.size()) + 48;
  double max_total = 0;
  for (const StackedBar& b : bars) {
    double t = 0;
    for (double v : b.values) t += std::isfinite(v) && v > 0 ? v : 0;
    max_total = std::max(max_total, t);
  }
  for (const auto& [label, v] : o.limits)
    if (std::isfinite(v)) max_total = std::max(max_total, v);
  Axis x = FitAxis({0.0, max_total > 0 ? max_total * 1.05 : 1.0}, false, kLabel, kW - kRight);
  x.lo = 0;
  std::string s = fmt::format(
      "<svg class=\"chart\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" role=\"img\">"
      "<title>{2}</title><rect width=\"{0}\" height=\"{1}\" fill=\"#fff\"/>"
      "<text x=\"8\" y=\"22\" class=\"ct\">{2}</text>",
      P(kW), P(h), Escape(o.title));
  double lx = kLabel;
  for (size_t c = 0; c < o.categories.size(); ++c) {
    s += fmt::format(
        "<rect x=\"{}\" y=\"34\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{}\" y=\"43\" "
        "class=\"tick\">{}</text>",
        P(lx), kPalette[c % 8], P(lx + 13), Escape(o.categories[c]));
    lx += 22 + 6.5 * static_cast<double>(o.categories[c].size());
  }
  const double bottom = kTopPad + (kBar + kGap) * static_cast<double>(bars.size());
  for (double t : x.Ticks())
    s += fmt::format(
        "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" class=\"grid\"/><text x=\"{0}\" y=\"{3}\" "
        "class=\"tick\" text-anchor=\"middle\">{4}</text>",
        P(x.Map(t)), P(kTopPad - 6), P(bottom), P(bottom + 14), Num(t, 3));
  s += fmt::format("<text x=\"{}\" y=\"{}\" class=\"label\" text-anchor=\"middle\">{}</text>", P((kLabel + kW) / 2),
                   P(bottom + 34), Escape(o.unit));
  for (size_t b = 0; b < bars.size(); ++b) {
    const double y = kTopPad + (kBar + kGap) * static_cast<double>(b);
    s += fmt::format("<text x=\"{}\" y=\"{}\" class=\"tick\" text-anchor=\"end\">{}</text>", P(kLabel - 6),
                     P(y + kBar / 2 + 4), Escape(bars[b].label));
    double at = 0;
    for (size_t c = 0; c < bars[b].values.size(); ++c) {
      const double v = bars[b].values[c];
      if (!std::isfinite(v) || v <= 0) continue;
      s += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{} {}: {} {}</title></rect>",
          P(x.Map(at)), P(y), P(std::max(0.5, x.Map(at + v) - x.Map(at))), P(kBar), kPalette[c % 8],
          Escape(bars[b].label), Escape(c < o.categories.size() ? o.categories[c] : ""), Num(v), Escape(o.unit));
      at += v;
    }
  }
  for (size_t i = 0; i < o.limits.size(); ++i) {
    const auto& [label, v] = o.limits[i];
    if (!std::isfinite(v) || v <= 0) continue;
    const double ty = kTopPad - 10 - 12 * static_cast<double>(o.limits.size() - 1 - i);
    s += fmt::format(
        "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" class=\"ref\"/><text x=\"{3}\" y=\"{4}\" "
        "class=\"tick\" text-anchor=\"end\">{5} {6}</text>",
        P(x.Map(v)), P(ty + 2), P(bottom), P(x.Map(v) - 3), P(ty), Escape(label), Num(v, 4));
  }
  return s + "</svg>";
}

}  // namespace lowbit::report
