// Pillow-exact bilinear resampling (antialiased on downscale) of uint8 RGB rows.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fl {

// Fixed-point precision of Pillow's 8-bit resampler (Resample.c: 32 - 8 - 2).
constexpr int kPrecisionBits = 22;

// Filter taps of one axis: for each output index, the first input index, the tap count and
// ksize fixed-point weights. Built exactly as Pillow's precompute_coeffs + normalize_coeffs_8bpc.
struct ResampleAxis {
    int in_size = 0;
    int out_size = 0;
    int ksize = 0;
    bool identity = false;          // output == input, Pillow skips the pass
    bool uniform = false;           // every output reads exactly ksize inputs (zero-padded)
    std::vector<int> bounds;        // [2 * out]: first input index, tap count
    std::vector<int32_t> weights;   // [out * ksize]
    std::vector<double> scratch;    // double weights before fixed-point rounding
};

// Taps mapping the source interval [in0, in1) of an axis of in_size pixels onto out_size pixels.
void build_axis(int in_size, float in0, float in1, int out_size, ResampleAxis &axis);

// The input rows [first, last) that the vertical taps of axis read.
void axis_span(const ResampleAxis &axis, int &first, int &last);

// Bytes a row buffer needs past its last pixel (the SIMD path reads 4 bytes per 3-byte pixel).
constexpr size_t kRowSlack = 16;

// One row of 3-channel pixels through the horizontal taps; mirrored output when flip.
void resample_row(const uint8_t *in, uint8_t *out, const ResampleAxis &axis, bool flip);

// Copy (or mirror) a row of width 3-channel pixels.
void copy_row(const uint8_t *in, uint8_t *out, int width, bool flip);

// Vertical pass: output row yy from rows[] (rows[i] is input row first + i) of row_len bytes.
void resample_column_row(const uint8_t *const *rows, int yy, int row_len, const ResampleAxis &axis,
                         int32_t *acc, uint8_t *out);

}  // namespace fl
