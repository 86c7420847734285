// The row kernels behind resize.h: portable scalar ones and AVX2 ones with identical integer sums.
#pragma once
#include <cstdint>
#include <vector>

#include "resize.h"

namespace fl {
namespace kernels {

// True when the AVX2 kernels may run: the CPU has AVX2 and FASTLOADER_RESIZE_SCALAR is unset
// (tests set it to check that both kernel sets give the same bytes).
bool use_avx2();

// Pillow's clip8: drop the fixed-point fraction, clamp to 0..255.
inline uint8_t clip8(int32_t v) {
    v >>= kPrecisionBits;  // arithmetic shift, as Pillow's clip8 lookup index
    return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// Writes one pixel's 3 bytes (the low 3 bytes of rgb) without touching its neighbours.
inline void store_rgb(uint8_t *dst, uint32_t rgb) {
    dst[0] = static_cast<uint8_t>(rgb);
    dst[1] = static_cast<uint8_t>(rgb >> 8);
    dst[2] = static_cast<uint8_t>(rgb >> 16);
}

// Horizontal taps over one row of RGB pixels; output pixel xx lands at out_size-1-xx when flip.
void horizontal_scalar(const uint8_t *in, uint8_t *out, const ResampleAxis &axis, bool flip);

// One pixel per SSE register (any tap count); reads one byte past the row's last pixel.
void horizontal_avx2(const uint8_t *in, uint8_t *out, const ResampleAxis &axis, bool flip);

// The horizontal taps of a uniform axis laid out for horizontal_pairs_avx2: per output pair,
// per tap, 4 copies of the first pixel's weight then 4 of the second's.
void expand_pair_weights(const ResampleAxis &axis, std::vector<int32_t> &pairs);

// Two output pixels per AVX2 register; needs a uniform axis and its expanded pair weights.
void horizontal_pairs_avx2(const uint8_t *in, uint8_t *out, const ResampleAxis &axis,
                           const int32_t *pair_weights, bool flip);

// Builds a HorizontalPlan (resize.h) for a uniform axis of at most kPositionsMaxTaps taps.
void plan_positions(const ResampleAxis &axis, bool flip, HorizontalPlan &plan);

// The horizontal pass from a HorizontalPlan; reads up to 16 bytes from each window's start, so
// source rows need kRowSlack.
void horizontal_positions_avx2(const uint8_t *in, uint8_t *out, const HorizontalPlan &plan);

// out[i] = clip8(half + sum_t rows[t][i] * weights[t]) for i < len: one vertical output row.
void vertical_scalar(const uint8_t *const *rows, const int32_t *weights, int taps, int len,
                     uint8_t *out);
void vertical_avx2(const uint8_t *const *rows, const int32_t *weights, int taps, int len,
                   uint8_t *out);

}  // namespace kernels
}  // namespace fl
