// The neighbourhood and geometric pixel ops: Pillow's GaussianBlur (three extended box passes,
// BoxBlur.c), ImageEnhance.Sharpness (the SMOOTH 3x3 filter, Filter.c, then a blend) and
// Image.transform / Image.rotate NEAREST with fill 0 (Geometry.c), each to Pillow's byte.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "pixel_ops_internal.h"

namespace fl::pixel {
namespace {

constexpr int kPasses = 3;

// BoxBlur.c's _gaussian_blur_radius: the extended box radius whose 3 passes give sigma.
float box_radius(float radius) {
    const float sigma2 = radius * radius / kPasses;
    const float big_l = static_cast<float>(std::sqrt(12.0 * sigma2 + 1.0));
    const float l = static_cast<float>(std::floor((big_l - 1.0) / 2.0));
    float a = (2 * l + 1) * (l * (l + 1) - 3 * sigma2);
    a /= 6 * (sigma2 - (l + 1) * (l + 1));
    return l + a;
}

BoxLine box_line(float float_radius) {
    BoxLine line;
    line.radius = static_cast<int>(float_radius);
    line.ww = static_cast<uint32_t>(static_cast<float>(1 << 24) / (float_radius * 2 + 1));
    line.fw = ((1u << 24) - static_cast<uint32_t>(line.radius * 2 + 1) * line.ww) / 2;
    return line;
}

// One box pass along a line of n RGB pixels, `in` to `out` (distinct). BoxBlur.c's three
// regions read pixels at indices clamped to the line, so the window is written with clamps:
// acc = sum in[x-r .. x+r], out = (acc*ww + (in[x-r-1] + in[x+r+1])*fw + 2^23) >> 24.
void blur_line(const uint8_t *in, uint8_t *out, int n, const BoxLine &box) {
    const int r = box.radius, last = n - 1;
    uint32_t acc[3] = {0, 0, 0};
    for (int j = -r - 1; j <= r - 1; ++j) {
        const uint8_t *px = in + 3 * std::clamp(j, 0, last);
        acc[0] += px[0];
        acc[1] += px[1];
        acc[2] += px[2];
    }
    const uint32_t ww = box.ww, fw = box.fw;
    auto emit = [&](int x, int sub, int add, int far) {
        for (int c = 0; c < 3; ++c) {
            const uint32_t gone = in[3 * sub + c];
            acc[c] += in[3 * add + c] - gone;
            const uint32_t bulk = acc[c] * ww + (gone + in[3 * far + c]) * fw;
            out[3 * x + c] = static_cast<uint8_t>((bulk + (1u << 23)) >> 24);
        }
    };
    // The clamps bind only near the ends: the middle runs without them.
    const int head = std::min(r + 1, n), tail = std::max(head, n - r - 1);
    for (int x = 0; x < head; ++x)
        emit(x, std::max(x - r - 1, 0), std::min(x + r, last), std::min(x + r + 1, last));
    for (int x = head; x < tail; ++x) emit(x, x - r - 1, x + r, x + r + 1);
    for (int x = tail; x < n; ++x)
        emit(x, std::max(x - r - 1, 0), std::min(x + r, last), std::min(x + r + 1, last));
}

// The same pass down the columns of a height x `row` byte image, bytes [first, row) of each row,
// a whole row at a time (the inner loops run along the row, so they vectorise); `acc` holds
// `row` sums.
void blur_columns(const uint8_t *in, uint8_t *out, int height, size_t row, const BoxLine &box,
                  uint32_t *acc, size_t first) {
    const int r = box.radius, last = height - 1;
    std::fill(acc, acc + row, 0u);
    for (int j = -r - 1; j <= r - 1; ++j) {
        const uint8_t *line = in + row * std::clamp(j, 0, last);
        for (size_t i = first; i < row; ++i) acc[i] += line[i];
    }
    const uint32_t ww = box.ww, fw = box.fw;
    for (int y = 0; y < height; ++y) {
        const uint8_t *sub = in + row * std::max(y - r - 1, 0);
        const uint8_t *add = in + row * std::min(y + r, last);
        const uint8_t *far = in + row * std::min(y + r + 1, last);
        uint8_t *dst = out + row * y;
        for (size_t i = first; i < row; ++i) {
            acc[i] += static_cast<uint32_t>(add[i]) - sub[i];
            const uint32_t bulk = acc[i] * ww + (static_cast<uint32_t>(sub[i]) + far[i]) * fw;
            dst[i] = static_cast<uint8_t>((bulk + (1u << 23)) >> 24);
        }
    }
}

// Three passes on each of lines [first, rows) of `n` pixels, in place.
void blur_rows(uint8_t *image, int first, int rows, int n, const BoxLine &box, uint8_t *line) {
    for (int y = first; y < rows; ++y) {
        uint8_t *row = image + static_cast<size_t>(y) * n * 3;
        for (int pass = 0; pass < kPasses; ++pass) {
            blur_line(row, line, n, box);
            std::memcpy(row, line, static_cast<size_t>(n) * 3);
        }
    }
}

}  // namespace

void gaussian_blur(uint8_t *image, int height, int width, float radius, PixelScratch &scratch) {
    if (!(radius > 0.0f)) return;  // Pillow: radius 0 is a copy
    const BoxLine box = box_line(box_radius(radius));
    const size_t row = static_cast<size_t>(width) * 3, bytes = row * height;
    const bool simd = simd_enabled();
    scratch.copy.resize(bytes);
    scratch.plane.resize(row);
    scratch.line.resize(std::max<size_t>(row, simd ? 48 * static_cast<size_t>(width) + 8 : 0));
    const int done = simd ? blur_rows_avx2(image, height, width, box, scratch.line.data()) : 0;
    blur_rows(image, done, height, width, box, scratch.plane.data());
    // Pillow blurs the columns on a transposed copy; the column sums kept a row at a time are
    // the same arithmetic. Passes alternate image -> copy -> image -> copy; the last comes back.
    uint8_t *from = image, *to = scratch.copy.data();
    for (int pass = 0; pass < kPasses; ++pass) {
        const size_t first =
            simd ? blur_columns_avx2(from, to, height, row, box, scratch.line.data()) : 0;
        if (first < row) blur_columns(from, to, height, row, box, scratch.line.data(), first);
        std::swap(from, to);
    }
    if (from != image) std::memcpy(image, from, bytes);
}

namespace {

// ImageFilter.SMOOTH: (1 1 1 / 1 5 1 / 1 1 1) / 13 in float, +0.5, truncated, at bytes
// [first, row_bytes - 3) of a row. The sums keep Filter.c's order: row below, row, row above.
void smooth_row(const uint8_t *up, const uint8_t *mid, const uint8_t *down, uint8_t *smooth,
                size_t first, size_t row_bytes) {
    const float k1 = static_cast<float>(1.0 / 13.0), k5 = static_cast<float>(5.0 / 13.0);
    for (size_t i = first; i < row_bytes - 3; ++i) {
        float ss = 0.5f;
        ss += static_cast<float>(down[i - 3]) * k1 + static_cast<float>(down[i]) * k1 +
              static_cast<float>(down[i + 3]) * k1;
        ss += static_cast<float>(mid[i - 3]) * k1 + static_cast<float>(mid[i]) * k5 +
              static_cast<float>(mid[i + 3]) * k1;
        ss += static_cast<float>(up[i - 3]) * k1 + static_cast<float>(up[i]) * k1 +
              static_cast<float>(up[i + 3]) * k1;
        smooth[i] = static_cast<uint8_t>(std::clamp(ss, 0.0f, 255.0f));
    }
}

}  // namespace

void sharpness(uint8_t *image, int height, int width, float factor, PixelScratch &scratch) {
    if (height < 3 || width < 3) return;  // Pillow's filter copies images under its kernel
    const size_t row_bytes = static_cast<size_t>(width) * 3;
    scratch.copy.assign(image, image + row_bytes * height);
    scratch.plane.resize(row_bytes);
    const uint8_t *src = scratch.copy.data();
    uint8_t *smooth = scratch.plane.data();
    const bool simd = simd_enabled();
    // The AVX2 sums read each row's products by 1/13 from a ring of three rows' terms.
    if (simd) scratch.terms.resize(3 * row_bytes);
    auto terms = [&](int y) { return scratch.terms.data() + (y % 3) * row_bytes; };
    if (simd) smooth_terms_avx2(src, terms(0), row_bytes);
    if (simd) smooth_terms_avx2(src + row_bytes, terms(1), row_bytes);
    for (int y = 1; y < height - 1; ++y) {
        const uint8_t *up = src + (y - 1) * row_bytes, *mid = src + y * row_bytes;
        const uint8_t *down = src + (y + 1) * row_bytes;
        size_t done = 3;
        if (simd) {
            smooth_terms_avx2(down, terms(y + 1), row_bytes);
            done = smooth_row_avx2(terms(y - 1), terms(y), terms(y + 1), mid, smooth, row_bytes);
        }
        smooth_row(up, mid, down, smooth, done, row_bytes);
        // Borders are kept: a border pixel blends with itself.
        blend_rows(smooth + 3, mid + 3, image + y * row_bytes + 3, row_bytes - 6, factor);
    }
}

namespace {

constexpr double kRadToDeg = 180.0 / M_PI, kDegToRad = M_PI / 180.0;

// Python's round(x, 15): the nearest double to x's correctly rounded 15-decimal form.
double round15(double x) {
    char text[64];
    std::snprintf(text, sizeof(text), "%.15f", x);
    return std::strtod(text, nullptr);
}

// torchvision's _get_inverse_affine_matrix at scale 1 (degrees), into m.
void inverse_affine(double cx, double cy, double angle, double tx, double ty, double shear_x,
                    double shear_y, double *m) {
    const double rot = angle * kDegToRad, sx = shear_x * kDegToRad, sy = shear_y * kDegToRad;
    const double a = std::cos(rot - sy) / std::cos(sy);
    const double b = -std::cos(rot - sy) * std::tan(sx) / std::cos(sy) - std::sin(rot);
    const double c = std::sin(rot - sy) / std::cos(sy);
    const double d = -std::sin(rot - sy) * std::tan(sx) / std::cos(sy) + std::cos(rot);
    m[0] = d; m[1] = -b; m[2] = 0.0; m[3] = -c; m[4] = a; m[5] = 0.0;
    m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
    m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
    m[2] += cx;
    m[5] += cy;
}

// Image.rotate's general matrix about the centre.
void rotate_matrix(double angle, int height, int width, double *m) {
    const double cx = width / 2.0, cy = height / 2.0, radians = -(angle * kDegToRad);
    m[0] = round15(std::cos(radians)); m[1] = round15(std::sin(radians)); m[2] = 0.0;
    m[3] = round15(-std::sin(radians)); m[4] = round15(std::cos(radians)); m[5] = 0.0;
    const double x = -cx - 0, y = -cy - 0;
    const double c = m[0] * x + m[1] * y + m[2], f = m[3] * x + m[4] * y + m[5];
    m[2] = c + cx;
    m[5] = f + cy;
}

// Image.rotate's exact shortcuts (angle % 360 of 180, or 90 / 270 on a square): true if taken.
bool rotate_fast(const uint8_t *src, uint8_t *dst, int height, int width, double angle) {
    double turned = std::fmod(angle, 360.0);
    if (turned != 0.0 && turned < 0.0) turned += 360.0;  // Python's float % (sign of 360)
    const bool square = height == width;
    if (turned != 180.0 && !(square && (turned == 90.0 || turned == 270.0))) return false;
    for (int y = 0; y < height; ++y) {
        for (int x = 0; x < width; ++x) {
            int sy = height - 1 - y, sx = width - 1 - x;  // ROTATE_180
            if (turned == 90.0) { sy = x; sx = width - 1 - y; }
            if (turned == 270.0) { sy = height - 1 - x; sx = y; }
            std::memcpy(dst + (static_cast<size_t>(y) * width + x) * 3,
                        src + (static_cast<size_t>(sy) * width + sx) * 3, 3);
        }
    }
    return true;
}

// Geometry.c's samplers of `src` into `dst` (fill 0), matrix m = (a, b, c, d, e, f).
inline int coord(double v) { return v < 0.0 ? -1 : static_cast<int>(v); }

inline void take(const uint8_t *src, uint8_t *out, int width, int xin, int yin) {
    std::memcpy(out, src + (static_cast<size_t>(yin) * width + xin) * 3, 3);
}

void scale_affine(const uint8_t *src, uint8_t *dst, int height, int width, const double *m) {
    double yo = m[5] + m[4] * 0.5;
    for (int y = 0; y < height; ++y) {
        const int yin = coord(yo);
        uint8_t *out = dst + static_cast<size_t>(y) * width * 3;
        std::memset(out, 0, static_cast<size_t>(width) * 3);
        if (yin >= 0 && yin < height) {
            double xo = m[2] + m[0] * 0.5;
            for (int x = 0; x < width; ++x, xo += m[0]) {
                const int xin = coord(xo);
                if (xin >= 0 && xin < width) take(src, out + 3 * x, width, xin, yin);
            }
        }
        yo += m[4];
    }
}

void fixed_affine(const uint8_t *src, uint8_t *dst, int height, int width, const double *m) {
    auto fix = [](double v) { return static_cast<int>(std::floor(v * 65536.0 + 0.5)); };
    const int a0 = fix(m[0]), a1 = fix(m[1]), a3 = fix(m[3]), a4 = fix(m[4]);
    int a2 = fix(m[2] + m[0] * 0.5 + m[1] * 0.5), a5 = fix(m[5] + m[3] * 0.5 + m[4] * 0.5);
    for (int y = 0; y < height; ++y, a2 += a1, a5 += a4) {
        uint8_t *out = dst + static_cast<size_t>(y) * width * 3;
        std::memset(out, 0, static_cast<size_t>(width) * 3);
        int xx = a2, yy = a5;
        for (int x = 0; x < width; ++x, xx += a0, yy += a3) {
            const int xin = xx >> 16, yin = yy >> 16;
            if (xin >= 0 && xin < width && yin >= 0 && yin < height) {
                take(src, out + 3 * x, width, xin, yin);
            }
        }
    }
}

void float_affine(const uint8_t *src, uint8_t *dst, int height, int width, const double *m) {
    double xo = m[2] + m[1] * 0.5 + m[0] * 0.5, yo = m[5] + m[4] * 0.5 + m[3] * 0.5;
    for (int y = 0; y < height; ++y, xo += m[1], yo += m[4]) {
        uint8_t *out = dst + static_cast<size_t>(y) * width * 3;
        std::memset(out, 0, static_cast<size_t>(width) * 3);
        double xx = xo, yy = yo;
        for (int x = 0; x < width; ++x, xx += m[0], yy += m[3]) {
            const int xin = coord(xx), yin = coord(yy);
            if (xin >= 0 && xin < width && yin >= 0 && yin < height) {
                take(src, out + 3 * x, width, xin, yin);
            }
        }
    }
}

bool fits_fixed(const double *m, int x, int y) {
    return std::fabs(x * m[0] + y * m[1] + m[2]) < 32768.0 &&
           std::fabs(x * m[3] + y * m[4] + m[5]) < 32768.0;
}

// ImagingTransformAffine's choice of sampler for NEAREST.
void transform(const uint8_t *src, uint8_t *dst, int height, int width, const double *m) {
    if (m[1] == 0 && m[3] == 0) {
        scale_affine(src, dst, height, width, m);
    } else if (fits_fixed(m, 0, 0) && fits_fixed(m, width, height) && fits_fixed(m, 0, height) &&
               fits_fixed(m, width, 0)) {
        fixed_affine(src, dst, height, width, m);
    } else {
        float_affine(src, dst, height, width, m);
    }
}

}  // namespace

void geometric(uint8_t *image, int height, int width, int32_t code, float p0,
               PixelScratch &scratch) {
    const double value = static_cast<double>(p0);
    if (code == kPixelRotate && std::fmod(value, 360.0) == 0.0) return;  // Image.rotate: a copy
    const size_t bytes = static_cast<size_t>(height) * width * 3;
    scratch.copy.assign(image, image + bytes);
    const uint8_t *src = scratch.copy.data();
    double m[6];
    switch (code) {
        case kPixelShearX:
            inverse_affine(0, 0, 0, 0, 0, std::atan(value) * kRadToDeg, 0, m);
            break;
        case kPixelShearY:
            inverse_affine(0, 0, 0, 0, 0, 0, std::atan(value) * kRadToDeg, m);
            break;
        case kPixelTranslateX:
            inverse_affine(width * 0.5, height * 0.5, 0, value, 0, 0, 0, m);
            break;
        case kPixelTranslateY:
            inverse_affine(width * 0.5, height * 0.5, 0, 0, value, 0, 0, m);
            break;
        default:  // kPixelRotate
            if (rotate_fast(src, image, height, width, value)) return;
            rotate_matrix(value, height, width, m);
            break;
    }
    transform(src, image, height, width, m);
}

}  // namespace fl::pixel
