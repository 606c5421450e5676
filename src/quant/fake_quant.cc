#include "quant/fake_quant.h"

#include <algorithm>
#include <cmath>

namespace lowbit {

CellFakeQuant::CellFakeQuant(const QuantizedTensor& q, uint64_t cell)
    : element_(q.scheme().element), table_(q.decode_table().data()) {
  const QuantScheme& s = q.scheme();
  scale_ = q.Scale(cell) * q.tensor_scale();
  encode_scale_ = scale_ != 0 ? scale_ : 1.0f;  // as EncodeRow: an all-zero cell encodes zeros
  const float zero = q.Zero(cell);
  if (element_->kind == ElementKind::kInt) {
    qmax_ = static_cast<float>((1u << element_->bits) - 1);
    if (!s.asymmetric()) post_ = static_cast<float>(SymmetricZero(*element_));
    else if (s.zero_type == ZeroType::kInt) post_ = zero;
    else pre_ = zero;
  }
  if (s.asymmetric()) bias_ = -zero * scale_;
}

float CellFakeQuant::operator()(float x) const {
  uint32_t code;
  switch (element_->kind) {
    case ElementKind::kInt:
      code = static_cast<uint32_t>(std::clamp(std::nearbyint(x / encode_scale_ + pre_) + post_, 0.0f, qmax_));
      break;
    case ElementKind::kFloat:
      code = EncodeMiniFloat(*element_->minifloat, x / encode_scale_, Overflow::kSaturate);
      break;
    default:
      code = EncodeElement(*element_, x / encode_scale_, 0);
  }
  return std::fma(table_[code], scale_, bias_);
}

}  // namespace lowbit
