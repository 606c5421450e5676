// One step of blocked attention with an online softmax (flash-attention style): a tile of n
// cached positions (K and V rows, each head_dim floats) against the query heads that share
// them. Per head it keeps a running maximum, normaliser and unnormalised output, rescaled when
// the maximum grows, so no score matrix longer than one tile ever exists.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lowbit {

struct OnlineSoftmax {
  float* max;  // [heads], start at -inf
  float* sum;  // [heads], start at 0
  float* acc;  // [heads x head_dim], start at 0; output = acc / sum
};

// How a tile's K and V rows are stored: fp32, or a KV cache read in place (each value widened in
// registers as it is used, never copied out to fp32 first): 16-bit floats, OCP FP8 (E4M3 "fn",
// E5M2) with one scale per tensor, int8 codes (offset by 128: value = (code - 128) x the row's
// scale) with one fp32 scale per row, or KIVI's unsigned 4- or 2-bit codes (packed low bits first)
// with an affine map per K channel and per V row.
enum class TileElement : uint8_t { kF32, kF16, kBF16, kE4M3, kE5M2, kI8, kU4, kU2 };

struct AttentionTile {
  const void* k;  // row i at element i * k_stride
  size_t k_stride;
  const void* v;
  size_t v_stride;
  size_t n;  // positions in the tile
  TileElement element = TileElement::kF32;
  const float* k_scales = nullptr;  // kI8: row i's scale, for K and for V
  const float* v_scales = nullptr;
  float k_tensor_scale = 1.0f, v_tensor_scale = 1.0f;  // kE4M3 / kE5M2: value = the FP8 value x this
  // kU4 / kU2 (KIVI): K is quantized per channel over a whole block of k_block positions, so channel
  // j's codes are the row at k + j * k_stride bytes and the tile's position i is its code k_first + i;
  // value = code x k_scales[j] + k_biases[j]. V row i (v + i * v_stride bytes, head_dim codes):
  // code x v_scales[i] + v_biases[i].
  const float* k_biases = nullptr;
  const float* v_biases = nullptr;
  size_t k_first = 0, k_block = 0;
  // The next tile's rows (same strides, at least n of them), when known: fetched from memory while
  // this one is computed. Decode attention streams the whole cache once per step, and without this
  // each tile's first loads waited on memory (ctx 16384 ran 3x slower per position than ctx 256).
  const void* next_k = nullptr;
  const void* next_v = nullptr;
  // kU4 / kU2 on AVX-512 VNNI: the dots may run on integers, the query and the weights rounded to 8 bits
  // (attention_kivi_int8.h), as generation and benchmarks run; evaluation keeps fp32 (false).
  bool int8_dots = false;
};

// q: [heads x head_dim]; scores: scratch of at least tile.n floats. A score is q.k * scale, then
// softcap * tanh(score / softcap) when softcap > 0 (Gemma 2's attention logit soft-capping).
void AttendTile(const float* q, size_t heads, size_t head_dim, float scale, float softcap, const AttentionTile& tile,
                OnlineSoftmax state, float* scores);
void AttendTileRef(const float* q, size_t heads, size_t head_dim, float scale, float softcap,
                   const AttentionTile& tile, OnlineSoftmax state, float* scores);

}  // namespace lowbit
