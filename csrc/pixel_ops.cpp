// fl::apply_pixel_program: one image's steps in order. The colour ops, the lookup-table ops and
// the histogram ops live here; blur, sharpness and the geometric ops in pixel_ops_spatial.cpp.
// Every op follows Pillow's definition (ImageEnhance, ImageOps, Convert.c) to the byte.
#include "pixel_ops.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <new>

#include "pixel_ops_internal.h"

namespace fl {
namespace {

using pixel::blend_byte;
using pixel::luma;

void apply_table(uint8_t *image, size_t bytes, const uint8_t table[256]) {
    for (size_t i = 0; i < bytes; ++i) image[i] = table[image[i]];
}

// Brightness and contrast blend towards a constant: AVX2 lanes, else one 256-entry table.
void blend_constant(uint8_t *image, size_t bytes, int degenerate, float alpha) {
    const size_t done =
        pixel::simd_enabled() ? pixel::blend_constant_avx2(image, bytes, degenerate, alpha) : 0;
    uint8_t table[256];
    for (int v = 0; v < 256; ++v) table[v] = blend_byte(degenerate, v, alpha);
    apply_table(image + done, bytes - done, table);
}

void contrast(uint8_t *image, size_t pixels, float factor) {
    uint64_t sum = 0;
    const size_t done = pixel::simd_enabled() ? pixel::luma_sum_avx2(image, pixels, sum) : 0;
    for (size_t i = done; i < pixels; ++i) sum += luma(image + 3 * i);
    // ImageStat's mean of convert("L"), then int(mean + 0.5) (Python floats are doubles).
    const double mean = static_cast<double>(sum) / static_cast<double>(pixels);
    blend_constant(image, pixels * 3, static_cast<int>(mean + 0.5), factor);
}

template <bool kInside>
void saturation_with(uint8_t *image, size_t pixels, float factor) {
    const size_t done = pixel::simd_enabled() ? pixel::saturation_avx2(image, pixels, factor) : 0;
    for (size_t i = done; i < pixels; ++i) {
        uint8_t *px = image + 3 * i;
        const int gray = luma(px);
        px[0] = pixel::blend_fast<kInside>(gray, px[0], factor);
        px[1] = pixel::blend_fast<kInside>(gray, px[1], factor);
        px[2] = pixel::blend_fast<kInside>(gray, px[2], factor);
    }
}

void saturation(uint8_t *image, size_t pixels, float factor) {
    if (factor >= 0.0f && factor <= 1.0f) saturation_with<true>(image, pixels, factor);
    else saturation_with<false>(image, pixels, factor);
}

void grayscale(uint8_t *image, size_t pixels) {
    for (size_t i = 0; i < pixels; ++i) {
        uint8_t *px = image + 3 * i;
        px[0] = px[1] = px[2] = luma(px);
    }
}

inline uint8_t clip8(int v) { return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v)); }

// IEEE results are the same without trapping math (nothing reads the FP exception flags); it
// lets GCC turn the HSV conversion's selects into vector code.
#if defined(__GNUC__) && !defined(__clang__)
#define FL_NO_TRAPPING_MATH __attribute__((optimize("no-trapping-math")))
#else
#define FL_NO_TRAPPING_MATH
#endif

// Convert.c's rgb2hsv_row on n pixels of R, G, B planes into H and S, float for float, written
// without branches (selects; a grey pixel's divisions are guarded, then unused) so the loop
// vectorises: the divisions are IEEE's either way, so the bytes are Pillow's.
FL_NO_TRAPPING_MATH
void rgb_to_hsv_planes(const int32_t *red, const int32_t *green, const int32_t *blue, int n,
                       int32_t *hue, int32_t *sat) {
    for (int x = 0; x < n; ++x) {
        const int r = red[x], g = green[x], b = blue[x];
        const int big = r > g ? r : g, small = r < g ? r : g;
        const int maxc = big > b ? big : b, minc = small < b ? small : b;
        const bool grey = maxc == minc;
        const float cr = static_cast<float>(grey ? 1 : maxc - minc);
        const float s = static_cast<float>(maxc - minc) / static_cast<float>(grey ? 1 : maxc);
        const float rc = static_cast<float>(maxc - r) / cr;
        const float gc = static_cast<float>(maxc - g) / cr;
        const float bc = static_cast<float>(maxc - b) / cr;
        const float h_g = static_cast<float>(2.0 + rc - bc), h_b = static_cast<float>(4.0 + gc - rc);
        const float h = r == maxc ? bc - gc : (g == maxc ? h_g : h_b);
        const double turn = h / 6.0 + 1.0;  // in (0, 2): fmod(turn, 1.0) is this exact subtraction
        const float wrapped = static_cast<float>(turn >= 1.0 ? turn - 1.0 : turn);
        const int uh = static_cast<int>(wrapped * 255.0), us = static_cast<int>(s * 255.0);  // 0..255
        hue[x] = grey ? 0 : uh;
        sat[x] = grey ? 0 : us;
    }
}

