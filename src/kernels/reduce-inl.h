// Horizontal sums shared by the Highway kernels (per-target include, Highway's -inl.h pattern).
#if defined(LOWBIT_KERNELS_REDUCE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LOWBIT_KERNELS_REDUCE_INL_H_
#undef LOWBIT_KERNELS_REDUCE_INL_H_
#else
#define LOWBIT_KERNELS_REDUCE_INL_H_
#endif

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace lowbit {
namespace HWY_NAMESPACE {

#if HWY_TARGET != HWY_SCALAR
// Halves a vector until one 128-bit block is left, adding the halves.
template <class D>
HWY_INLINE hwy::HWY_NAMESPACE::Vec<hwy::HWY_NAMESPACE::Full128<float>> FoldToBlock(D d, hwy::HWY_NAMESPACE::Vec<D> v) {
  namespace hn = hwy::HWY_NAMESPACE;
  if constexpr (hn::MaxLanes(D()) > 4) {
    const hn::Half<D> dh;
    return FoldToBlock(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)));
  } else {
    (void)d;
    return v;
  }
}

// The sums of four vectors in lanes 0..3 of one block: two rounds of interleaved adds and the
// block fold, a quarter of the work of four separate horizontal reductions (which cost as much
// as a dot product itself when rows are short: head_dim 32, or 256-wide small models).
template <class D, class V>
HWY_INLINE hwy::HWY_NAMESPACE::Vec<hwy::HWY_NAMESPACE::Full128<float>> SumOfFour(D d, V a, V b, V c, V e) {
  namespace hn = hwy::HWY_NAMESPACE;
  const auto ab = hn::Add(hn::InterleaveLower(d, a, b), hn::InterleaveUpper(d, a, b));
  const auto ce = hn::Add(hn::InterleaveLower(d, c, e), hn::InterleaveUpper(d, c, e));
  const hn::Repartition<uint64_t, D> d64;
  const auto lo = hn::InterleaveLower(d64, hn::BitCast(d64, ab), hn::BitCast(d64, ce));
  const auto hi = hn::InterleaveUpper(d64, hn::BitCast(d64, ab), hn::BitCast(d64, ce));
  return FoldToBlock(d, hn::Add(hn::BitCast(d, lo), hn::BitCast(d, hi)));
}
#endif

}  // namespace HWY_NAMESPACE
}  // namespace lowbit
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
