#include "quant/column_order.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "formats/codec.h"

namespace lowbit {

std::vector<uint32_t> OrderFromGroupIndex(std::span<const uint32_t> g_idx, uint64_t group, std::string_view what) {
  const uint64_t cols = g_idx.size();
  LOWBIT_CHECK(group > 0);
  const uint64_t groups = (cols + group - 1) / group;
  bool in_order = true;
  std::vector<uint64_t> count(groups, 0);
  for (uint64_t i = 0; i < cols; ++i) {
    if (g_idx[i] >= groups)
      Fail("{}: input column {} is in group {}, but {} columns in groups of {} make {} groups", what, i,
           static_cast<int32_t>(g_idx[i]), cols, group, groups);
    ++count[g_idx[i]];
    in_order = in_order && g_idx[i] == i / group;
  }
  if (in_order) return {};
  for (uint64_t g = 0; g < groups; ++g) {
    const uint64_t want = std::min(group, cols - g * group);
    if (count[g] != want)
      Fail("{}: group {} holds {} input columns, not {}: act-order groups must each hold group_size columns", what, g,
           count[g], want);
  }
  std::vector<uint32_t> order(cols);
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return g_idx[a] < g_idx[b]; });
  return order;
}

std::vector<int32_t> GroupIndexOf(std::span<const uint32_t> order, uint64_t cols, uint64_t group) {
  std::vector<int32_t> g_idx(cols);
  for (uint64_t j = 0; j < cols; ++j) g_idx[order.empty() ? j : order[j]] = static_cast<int32_t>(j / group);
  return g_idx;
}

void CanonicalGroupOrder(OrderedTensor& t) {
  if (t.order.empty()) return;
  QuantizedTensor& q = t.tensor;
  LOWBIT_CHECK(q.scheme().granularity.kind == GranularityKind::kGroup && q.grid().cell_rows == 1);
  const uint64_t cols = q.cols(), group = q.scheme().granularity.group;
  const int bits = q.scheme().element->bits;
  const std::vector<int32_t> groups = GroupIndexOf(t.order, cols, group);
  const std::vector<uint32_t> canonical =
      OrderFromGroupIndex(std::vector<uint32_t>(groups.begin(), groups.end()), group, "order");
  // Stored column j of the canonical order is stored column source[j] of t's.
  std::vector<uint32_t> position(cols), source(cols);
  for (uint64_t j = 0; j < cols; ++j) position[t.order[j]] = static_cast<uint32_t>(j);
  for (uint64_t j = 0; j < cols; ++j) source[j] = canonical.empty() ? position[j] : position[canonical[j]];
  std::vector<uint8_t> row(q.row_bytes());
  for (uint64_t r = 0; r < q.rows(); ++r) {
    uint8_t* codes = q.codes().data() + r * q.row_bytes();
    std::copy_n(codes, row.size(), row.begin());
    for (uint64_t j = 0; j < cols; ++j) WriteCode(codes, j, bits, ReadCode(row.data(), source[j], bits));
  }
  t.order = canonical;
}

bool IsColumnOrder(std::span<const uint32_t> order, uint64_t n) {
  if (order.empty()) return true;
  if (order.size() != n) return false;
  std::vector<bool> seen(n, false);
  for (const uint32_t c : order) {
    if (c >= n || seen[c]) return false;
    seen[c] = true;
  }
  return true;
}

void GatherColumns(const float* m, uint64_t rows, uint64_t cols, std::span<const uint32_t> order, float* out) {
  for (uint64_t r = 0; r < rows; ++r) {
    const float* src = m + r * cols;
    float* dst = out + r * cols;
    for (uint64_t j = 0; j < cols; ++j) dst[j] = src[order[j]];
  }
}

std::vector<float> GatherColumns(std::span<const float> m, uint64_t cols, std::span<const uint32_t> order) {
  std::vector<float> out(m.size());
  GatherColumns(m.data(), cols ? m.size() / cols : 0, cols, order, out.data());
  return out;
}

std::vector<double> GatherSymmetric(std::span<const double> h, uint64_t n, std::span<const uint32_t> order) {
  std::vector<double> out(n * n);
  for (uint64_t i = 0; i < n; ++i)
    for (uint64_t j = 0; j < n; ++j) out[i * n + j] = h[order[i] * n + order[j]];
  return out;
}

std::vector<uint32_t> DescendingOrder(std::span<const double> importance) {
  std::vector<uint32_t> order(importance.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return importance[a] > importance[b]; });
  return order;
}

}  // namespace lowbit
