// The kernels behind fl::apply_pixel_program, shared by pixel_ops.cpp (colour, tables,
// histograms, dispatch) and pixel_ops_spatial.cpp (blur, sharpness, geometry). Each works in
// place on one contiguous RGB image and follows Pillow's C code step for step (the same float
// types and rounding), so the bytes match Pillow's.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "pixel_ops.h"

namespace fl::pixel {

// Image.blend(degenerate, image, alpha) for one byte: Pillow's float formula, truncation, clip.
inline uint8_t blend_byte(int degenerate, int value, float alpha) {
    float temp = static_cast<float>(degenerate) + alpha * static_cast<float>(value - degenerate);
    if (alpha >= 0.0f && alpha <= 1.0f) return static_cast<uint8_t>(temp);
    if (temp <= 0.0f) return 0;
    if (temp >= 255.0f) return 255;
    return static_cast<uint8_t>(temp);
}

// blend_byte with the alpha test hoisted out of a loop: kInside when 0 <= alpha <= 1.
template <bool kInside>
inline uint8_t blend_fast(int degenerate, int value, float alpha) {
    const float temp = static_cast<float>(degenerate) + alpha * static_cast<float>(value - degenerate);
    if (kInside) return static_cast<uint8_t>(temp);
    return static_cast<uint8_t>(std::clamp(temp, 0.0f, 255.0f));  // <= 0 -> 0, >= 255 -> 255
}

// out[i] = blend(degenerate[i], image[i], alpha) over n bytes (out may be image).
void blend_rows(const uint8_t *degenerate, const uint8_t *image, uint8_t *out, size_t n,
                float alpha);

// convert("L"): ITU-R 601-2 luma in 16-bit fixed point, as Pillow's L24.
inline uint8_t luma(const uint8_t *rgb) {
    return static_cast<uint8_t>((rgb[0] * 19595 + rgb[1] * 38470 + rgb[2] * 7471 + 0x8000) >> 16);
}

// The AVX2 kernels (pixel_ops_avx2*.cpp; stubs that do nothing where not built), the scalar ones'
// bytes: each does whole vectors and returns how far it got (pixels, bytes or rows, as named);
// the scalar kernel does the rest.
bool avx2_built();
size_t hue_avx2(uint8_t *image, size_t pixels, int shift);
size_t blend_rows_avx2(const uint8_t *degenerate, const uint8_t *image, uint8_t *out, size_t n,
                       float alpha);
size_t blend_constant_avx2(uint8_t *image, size_t bytes, int degenerate, float alpha);
size_t saturation_avx2(uint8_t *image, size_t pixels, float factor);
size_t luma_sum_avx2(const uint8_t *image, size_t pixels, uint64_t &sum);  // adds to sum
// Sharpness's SMOOTH filter: terms[j] = float(row[j]) * float(1 / 13) for n bytes; then one
// row's sums at bytes [3, done) from the terms of the rows above, at and below; returns done.
void smooth_terms_avx2(const uint8_t *row, float *terms, size_t n);
size_t smooth_row_avx2(const float *up, const float *mid_terms, const float *down,
                       const uint8_t *mid, uint8_t *smooth, size_t row_bytes);

// One box pass of GaussianBlur (BoxBlur.c): radius, and the 24-bit fixed-point weights of the
// whole (ww) and the fractional edge (fw) taps.
struct BoxLine {
    int radius;
    uint32_t ww, fw;
};
// The three passes along the rows, 8 rows at a time (buffer: 48 n + 8 words); returns rows done.
int blur_rows_avx2(uint8_t *image, int rows, int n, const BoxLine &box, uint32_t *buffer);
// One pass down the columns of bytes [0, done) of every row; returns done (row - row % 8).
size_t blur_columns_avx2(const uint8_t *in, uint8_t *out, int height, size_t row,
                         const BoxLine &box, uint32_t *acc);

// True when the AVX2 kernels run: built with them, the CPU has AVX2, the seam did not refuse.
bool simd_enabled();
// Test seam: the AVX2 kernels (where the CPU has them) or the scalar ones; returns the old.
bool set_simd(bool enabled);

void gaussian_blur(uint8_t *image, int height, int width, float radius, PixelScratch &scratch);
void sharpness(uint8_t *image, int height, int width, float factor, PixelScratch &scratch);
// SHEAR_X/Y, TRANSLATE_X/Y, ROTATE with magnitude p0: NEAREST, fill 0.
void geometric(uint8_t *image, int height, int width, int32_t code, float p0,
               PixelScratch &scratch);

}  // namespace fl::pixel
