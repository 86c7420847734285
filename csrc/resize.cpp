// Pillow-exact bilinear resampling: same taps, same fixed-point rounding, same pass order.
#include "resize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

// AVX2 copies of the hot loops, picked at load time; the default copy keeps the module portable.
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define FL_TARGET_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define FL_TARGET_CLONES
#endif

namespace fl {
namespace {

double bilinear(double x) {
    if (x < 0.0) x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

inline uint8_t clip8(int32_t v) {
    v >>= kPrecisionBits;  // arithmetic shift, as Pillow's clip8 lookup index
    return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// Pillow rounds each double weight to fixed point away from zero.
int32_t to_fixed(double w) {
    const double scaled = w * static_cast<double>(1 << kPrecisionBits);
    return static_cast<int32_t>(w < 0 ? -0.5 + scaled : 0.5 + scaled);
}

// Moves every window so it reads exactly ksize inputs inside the row, shifting its weights;
// the extra taps weigh 0, so sums (and results) are unchanged while loops get a fixed length.
void make_uniform(ResampleAxis &axis) {
    const int ksize = axis.ksize;
    for (int xx = 0; xx < axis.out_size; ++xx) {
        int32_t *k = &axis.weights[static_cast<size_t>(xx) * ksize];
        const int xmin = axis.bounds[2 * xx];
        const int taps = axis.bounds[2 * xx + 1];
        const int start = std::min(xmin, axis.in_size - ksize);
        const int shift = xmin - start;
        int32_t moved[64] = {};
        for (int x = 0; x < taps && x + shift < 64; ++x) moved[x + shift] = k[x];
        std::copy(moved, moved + ksize, k);
        axis.bounds[2 * xx] = start;
        axis.bounds[2 * xx + 1] = ksize;
    }
}

template <int K>
void resample_row_fixed(const uint8_t *in, uint8_t *out, const ResampleAxis &axis, bool flip) {
    const int out_size = axis.out_size;
    for (int xx = 0; xx < out_size; ++xx) {
        const int32_t *k = &axis.weights[static_cast<size_t>(xx) * K];
        const uint8_t *p = in + 3 * axis.bounds[2 * xx];
        int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
        for (int x = 0; x < K; ++x) {
            s0 += p[3 * x] * k[x];
            s1 += p[3 * x + 1] * k[x];
            s2 += p[3 * x + 2] * k[x];
        }
        uint8_t *dst = out + 3 * (flip ? out_size - 1 - xx : xx);
        dst[0] = clip8(s0);
        dst[1] = clip8(s1);
        dst[2] = clip8(s2);
    }
}

#if defined(__GNUC__) && defined(__x86_64__)
// One pixel's three channels in the lanes of one SSE register: the same integer sums as the
// scalar loop, a quarter of the multiplies. Reads one byte past each pixel (rows carry slack).
__attribute__((target("avx2"))) void resample_row_simd(const uint8_t *in, uint8_t *out,
                                                       const ResampleAxis &axis, bool flip) {
    const int ksize = axis.ksize;
    const int out_size = axis.out_size;
    const __m128i half = _mm_set1_epi32(1 << (kPrecisionBits - 1));
    for (int xx = 0; xx < out_size; ++xx) {
        const int32_t *k = &axis.weights[static_cast<size_t>(xx) * ksize];
        const uint8_t *p = in + 3 * axis.bounds[2 * xx];
        const int taps = axis.bounds[2 * xx + 1];
        __m128i acc = half;
        for (int x = 0; x < taps; ++x) {
            int32_t bytes;
            std::memcpy(&bytes, p + 3 * x, 4);
            const __m128i px = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(bytes));
            acc = _mm_add_epi32(acc, _mm_mullo_epi32(px, _mm_set1_epi32(k[x])));
        }
        acc = _mm_srai_epi32(acc, kPrecisionBits);
        const __m128i packed = _mm_packus_epi16(_mm_packs_epi32(acc, acc), acc);  // clamps 0..255
        const uint32_t rgb = static_cast<uint32_t>(_mm_cvtsi128_si32(packed));
        uint8_t *dst = out + 3 * (flip ? out_size - 1 - xx : xx);
        dst[0] = static_cast<uint8_t>(rgb);
        dst[1] = static_cast<uint8_t>(rgb >> 8);
        dst[2] = static_cast<uint8_t>(rgb >> 16);
    }
}

bool has_avx2() {
    static const bool yes = __builtin_cpu_supports("avx2");
    return yes;
}
#endif

}  // namespace

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
    axis.uniform = in_size >= ksize;
    if (axis.uniform) make_uniform(axis);
}

void axis_span(const ResampleAxis &axis, int &first, int &last) {
    first = axis.bounds[0];
    last = axis.bounds[2 * (axis.out_size - 1)] + axis.bounds[2 * (axis.out_size - 1) + 1];
}

void resample_row(const uint8_t *in, uint8_t *out, const ResampleAxis &axis, bool flip) {
#if defined(__GNUC__) && defined(__x86_64__)
    if (has_avx2()) return resample_row_simd(in, out, axis, flip);
#endif
    const int ksize = axis.ksize;
    if (axis.uniform) {  // fixed-length loops for the common kernel sizes (downscale <= 4x)
        switch (ksize) {
            case 3: return resample_row_fixed<3>(in, out, axis, flip);
            case 5: return resample_row_fixed<5>(in, out, axis, flip);
            case 7: return resample_row_fixed<7>(in, out, axis, flip);
            case 9: return resample_row_fixed<9>(in, out, axis, flip);
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

void copy_row(const uint8_t *in, uint8_t *out, int width, bool flip) {
    if (!flip) {
        std::copy(in, in + 3 * static_cast<size_t>(width), out);
        return;
    }
    for (int x = 0; x < width; ++x) {
        const uint8_t *p = in + 3 * (width - 1 - x);
        out[3 * x] = p[0];
        out[3 * x + 1] = p[1];
        out[3 * x + 2] = p[2];
    }
}

FL_TARGET_CLONES
void resample_column_row(const uint8_t *const *rows, int yy, int row_len, const ResampleAxis &axis,
                         int32_t *acc, uint8_t *out) {
    // Accumulate whole rows tap by tap: integer sums are order-free, so this equals Pillow's
    // per-pixel loop bit for bit while vectorizing.
    const int32_t *k = &axis.weights[static_cast<size_t>(yy) * axis.ksize];
    const int ymin = axis.bounds[2 * yy];
    const int taps = axis.bounds[2 * yy + 1];
    std::fill(acc, acc + row_len, 1 << (kPrecisionBits - 1));
    for (int y = 0; y < taps; ++y) {
        const uint8_t *src = rows[ymin + y];
        const int32_t w = k[y];
        for (int i = 0; i < row_len; ++i) acc[i] += src[i] * w;
    }
    for (int i = 0; i < row_len; ++i) out[i] = clip8(acc[i]);
}

}  // namespace fl