// Convert.c's hsv2rgb on H, S, V planes into R, G, B planes, float for float, its sector switch
// written as selects so the loop vectorises. Every value is >= 0, so floor and C's round()
// (halves away from zero) are truncations of x and of x + 0.5's exact split below.
FL_NO_TRAPPING_MATH
void hsv_to_rgb_planes(const int32_t *hue, const int32_t *sat, const int32_t *val, int n,
                       int32_t *red, int32_t *green, int32_t *blue) {
    for (int x = 0; x < n; ++x) {
        const int h = hue[x], s = sat[x], v = val[x];
        const double scaled = static_cast<float>(h) * 6.0 / 255.0;
        const int i = static_cast<int>(scaled);  // floor: 0..6
        const float f = static_cast<float>(scaled - static_cast<float>(i));
        const float fs = static_cast<float>(static_cast<float>(s) / 255.0);
        const double vf = static_cast<float>(v);
        const double pd = vf * (1.0 - fs), qd = vf * (1.0 - fs * f);
        const double td = vf * (1.0 - fs * (1.0 - f));
        // round(): the whole part, plus one where the exact remainder reaches a half.
        const int p0 = static_cast<int>(pd), q0 = static_cast<int>(qd), t0 = static_cast<int>(td);
        const int p = p0 + (pd - p0 >= 0.5 ? 1 : 0), q = q0 + (qd - q0 >= 0.5 ? 1 : 0);
        const int t = t0 + (td - t0 >= 0.5 ? 1 : 0);
        const int k = i == 6 ? 0 : i;  // the sector, i % 6
        // Sector k's (R, G, B): 0 (v,t,p) 1 (q,v,p) 2 (p,v,t) 3 (p,q,v) 4 (t,p,v) 5 (v,p,q).
        const int r = ((k == 0) | (k == 5)) ? v : ((k == 1) ? q : ((k == 4) ? t : p));
        const int g = ((k == 1) | (k == 2)) ? v : ((k == 0) ? t : ((k == 3) ? q : p));
        const int b = ((k == 3) | (k == 4)) ? v : ((k == 2) ? t : ((k == 5) ? q : p));
        const bool grey = s == 0;
        red[x] = grey ? v : r;
        green[x] = grey ? v : g;
        blue[x] = grey ? v : b;
    }
}

// Convert.c's RGB -> HSV -> RGB with H shifted, on flat pixels: AVX2 lanes where they run, the
// planes above (a chunk at a time) for the rest.
void hue(uint8_t *image, size_t pixels, float factor, PixelScratch &scratch) {
    // int(factor * 255) mod 256: torchvision's np.uint8(factor * 255) as x86 casts it.
    const int shift = ((static_cast<int>(static_cast<double>(factor) * 255.0) % 256) + 256) % 256;
    size_t done = pixel::simd_enabled() ? pixel::hue_avx2(image, pixels, shift) : 0;
    constexpr int kChunk = 256;
    scratch.line.resize(static_cast<size_t>(kChunk) * 6);
    auto *planes = reinterpret_cast<int32_t *>(scratch.line.data());
    int32_t *r = planes, *g = r + kChunk, *b = g + kChunk;
    int32_t *h = b + kChunk, *s = h + kChunk, *v = s + kChunk;
    for (; done < pixels; done += kChunk) {
        uint8_t *row = image + 3 * done;
        const int n = static_cast<int>(std::min<size_t>(kChunk, pixels - done));
        for (int x = 0; x < n; ++x) {
            r[x] = row[3 * x];
            g[x] = row[3 * x + 1];
            b[x] = row[3 * x + 2];
        }
        rgb_to_hsv_planes(r, g, b, n, h, s);
        for (int x = 0; x < n; ++x) {
            v[x] = std::max(r[x], std::max(g[x], b[x]));
            h[x] = (h[x] + shift) & 255;
        }
        hsv_to_rgb_planes(h, s, v, n, r, g, b);
        for (int x = 0; x < n; ++x) {
            row[3 * x] = static_cast<uint8_t>(r[x]);
            row[3 * x + 1] = static_cast<uint8_t>(g[x]);
            row[3 * x + 2] = static_cast<uint8_t>(b[x]);
        }
    }
}

