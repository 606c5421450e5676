#include "model/kv_cache.h"

#include "core/checked_math.h"

namespace lowbit {

KvCache::KvCache(const ModelConfig& config, size_t capacity)
    : capacity_(capacity), kv_dim_(config.kv_dim()),
      k_(CheckedProduct({config.n_layers, capacity, config.kv_dim()}, "KV cache")),
      v_(k_.size()) {}

}  // namespace lowbit
