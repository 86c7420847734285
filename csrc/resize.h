// Pillow's bilinear resampling (antialiased on downscale) of uint8 RGB rows, within one level.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fl {

// Fixed-point precision of the weights. Pillow's 8-bit resampler uses 22 bits (Resample.c:
// 32 - 8 - 2); 14 bits keep every weight (at most 1.0 = 1 << 14) an int16, so the AVX2
// kernels multiply two taps at once with madd, exactly as the scalar ones sum. The rounding
// of the weights moves a result by at most one level from Pillow's, and rarely.
constexpr int kPrecisionBits = 14;

// Filter taps of one axis: for each output index, the first input index, the tap count and
// ksize fixed-point weights. Built as Pillow's precompute_coeffs + normalize_coeffs_8bpc, with
// kPrecisionBits fraction bits.
struct ResampleAxis {
    int in_size = 0;
    int out_size = 0;
    int ksize = 0;
    bool identity = false;          // output == input, Pillow skips the pass
    bool uniform = false;           // every output reads exactly `taps` inputs (zero-padded)
    int taps = 0;                   // inputs each window reads once uniform (<= ksize)
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

// Copy (or mirror) a row of width 3-channel pixels.
void copy_row(const uint8_t *in, uint8_t *out, int width, bool flip);

// A uniform horizontal axis of at most kPositionsMaxTaps taps laid out in output memory order
// (flip applied) for the AVX2 kernel: per position its first source byte, and per pair of
// positions, per pair of taps, the two taps' int16 weights packed in one int32, 3 copies for
// the first position then 0, 3 for the second then 0 (a lone last position pairs with itself).
constexpr int kPositionsMaxTaps = 5;
struct HorizontalPlan {
    int taps = 0;
    std::vector<int> offsets;
    std::vector<int32_t> weights;
};

// Where resized rows go: height x width RGB pixels, rows row_stride bytes apart, mirrored if flip.
struct ResizeTarget {
    uint8_t *data = nullptr;
    int height = 0;
    int width = 0;
    std::ptrdiff_t row_stride = 0;
    bool flip = false;
};

// Streams source rows, top to bottom, through both passes straight into a target. It keeps only
// the rows the vertical taps still need (a ring), and picks the pass order that does less work:
// vertical first when the crop is taller than the output, so the costly horizontal pass runs on
// output rows only. Each pass is Pillow's integer arithmetic exactly; the order alone can move a
// pixel by one level against Pillow (which runs horizontal first). Reused across decodes.
class RowResizer {
public:
    // Plans the resize of [x0, x1) x [y0, y1) of an in_width x in_height pixel region.
    void plan(int in_width, float x0, float x1, int in_height, float y0, float y1,
              const ResizeTarget &out);
    // The source rows the vertical taps read: push exactly rows [first_row, end_row), in order.
    int first_row() const { return first_row_; }
    int end_row() const { return end_row_; }
    // Sizes the buffers: a source row is row_bytes long and its pixel 0 starts first_byte in.
    void start(size_t row_bytes, size_t first_byte);
    // Where the next source row goes (row_bytes + kRowSlack writable bytes).
    uint8_t *row_buffer();
    // Takes the row written to row_buffer() and emits every output row it completes.
    void push_row();

    ResampleAxis horizontal;
    ResampleAxis vertical;

private:
    void emit_ready_rows();
    void emit_row(int yy);
    const uint8_t *source_row(int index) const;
    void horizontal_pass(const uint8_t *in, uint8_t *out) const;

    ResizeTarget out_;
    int first_row_ = 0;
    int end_row_ = 0;
    int pushed_ = 0;
    int next_out_ = 0;
    bool vertical_first_ = false;
    size_t first_byte_ = 0;
    size_t ring_stride_ = 0;
    int ring_rows_ = 0;
    std::vector<uint8_t> ring_;           // source rows (vertical first) or resampled rows
    std::vector<uint8_t> source_;         // the one source row of a horizontal-first plan
    std::vector<uint8_t> column_;         // a vertically resampled row before its horizontal pass
    std::vector<int32_t> pair_weights_;   // horizontal taps laid out for two pixels per register
    HorizontalPlan positions_;            // the same, in output order, for windows of <= 5 taps
    bool use_positions_ = false;
    std::vector<const uint8_t *> taps_;
};

}  // namespace fl
