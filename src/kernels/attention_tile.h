// One step of blocked attention with an online softmax (flash-attention style): a tile of n
// cached positions (K and V rows, each head_dim floats) against the query heads that share
// them. Per head it keeps a running maximum, normaliser and unnormalised output, rescaled when
// the maximum grows, so no score matrix longer than one tile ever exists.
#pragma once

#include <cstddef>

namespace lowbit {

struct OnlineSoftmax {
  float* max;  // [heads], start at -inf
  float* sum;  // [heads], start at 0
  float* acc;  // [heads x head_dim], start at 0; output = acc / sum
};

struct AttentionTile {
  const float* k;  // row i at k + i * k_stride
  size_t k_stride;
  const float* v;
  size_t v_stride;
  size_t n;  // positions in the tile
};

// q: [heads x head_dim]; scores: scratch of at least tile.n floats. A score is q.k * scale, then
// softcap * tanh(score / softcap) when softcap > 0 (Gemma 2's attention logit soft-capping).
void AttendTile(const float* q, size_t heads, size_t head_dim, float scale, float softcap, const AttentionTile& tile,
                OnlineSoftmax state, float* scores);
void AttendTileRef(const float* q, size_t heads, size_t head_dim, float scale, float softcap,
                   const AttentionTile& tile, OnlineSoftmax state, float* scores);

}  // namespace lowbit
