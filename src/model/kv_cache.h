// The key/value cache of one sequence, fp32: [layer][position][kv_dim] for K and for V.
// (Issue-level work adds paged and quantized caches behind the same accessors.)
#pragma once

#include <cstddef>
#include <vector>

#include "model/config.h"

namespace lowbit {

class KvCache {
 public:
  KvCache(const ModelConfig& config, size_t capacity);

  size_t size() const { return size_; }          // positions filled
  size_t capacity() const { return capacity_; }
  void Clear() { size_ = 0; }
  void Advance(size_t n) { size_ += n; }         // after a forward pass filled n more positions

  float* K(size_t layer, size_t pos) { return &k_[(layer * capacity_ + pos) * kv_dim_]; }
  float* V(size_t layer, size_t pos) { return &v_[(layer * capacity_ + pos) * kv_dim_]; }
  const float* K(size_t layer, size_t pos) const { return &k_[(layer * capacity_ + pos) * kv_dim_]; }
  const float* V(size_t layer, size_t pos) const { return &v_[(layer * capacity_ + pos) * kv_dim_]; }
  size_t bytes() const { return (k_.size() + v_.size()) * sizeof(float); }

 private:
  size_t capacity_, kv_dim_, size_ = 0;
  std::vector<float> k_, v_;
};

}  // namespace lowbit
