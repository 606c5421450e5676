#include "quant/row_slices.h"

#include <algorithm>

#include "core/error.h"

namespace lowbit {
namespace {

// One cell spans every row: a tensor-wide scale (per tensor, or a block taller than the tensor), or no
// scale at all (plain 16-bit rows).
bool OneCellTall(const QuantizedTensor& q) { return q.grid().grid_rows <= 1 && q.grid().cell_rows >= q.rows(); }

void CheckSliceable(const QuantizedTensor& q, std::string_view what) {
  if (q.scheme().super_block)
    Fail("{}: {} keeps GGUF's super-block scales, which are not split or stacked by rows", what, q.scheme().ToString());
}

// Bytes of scale, zero and per grid row: each is stored grid row by grid row.
struct RowStrides {
  size_t scales, zeros;
  explicit RowStrides(const QuantizedTensor& q)
      : scales(q.scale_bytes().size() / q.grid().grid_rows), zeros(q.zero_bytes().size() / q.grid().grid_rows) {}
};

}  // namespace

QuantizedTensor SliceRows(const QuantizedTensor& q, uint64_t first, uint64_t n, std::string_view what) {
  CheckSliceable(q, what);
  LOWBIT_CHECK(first + n <= q.rows() && n > 0);
  QuantizedTensor out(q.scheme(), n, q.cols());
  out.set_tensor_scale(q.tensor_scale());
  std::copy_n(q.codes().begin() + first * q.row_bytes(), n * q.row_bytes(), out.codes().begin());
  if (OneCellTall(q)) {
    std::ranges::copy(q.scale_bytes(), out.scale_bytes().begin());
    std::ranges::copy(q.zero_bytes(), out.zero_bytes().begin());
    return out;
  }
  const uint64_t cell_rows = q.grid().cell_rows;
  if (first % cell_rows != 0 || ((first + n) % cell_rows != 0 && first + n != q.rows()))
    Fail("{}: rows {}..{} cut through scale cells {} rows tall ({})", what, first, first + n, cell_rows,
         q.scheme().ToString());
  const RowStrides s(q);
  const uint64_t grid_first = first / cell_rows;
  // (copy_n, not memcpy: a symmetric tensor's zeros are empty, a null pointer memcpy may not take)
  std::copy_n(q.scale_bytes().begin() + grid_first * s.scales, out.scale_bytes().size(), out.scale_bytes().begin());
  std::copy_n(q.zero_bytes().begin() + grid_first * s.zeros, out.zero_bytes().size(), out.zero_bytes().begin());
  return out;
}

QuantizedTensor StackRows(std::span<const QuantizedTensor* const> parts, std::string_view what) {
  LOWBIT_CHECK(!parts.empty());
  const QuantizedTensor& head = *parts.front();
  CheckSliceable(head, what);
  uint64_t rows = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const QuantizedTensor& p = *parts[i];
    if (p.scheme().ToString() != head.scheme().ToString() || p.cols() != head.cols())
      Fail("{}: part {} is {} [{} x {}], part 0 {} [{} x {}]; one matrix has one scheme and width", what, i,
           p.scheme().ToString(), p.rows(), p.cols(), head.scheme().ToString(), head.rows(), head.cols());
    if (p.tensor_scale() != head.tensor_scale())
      Fail("{}: part {} has tensor scale {}, part 0 {}; one matrix has one", what, i, p.tensor_scale(), head.tensor_scale());
    if (OneCellTall(head) && (!std::ranges::equal(p.scale_bytes(), head.scale_bytes()) ||
                              !std::ranges::equal(p.zero_bytes(), head.zero_bytes())))
      Fail("{}: part {} has another tensor-wide scale or zero point than part 0 ({}); one matrix has one", what, i,
           head.scheme().ToString());
    if (!OneCellTall(head) && i + 1 < parts.size() && p.rows() % head.grid().cell_rows != 0)
      Fail("{}: part {} has {} rows, not whole scale cells of {} rows ({})", what, i, p.rows(), head.grid().cell_rows,
           head.scheme().ToString());
    rows += p.rows();
  }
  QuantizedTensor out(head.scheme(), rows, head.cols());
  out.set_tensor_scale(head.tensor_scale());
  uint8_t* codes = out.codes().data();
  for (const QuantizedTensor* p : parts) codes = std::ranges::copy(p->codes(), codes).out;
  if (OneCellTall(head)) {
    if (out.grid().grid_rows > 1)
      Fail("{}: parts of {} rows would share scale blocks {} rows tall ({})", what, head.rows(), head.grid().cell_rows,
           head.scheme().ToString());
    std::ranges::copy(head.scale_bytes(), out.scale_bytes().begin());
    std::ranges::copy(head.zero_bytes(), out.zero_bytes().begin());
    return out;
  }
  uint8_t* scales = out.scale_bytes().data();
  uint8_t* zeros = out.zero_bytes().data();
  for (const QuantizedTensor* p : parts) {
    scales = std::ranges::copy(p->scale_bytes(), scales).out;
    zeros = std::ranges::copy(p->zero_bytes(), zeros).out;
  }
  return out;
}

}  // namespace lowbit
