// RowResizer: streams a crop's source rows through both resampling passes into the output slot.
#include <algorithm>

#include "resize.h"
#include "resize_kernels.h"

namespace fl {
namespace {

// Relative cost of one horizontal tap on one pixel against one vertical tap on one byte: fitted
// to per-crop timings of both orders with the AVX2 kernels (crops 80-440 px to 224).
constexpr double kHorizontalTapCost = 3.0;

}  // namespace

void RowResizer::plan(int in_width, float x0, float x1, int in_height, float y0, float y1,
                      const ResizeTarget &out) {
    out_ = out;
    build_axis(in_width, x0, x1, out.width, horizontal);
    build_axis(in_height, y0, y1, out.height, vertical);
    axis_span(vertical, first_row_, end_row_);
    if (vertical.identity) {
        first_row_ = 0;
        end_row_ = in_height;
    }
    // Only a vertical pass: run it on the source rows themselves, no copy first.
    vertical_first_ = horizontal.identity && !vertical.identity;
    if (!vertical.identity && !horizontal.identity) {
        // Work of each order: the pass run first sees every source row (or column) it needs.
        const double rows = end_row_ - first_row_;
        const double h_taps = static_cast<double>(out.width) * horizontal.taps * kHorizontalTapCost;
        const double v_taps = static_cast<double>(vertical.taps) * out.height * 3.0;
        const double h_first = rows * h_taps + v_taps * out.width;
        const double v_first = v_taps * in_width + out.height * h_taps;
        vertical_first_ = v_first < h_first;
    }
    use_positions_ = false;
    if (horizontal.uniform && !horizontal.identity && kernels::use_avx2()) {
        use_positions_ = horizontal.taps <= kPositionsMaxTaps;
        if (use_positions_)
            kernels::plan_positions(horizontal, out.flip, positions_);
        else
            kernels::expand_pair_weights(horizontal, pair_weights_);
    }
}

void RowResizer::start(size_t row_bytes, size_t first_byte) {
    first_byte_ = first_byte;
    pushed_ = 0;
    next_out_ = 0;
    const int rows = end_row_ - first_row_;
    ring_rows_ = std::min(rows, vertical.taps);
    if (vertical.identity) {
        source_.resize(row_bytes + kRowSlack);
    } else if (vertical_first_) {
        ring_stride_ = row_bytes + kRowSlack;
        ring_.resize(ring_stride_ * ring_rows_);
        column_.resize(static_cast<size_t>(horizontal.in_size) * 3 + kRowSlack);
    } else {
        source_.resize(row_bytes + kRowSlack);
        ring_stride_ = static_cast<size_t>(out_.width) * 3 + kRowSlack;
        ring_.resize(ring_stride_ * ring_rows_);
    }
    taps_.resize(static_cast<size_t>(vertical.taps));
}

uint8_t *RowResizer::row_buffer() {
    if (vertical_first_ && !vertical.identity)
        return ring_.data() + static_cast<size_t>(pushed_ % ring_rows_) * ring_stride_;
    return source_.data();
}

void RowResizer::horizontal_pass(const uint8_t *in, uint8_t *out) const {
    if (horizontal.identity) return copy_row(in, out, out_.width, out_.flip);
    if (use_positions_) return kernels::horizontal_positions_avx2(in, out, positions_);
    if (kernels::use_avx2()) {
        if (horizontal.uniform)
            return kernels::horizontal_pairs_avx2(in, out, horizontal, pair_weights_.data(), out_.flip);
        return kernels::horizontal_avx2(in, out, horizontal, out_.flip);
    }
    kernels::horizontal_scalar(in, out, horizontal, out_.flip);
}

void RowResizer::push_row() {
    const uint8_t *src = source_.data() + first_byte_;
    if (vertical.identity) {
        horizontal_pass(src, out_.data + pushed_ * out_.row_stride);
    } else if (!vertical_first_) {
        uint8_t *dst = ring_.data() + static_cast<size_t>(pushed_ % ring_rows_) * ring_stride_;
        horizontal_pass(src, dst);
    }
    ++pushed_;
    if (!vertical.identity) emit_ready_rows();
}

void RowResizer::emit_ready_rows() {
    // Windows move down monotonically: output yy is ready once its last source row arrived.
    const int *bounds = vertical.bounds.data();
    while (next_out_ < out_.height &&
           bounds[2 * next_out_] + bounds[2 * next_out_ + 1] - first_row_ <= pushed_)
        emit_row(next_out_++);
}

const uint8_t *RowResizer::source_row(int index) const {
    const uint8_t *row = ring_.data() + static_cast<size_t>(index % ring_rows_) * ring_stride_;
    return vertical_first_ ? row + first_byte_ : row;
}

void RowResizer::emit_row(int yy) {
    const int ymin = vertical.bounds[2 * yy] - first_row_;
    const int taps = vertical.bounds[2 * yy + 1];
    for (int t = 0; t < taps; ++t) taps_[t] = source_row(ymin + t);
    const int32_t *weights = &vertical.weights[static_cast<size_t>(yy) * vertical.ksize];
    uint8_t *dst = out_.data + yy * out_.row_stride;
    // Horizontal first: the ring already holds finished (and mirrored) rows of the output width.
    const bool direct = !vertical_first_ || (horizontal.identity && !out_.flip);
    const int len = (vertical_first_ ? horizontal.in_size : out_.width) * 3;
    uint8_t *row = direct ? dst : column_.data();
    if (kernels::use_avx2())
        kernels::vertical_avx2(taps_.data(), weights, taps, len, row);
    else
        kernels::vertical_scalar(taps_.data(), weights, taps, len, row);
    if (!direct) horizontal_pass(row, dst);
}

}  // namespace fl
