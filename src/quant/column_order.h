// Act-order storage (GPTQ's desc_act without static groups, compressed-tensors' actorder "group"):
// a quantized weight whose input columns are stored in another order than the input's, so that
// each scale group is a contiguous run of stored columns. `order[j]` is the input column stored at
// position j; an empty order is the identity. The checkpoint formats say the same with a group
// index (g_idx: the group of each input column) over codes kept in input order.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "quant/quantized_tensor.h"

namespace lowbit {

// A quantized weight as an act-order checkpoint holds it: the tensor in stored column order, and
// that order (empty: input order).
struct OrderedTensor {
  QuantizedTensor tensor;
  std::vector<uint32_t> order;
};

// The stored order a group index implies: the columns sorted by group, ties in input order. Empty
// when g_idx is already column / group. Throws Error naming `what` when a group index is out of
// range or a group does not hold `group` columns (the last one may hold fewer): such a grouping has
// no contiguous form.
std::vector<uint32_t> OrderFromGroupIndex(std::span<const uint32_t> g_idx, uint64_t group, std::string_view what);

// The group index of each input column when stored column j belongs to group j / group.
std::vector<int32_t> GroupIndexOf(std::span<const uint32_t> order, uint64_t cols, uint64_t group);

// Reorders the columns of `t` within each of its scale groups so that each group's columns are in
// input order, the form OrderFromGroupIndex reads back (the values are unchanged: a group shares its
// scales, so its columns' order within it is free). An order that ends up the identity is cleared.
void CanonicalGroupOrder(OrderedTensor& t);

// Whether `order` is a permutation of [0, n) (an empty order is the identity, and valid).
bool IsColumnOrder(std::span<const uint32_t> order, uint64_t n);

// Row-major m [rows x cols] with its columns in `order`: out[r * cols + j] = m[r * cols + order[j]].
std::vector<float> GatherColumns(std::span<const float> m, uint64_t cols, std::span<const uint32_t> order);
void GatherColumns(const float* m, uint64_t rows, uint64_t cols, std::span<const uint32_t> order, float* out);

// The symmetric [n x n] matrix h with rows and columns in `order` (a Hessian seen by stored columns).
std::vector<double> GatherSymmetric(std::span<const double> h, uint64_t n, std::span<const uint32_t> order);

// The order that sorts columns by descending importance (a Hessian's diagonal), ties in input order.
std::vector<uint32_t> DescendingOrder(std::span<const double> importance);

}  // namespace lowbit
