// Scalar reconstruction kernels of the coeffs codec, written to give libjpeg-turbo's SIMD bits:
// the ISLOW IDCT with its 16-bit dequantisation and saturation, fancy upsampling, YCbCr->RGB.
#include <algorithm>
#include <atomic>

#include "coeffs_internal.h"

namespace fl::coeffs {

namespace {

// int32 arithmetic that wraps as the SIMD lanes do (no undefined overflow).
inline int32_t add(int32_t a, int32_t b) { return int32_t(uint32_t(a) + uint32_t(b)); }
inline int32_t sub(int32_t a, int32_t b) { return int32_t(uint32_t(a) - uint32_t(b)); }
inline int32_t madd(int a, int b, int ca, int cb) { return add(a * ca, b * cb); }
inline int sat16(int32_t v) { return std::clamp(v, -32768, 32767); }

inline int32_t wrap16(int32_t v) { return int16_t(uint16_t(v)); }  // a 16-bit lane's add (paddw)

// jidctint.c's 1-D ISLOW as libjpeg-turbo's AVX2 kernel computes it, on 8 lanes at once
// (v[k][lane] -> o[k][lane]): in0 +- in4, z3 = in7 + in3 and z4 = in5 + in1 summed in 16 bits,
// every product a pmaddwd pair of its constants (FIX(), 13 bits). Loops the compiler vectorises.
void idct_lanes(const int32_t (*v)[8], int32_t (*o)[8], int fudge) {
    const int32_t f = fudge << 13;
    for (int l = 0; l < 8; ++l) {
        const int32_t tmp0 = add(wrap16(v[0][l] + v[4][l]) * 8192, f);
        const int32_t tmp1 = add(wrap16(v[0][l] - v[4][l]) * 8192, f);
        const int32_t tmp2 = madd(v[2][l], v[6][l], 4433, -10704);
        const int32_t tmp3 = madd(v[2][l], v[6][l], 10703, 4433);
        const int32_t tmp10 = add(tmp0, tmp3), tmp13 = sub(tmp0, tmp3);
        const int32_t tmp11 = add(tmp1, tmp2), tmp12 = sub(tmp1, tmp2);
        const int z3 = wrap16(v[7][l] + v[3][l]), z4 = wrap16(v[5][l] + v[1][l]);
        const int32_t z3p = madd(z3, z4, -6436, 9633), z4p = madd(z3, z4, 9633, 6437);
        const int32_t t0 = add(madd(v[7][l], v[1][l], -4927, -7373), z3p);
        const int32_t t1 = add(madd(v[5][l], v[3][l], -4176, -20995), z4p);
        const int32_t t2 = add(madd(v[5][l], v[3][l], -20995, 4177), z3p);
        const int32_t t3 = add(madd(v[7][l], v[1][l], -7373, 4926), z4p);
        o[0][l] = add(tmp10, t3);
        o[7][l] = sub(tmp10, t3);
        o[1][l] = add(tmp11, t2);
        o[6][l] = sub(tmp11, t2);
        o[2][l] = add(tmp12, t1);
        o[5][l] = sub(tmp12, t1);
        o[3][l] = add(tmp13, t0);
        o[4][l] = sub(tmp13, t0);
    }
}

void idct_scalar(const int16_t *coef, const uint16_t *quant, uint8_t *out, ptrdiff_t stride) {
    int32_t v[8][8], o[8][8], w[8][8];
    for (int r = 0; r < 8; ++r)  // v[row][column]: the column pass's lanes are columns
        for (int c = 0; c < 8; ++c) v[r][c] = int16_t(uint16_t(coef[8 * r + c] * quant[8 * r + c]));  // pmullw
    int ac = 0;
    for (int i = 8; i < 64; ++i) ac |= coef[i];
    if (ac == 0) {  // the AVX2 kernel's shortcut for a block of DCs alone: DC << PASS1_BITS in 16 bits
        for (int r = 0; r < 8; ++r)
            for (int c = 0; c < 8; ++c) w[c][r] = int16_t(uint16_t(v[0][c]) << 2);
    } else {
        idct_lanes(v, o, 0);
        for (int r = 0; r < 8; ++r)  // w[column][row]: transposed, the row pass's lanes are rows
            for (int c = 0; c < 8; ++c) w[c][r] = sat16(add(o[r][c], 1 << 10) >> 11);
    }
    idct_lanes(w, o, 1 << 4);  // the DC fudge rounds the final shift; o[x][row]
    for (int r = 0; r < 8; ++r)
        for (int x = 0; x < 8; ++x) out[r * stride + x] = uint8_t(std::clamp(o[x][r] >> 18, -128, 127) + 128);
}

inline uint8_t clamp255(int v) { return uint8_t(std::clamp(v, 0, 255)); }

// jdcolor.c's ycc_rgb_convert: FIX(1.40200) = 91881, FIX(0.34414) = 22554, FIX(0.71414) = 46802,
// FIX(1.77200) = 116130, ONE_HALF = 32768.
void ycc_rgb_scalar(const uint8_t *y, const uint8_t *cb, const uint8_t *cr, uint8_t *out, int n) {
    for (int i = 0; i < n; ++i) {
        const int yy = y[i], b = cb[i] - 128, r = cr[i] - 128;
        out[3 * i] = clamp255(yy + ((91881 * r + 32768) >> 16));
        out[3 * i + 1] = clamp255(yy + ((-22554 * b - 46802 * r + 32768) >> 16));
        out[3 * i + 2] = clamp255(yy + ((116130 * b + 32768) >> 16));
    }
}

// Column sums 3a + b once per chroma sample (edges replicated), then the horizontal blend.
void h2v2_scalar(const uint8_t *a, const uint8_t *b, int col0, int dw, int x0, int x1, uint8_t *out,
                 int16_t *cs) {
    const int ilo = x0 >> 1, ihi = (x1 - 1) >> 1;
    const int i0 = std::max(0, ilo - 1), i1 = std::min(dw - 1, ihi + 1);
    int16_t *c = cs + 1 - ilo;  // c[j] for j in [ilo - 1, ihi + 1]
    for (int j = i0; j <= i1; ++j) c[j] = int16_t(3 * a[j - col0] + b[j - col0]);
    if (i0 == ilo) c[ilo - 1] = c[ilo];
    if (i1 == ihi) c[ihi + 1] = c[ihi];
    for (int x = x0; x < x1; ++x) {
        const int i = x >> 1;
        out[x - x0] = (x & 1) ? uint8_t((3 * c[i] + c[i + 1] + 7) >> 4) : uint8_t((3 * c[i] + c[i - 1] + 8) >> 4);
    }
}

void h2v1_scalar(const uint8_t *a, int col0, int dw, int x0, int x1, uint8_t *out, uint8_t *) {
    for (int x = x0; x < x1; ++x) {  // 3:1 with the nearer neighbour, +1 / +2 rounding
        const int j = x >> 1;
        const int nb = (x & 1) ? std::min(j + 1, dw - 1) : std::max(j - 1, 0);
        out[x - x0] = uint8_t((3 * a[j - col0] + a[nb - col0] + ((x & 1) ? 2 : 1)) >> 2);
    }
}

void h1v2_scalar(const uint8_t *a, const uint8_t *b, int n, int bias, uint8_t *out) {
    for (int x = 0; x < n; ++x) out[x] = uint8_t((3 * a[x] + b[x] + bias) >> 2);
}

const Kernels kScalar{idct_scalar, ycc_rgb_scalar, h2v2_scalar, h2v1_scalar, h1v2_scalar, idct4x4, idct2x2};

std::atomic<int> g_simd{-1};  // -1: not chosen yet

}  // namespace

const Kernels &scalar_kernels() { return kScalar; }

bool simd_enabled() {
    int s = g_simd.load(std::memory_order_relaxed);
    if (s < 0) {
        s = avx2_kernels() != nullptr && __builtin_cpu_supports("avx2") ? 1 : 0;
        g_simd.store(s, std::memory_order_relaxed);
    }
    return s == 1;
}

bool set_simd(bool enabled) {
    const bool old = simd_enabled();
    g_simd.store(enabled && avx2_kernels() != nullptr && __builtin_cpu_supports("avx2") ? 1 : 0);
    return old;
}

const Kernels &kernels() { return simd_enabled() ? *avx2_kernels() : kScalar; }

}  // namespace fl::coeffs
