// KIVI tiles (TileElement::kU4, kU2) on AVX-512 VNNI: the two dot products of a tile step as
// integer dots (vpdpbusd, 64 byte products per instruction, twice the fp32 FMAs' rate), each bit
// plane of the codes used as bytes. Four code rows are interleaved so that each 32-bit lane holds four
// codes along the reduction: four K channels of one position, or four V positions of one element.
// The other factor is rounded to 8 bits: the query times K's channel scales (q_j a_j) to int8 with
// one scale per 32 channels (llama.cpp's Q8_0 grid for the query of a quantized K cache), and the
// softmax weights times V's row scales to uint8 with one scale per head and tile. Both roundings
// sit well below the 4-bit cache's own error: on the bundled model they move the int4 cache's KL
// against fp32 from 1.12e-4 to 1.16e-4 (ctx 256), top-1 agreement unchanged. Evaluation keeps fp32.
// Internal to kernels/: attention_tile.cc calls these for groups of up to 4 query heads.
#pragma once

#include <cstddef>

#include "kernels/attention_tile.h"

namespace lowbit::kivi_int8 {

// The CPU has AVX-512 VNNI and the tile fits these kernels: 4-bit codes with whole 32-position slices
// of K's channel rows (a block of a multiple of 32 positions) and a head size of a multiple of 32, or
// 2-bit codes in blocks of 32 positions and a head size of a multiple of 64; heads of at most 512.
bool Fits(const AttentionTile& t, size_t head_dim);

// Positions [c0, c1) of K's channel rows (multiples of 32 that cover the tile's; 2-bit: [0, 32)), for
// query heads [0, heads) (heads <= 4, head h's at q + h head_dim): sc[h (c1 - c0) + i] = scale (q.K_i),
// with K = code x the tile's k_scales + k_biases per channel.
void Scores(const float* q, size_t heads, size_t head_dim, float scale, const AttentionTile& t, size_t c0, size_t c1,
            float* sc);

// acc[h head_dim + e] += sum_i w_hi V_ie over the tile's rows (V = code x v_scales + v_biases per row),
// for heads [0, heads) (heads <= 4), head h's weights w_h at weights + h stride. False, with acc
// untouched, when some w_i x v_scales[i] is negative (a V row scale below zero, which the KIVI
// quantizer never writes): the caller sums that tile in fp32.
bool Values(const float* weights, size_t stride, size_t heads, size_t head_dim, const AttentionTile& t, float* acc);

}  // namespace lowbit::kivi_int8
