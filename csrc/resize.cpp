// Pillow's bilinear taps (14-bit weights), the scalar row kernels, the one-row API of resize.h.
#include "resize.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "resize_kernels.h"

namespace fl {
namespace {

double bilinear(double x) {
    if (x < 0.0) x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

// Pillow rounds each double weight to fixed point away from zero.
int32_t to_fixed(double w) {
    const double scaled = w * static_cast<double>(1 << kPrecisionBits);
    return static_cast<int32_t>(w < 0 ? -0.5 + scaled : 0.5 + scaled);
}

// Moves every window so it reads exactly `width` inputs (the most any window reads) inside the
// row, shifting its weights; the extra taps weigh 0, so sums (and results) are unchanged while
// loops get a fixed length. width is often well below ksize (3 against 5 for a 1.2x downscale).
void make_uniform(ResampleAxis &axis) {
    const int ksize = axis.ksize;
    int width = 1;
    for (int xx = 0; xx < axis.out_size; ++xx) width = std::max(width, axis.bounds[2 * xx + 1]);
    std::vector<int32_t> moved(static_cast<size_t>(ksize));
    for (int xx = 0; xx < axis.out_size; ++xx) {
        int32_t *k = &axis.weights[static_cast<size_t>(xx) * ksize];
        const int xmin = axis.bounds[2 * xx];
        const int taps = axis.bounds[2 * xx + 1];
        const int start = std::max(0, std::min(xmin, axis.in_size - width));
        const int shift = xmin - start;
        std::fill(moved.begin(), moved.end(), 0);
        for (int x = 0; x < taps && x + shift < ksize; ++x) moved[x + shift] = k[x];
        std::copy(moved.begin(), moved.end(), k);
        axis.bounds[2 * xx] = start;
        axis.bounds[2 * xx + 1] = width;
    }
    axis.taps = width;
}

template <int K>
void horizontal_fixed(const uint8_t *in, uint8_t *out, const ResampleAxis &axis, bool flip) {
    const int out_size = axis.out_size;
    for (int xx = 0; xx < out_size; ++xx) {
        const int32_t *k = &axis.weights[static_cast<size_t>(xx) * axis.ksize];
        const uint8_t *p = in + 3 * axis.bounds[2 * xx];
        int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
        for (int x = 0; x < K; ++x) {
            s0 += p[3 * x] * k[x];
            s1 += p[3 * x + 1] * k[x];
            s2 += p[3 * x + 2] * k[x];
        }
        uint8_t *dst = out + 3 * (flip ? out_size - 1 - xx : xx);
        dst[0] = kernels::clip8(s0);
        dst[1] = kernels::clip8(s1);
        dst[2] = kernels::clip8(s2);
    }
}

}  // namespace

namespace kernels {

bool use_avx2() {
#if defined(__GNUC__) && defined(__x86_64__)
    static const bool yes = __builtin_cpu_supports("avx2") && std::getenv("FASTLOADER_RESIZE_SCALAR") == nullptr;
    return yes;
#else
    return false;
#endif
}

void horizontal_scalar(const uint8_t *in, uint8_t *out, const ResampleAxis &axis, bool flip) {
    const int ksize = axis.ksize;
    if (axis.uniform) {  // fixed-length loops for the common window lengths (downscale < 4x)
        switch (axis.taps) {
            case 2: return horizontal_fixed<2>(in, out, axis, flip);
            case 3: return horizontal_fixed<3>(in, out, axis, flip);
            case 4: return horizontal_fixed<4>(in, out, axis, flip);
            case 5: return horizontal_fixed<5>(in, out, axis, flip);
            case 6: return horizontal_fixed<6>(in, out, axis, flip);
            case 7: return horizontal_fixed<7>(in, out, axis, flip);
            case 8: return horizontal_fixed<8>(in, out, axis, flip);
            default: break;
        }
    }
    const int out_size = axis.out_size;
    for (int xx = 0; xx < out_size; ++xx) {
        const int32_t *k = &axis.weights[static_cast<size_t>(xx) * ksize];
        const uint8_t *p = in + 3 * axis.bounds[2 * xx];
        const int taps = axis.bounds[2 * xx + 1];
        int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
        for (int x = 0; x < taps; ++x, p += 3) {
            s0 += p[0] * k[x];
            s1 += p[1] * k[x];
            s2 += p[2] * k[x];
        }
        uint8_t *dst = out + 3 * (flip ? out_size - 1 - xx : xx);
        dst[0] = clip8(s0);
        dst[1] = clip8(s1);
        dst[2] = clip8(s2);
    }
}

void vertical_scalar(const uint8_t *const *rows, const int32_t *weights, int taps, int len,
                     uint8_t *out) {
    // Integer sums are order-free, so summing per byte equals Pillow's per-pixel loop exactly.
    for (int i = 0; i < len; ++i) {
        int32_t s = 1 << (kPrecisionBits - 1);
        for (int t = 0; t < taps; ++t) s += rows[t][i] * weights[t];
        out[i] = clip8(s);
    }
}

void expand_pair_weights(const ResampleAxis &axis, std::vector<int32_t> &pairs) {
    const int ksize = axis.ksize;
    const int n_pairs = axis.out_size / 2;
    pairs.resize(static_cast<size_t>(n_pairs) * axis.taps * 8);
    int32_t *dst = pairs.data();
    for (int j = 0; j < n_pairs; ++j) {
        const int32_t *ka = &axis.weights[static_cast<size_t>(2 * j) * ksize];
        const int32_t *kb = ka + ksize;
        for (int x = 0; x < axis.taps; ++x, dst += 8) {
            std::fill(dst, dst + 4, ka[x]);
            std::fill(dst + 4, dst + 8, kb[x]);
        }
    }
}

namespace {

// Taps 2j and 2j+1 of a window (0 past its end) as the int16 pair madd multiplies with.
int32_t weight_pair(const int32_t *k, int j, int taps) {
    const uint32_t w0 = static_cast<uint32_t>(k[2 * j]) & 0xFFFFu;
    const uint32_t w1 = 2 * j + 1 < taps ? static_cast<uint32_t>(k[2 * j + 1]) & 0xFFFFu : 0u;
    return static_cast<int32_t>(w0 | (w1 << 16));
}

}  // namespace

void plan_positions(const ResampleAxis &axis, bool flip, HorizontalPlan &plan) {
    const int n = axis.out_size;
    const int taps = axis.taps;
    const int pairs = (taps + 1) / 2;
    plan.taps = taps;
    plan.offsets.resize(static_cast<size_t>(n));
    plan.weights.assign(static_cast<size_t>((n + 1) / 2) * pairs * 8, 0);
    for (int p = 0; p < n; ++p) plan.offsets[p] = 3 * axis.bounds[2 * (flip ? n - 1 - p : p)];
    int32_t *dst = plan.weights.data();
    for (int p = 0; p < n; p += 2) {
        const int xa = flip ? n - 1 - p : p;
        const int xb = p + 1 < n ? (flip ? n - 2 - p : p + 1) : xa;
        const int32_t *ka = &axis.weights[static_cast<size_t>(xa) * axis.ksize];
        const int32_t *kb = &axis.weights[static_cast<size_t>(xb) * axis.ksize];
        for (int j = 0; j < pairs; ++j, dst += 8) {  // R, G, B lanes; the fourth stays 0
            std::fill(dst, dst + 3, weight_pair(ka, j, taps));
            std::fill(dst + 4, dst + 7, weight_pair(kb, j, taps));
        }
    }
}

}  // namespace kernels

void build_axis(int in_size, float in0, float in1, int out_size, ResampleAxis &axis) {
    // The float subtraction and double scale mirror Pillow's precompute_coeffs exactly.
    const double scale = static_cast<double>(in1 - in0) / out_size;
    const double filterscale = scale < 1.0 ? 1.0 : scale;
    const double support = 1.0 * filterscale;  // bilinear support is 1
    const int ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
    axis.in_size = in_size;
    axis.out_size = out_size;
    axis.ksize = ksize;
    axis.identity = in_size == out_size && in0 == 0.0f && in1 == static_cast<float>(out_size);
    axis.bounds.resize(2 * static_cast<size_t>(out_size));
    axis.weights.assign(static_cast<size_t>(out_size) * ksize, 0);
    axis.scratch.resize(ksize);
    const double ss = 1.0 / filterscale;
    for (int xx = 0; xx < out_size; ++xx) {
        const double center = in0 + (xx + 0.5) * scale;
        int xmin = static_cast<int>(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int xmax = static_cast<int>(center + support + 0.5);
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        double ww = 0.0;
        for (int x = 0; x < xmax; ++x) {
            const double w = bilinear((x + xmin - center + 0.5) * ss);
            axis.scratch[x] = w;
            ww += w;
        }
        int32_t *k = &axis.weights[static_cast<size_t>(xx) * ksize];
        for (int x = 0; x < xmax; ++x) {
            k[x] = to_fixed(ww != 0.0 ? axis.scratch[x] / ww : axis.scratch[x]);
        }
        axis.bounds[2 * xx] = xmin;
        axis.bounds[2 * xx + 1] = std::max(xmax, 0);
    }
    axis.uniform = true;  // every window fits in the row, so all can take the widest one's length
    make_uniform(axis);
}

void axis_span(const ResampleAxis &axis, int &first, int &last) {
    first = axis.bounds[0];
    last = axis.bounds[2 * (axis.out_size - 1)] + axis.bounds[2 * (axis.out_size - 1) + 1];
}

void copy_row(const uint8_t *in, uint8_t *out, int width, bool flip) {
    if (!flip) {
        std::memcpy(out, in, 3 * static_cast<size_t>(width));
        return;
    }
    for (int x = 0; x < width; ++x) {
        const uint8_t *p = in + 3 * (width - 1 - x);
        out[3 * x] = p[0];
        out[3 * x + 1] = p[1];
        out[3 * x + 2] = p[2];
    }
}

}  // namespace fl