void solarize(uint8_t *image, size_t bytes, float threshold) {
    uint8_t table[256];
    for (int v = 0; v < 256; ++v) table[v] = static_cast<uint8_t>(v < threshold ? v : 255 - v);
    apply_table(image, bytes, table);
}

void posterize(uint8_t *image, size_t bytes, float bits) {
    const int keep = std::clamp(static_cast<int>(bits), 0, 8);
    const uint8_t mask = static_cast<uint8_t>(~((1 << (8 - keep)) - 1));
    for (size_t i = 0; i < bytes; ++i) image[i] &= mask;
}

void invert(uint8_t *image, size_t bytes) {
    for (size_t i = 0; i < bytes; ++i) image[i] = static_cast<uint8_t>(255 - image[i]);
}

void histograms(const uint8_t *image, size_t pixels, uint32_t hist[3][256]) {
    std::memset(hist, 0, sizeof(uint32_t) * 3 * 256);
    for (size_t i = 0; i < pixels; ++i) {
        ++hist[0][image[3 * i]];
        ++hist[1][image[3 * i + 1]];
        ++hist[2][image[3 * i + 2]];
    }
}

void apply_band_tables(uint8_t *image, size_t pixels, const uint8_t tables[3][256]) {
    for (size_t i = 0; i < pixels; ++i) {
        uint8_t *px = image + 3 * i;
        px[0] = tables[0][px[0]];
        px[1] = tables[1][px[1]];
        px[2] = tables[2][px[2]];
    }
}

// ImageOps.autocontrast(image) with no cutoff: each band from its lowest to its highest level.
void autocontrast(uint8_t *image, size_t pixels) {
    uint32_t hist[3][256];
    uint8_t tables[3][256];
    histograms(image, pixels, hist);
    for (int band = 0; band < 3; ++band) {
        int lo = 0, hi = 255;
        while (lo < 255 && hist[band][lo] == 0) ++lo;
        while (hi > 0 && hist[band][hi] == 0) --hi;
        const double scale = hi > lo ? 255.0 / (hi - lo) : 0.0;
        const double offset = -lo * scale;
        for (int v = 0; v < 256; ++v) {
            tables[band][v] = hi <= lo ? static_cast<uint8_t>(v)
                                       : clip8(static_cast<int>(v * scale + offset));
        }
    }
    apply_band_tables(image, pixels, tables);
}

// ImageOps.equalize(image): each band's cumulative histogram in steps of (count - last) // 255.
void equalize(uint8_t *image, size_t pixels) {
    uint32_t hist[3][256];
    uint8_t tables[3][256];
    histograms(image, pixels, hist);
    for (int band = 0; band < 3; ++band) {
        uint64_t total = 0, last = 0;
        int used = 0;
        for (int v = 0; v < 256; ++v) {
            if (hist[band][v]) {
                total += hist[band][v];
                last = hist[band][v];
                ++used;
            }
        }
        const uint64_t step = used > 1 ? (total - last) / 255 : 0;
        uint64_t n = step / 2;
        for (int v = 0; v < 256; ++v) {
            tables[band][v] = step == 0 ? static_cast<uint8_t>(v)
                                        : static_cast<uint8_t>(std::min<uint64_t>(n / step, 255));
            n += hist[band][v];
        }
    }
    apply_band_tables(image, pixels, tables);
}

void erase(uint8_t *image, int height, int width, const float *p) {
    const int top = std::clamp(static_cast<int>(p[0]), 0, height);
    const int left = std::clamp(static_cast<int>(p[1]), 0, width);
    const int bottom = std::clamp(top + static_cast<int>(p[2]), top, height);
    const int right = std::clamp(left + static_cast<int>(p[3]), left, width);
    const uint8_t colour[3] = {static_cast<uint8_t>(p[4]), static_cast<uint8_t>(p[5]),
                               static_cast<uint8_t>(p[6])};
    for (int y = top; y < bottom; ++y) {
        uint8_t *row = image + (static_cast<size_t>(y) * width + left) * 3;
        for (int x = 0; x < right - left; ++x) std::memcpy(row + 3 * x, colour, 3);
    }
}

void apply_step(uint8_t *image, int height, int width, int32_t code, const float *p,
                PixelScratch &scratch) {
    const size_t pixels = static_cast<size_t>(height) * width, bytes = pixels * 3;
    switch (code) {
        case kPixelBrightness: blend_constant(image, bytes, 0, p[0]); break;
        case kPixelContrast: contrast(image, pixels, p[0]); break;
        case kPixelSaturation: saturation(image, pixels, p[0]); break;
        case kPixelHue: hue(image, pixels, p[0], scratch); break;
        case kPixelGrayscale: grayscale(image, pixels); break;
        case kPixelBlur: pixel::gaussian_blur(image, height, width, p[0], scratch); break;
        case kPixelSolarize: solarize(image, bytes, p[0]); break;
        case kPixelPosterize: posterize(image, bytes, p[0]); break;
        case kPixelAutocontrast: autocontrast(image, pixels); break;
        case kPixelEqualize: equalize(image, pixels); break;
        case kPixelErase: erase(image, height, width, p); break;
        case kPixelSharpness: pixel::sharpness(image, height, width, p[0], scratch); break;
        case kPixelInvert: invert(image, bytes); break;
        case kPixelShearX: case kPixelShearY: case kPixelTranslateX: case kPixelTranslateY:
        case kPixelRotate: pixel::geometric(image, height, width, code, p[0], scratch); break;
        default: break;  // kPixelNone, or a code this build does not know: no change
    }
}

}  // namespace

namespace pixel {

namespace {

std::atomic<int> g_simd{-1};  // -1: not chosen yet

bool avx2_usable() {
#if defined(__GNUC__) && defined(__x86_64__)
    return avx2_built() && __builtin_cpu_supports("avx2");
#else
    return false;  // the AVX2 kernels are stubs off x86-64
#endif
}

}  // namespace

bool simd_enabled() {
    int s = g_simd.load(std::memory_order_relaxed);
    if (s < 0) {
        s = avx2_usable() ? 1 : 0;
        g_simd.store(s, std::memory_order_relaxed);
    }
    return s == 1;
}

bool set_simd(bool enabled) {
    const bool old = simd_enabled();
    g_simd.store(enabled && avx2_usable() ? 1 : 0);
    return old;
}

template <bool kInside>
void blend_rows_with(const uint8_t *degenerate, const uint8_t *image, uint8_t *out, size_t n,
                     float alpha) {
    const size_t done = simd_enabled() ? blend_rows_avx2(degenerate, image, out, n, alpha) : 0;
    for (size_t i = done; i < n; ++i) out[i] = blend_fast<kInside>(degenerate[i], image[i], alpha);
}

void blend_rows(const uint8_t *degenerate, const uint8_t *image, uint8_t *out, size_t n,
                float alpha) {
    if (alpha >= 0.0f && alpha <= 1.0f) blend_rows_with<true>(degenerate, image, out, n, alpha);
    else blend_rows_with<false>(degenerate, image, out, n, alpha);
}

}  // namespace pixel

void apply_pixel_program(uint8_t *image, int height, int width, const int32_t *codes,
                         const float *params, int n_ops, PixelScratch &scratch) {
    if (height <= 0 || width <= 0) return;
    try {
        for (int k = 0; k < n_ops; ++k) {
            apply_step(image, height, width, codes[k], params + k * kPixelParams, scratch);
        }
    } catch (const std::bad_alloc &) {
        // Scratch could not grow: the image keeps the steps done so far (never throws).
    }
}

}  // namespace fl
