// DCT-scaled reconstruction of coeffs records: the geometry libjpeg-turbo gives a decode at
// 1/2, 1/4 or 1/8 (jdmaster.c, jdsample.c), and its reduced IDCTs with the bits x86-64 gets
// from it (the SSE2 4x4 and 2x2 kernels jddctmgr.c picks there; the C 1x1), so a scaled record
// decode gives the JPEG path's scaled pixels.
#include <algorithm>

#include "coeffs_internal.h"

namespace fl::coeffs {

namespace {

int ceil_div(long a, long b) { return int((a + b - 1) / b); }

// int32 arithmetic that wraps as SIMD lanes do (no undefined overflow).
inline int32_t add(int32_t a, int32_t b) { return int32_t(uint32_t(a) + uint32_t(b)); }
inline int32_t sub(int32_t a, int32_t b) { return int32_t(uint32_t(a) - uint32_t(b)); }
// pmaddwd of the int16 pair (a, b) by (ca, cb).
inline int32_t madd(int a, int b, int ca, int cb) { return add(a * ca, b * cb); }
inline int16_t sat16(int32_t v) { return int16_t(std::clamp(v, -32768, 32767)); }
// pmullw: the dequantised coefficient, wrapped to 16 bits.
inline int deq(const int16_t *coef, const uint16_t *quant, int i) {
    return int16_t(uint16_t(coef[i] * quant[i]));
}
// packsswb then + CENTERJSAMPLE: the SIMD range limit.
inline uint8_t sample(int32_t v) { return uint8_t(std::clamp(v, -128, 127) + 128); }

// The 4-point odd part on (v1, v3, v5, v7) as the SSE2 kernel pairs it: t2 = 2.562 v1 + 0.900 v3
// - 0.601 v5 - 0.510 v7, t0 = 1.062 v1 - 2.173 v3 + 1.452 v5 - 0.211 v7 (FIX(), 13 bits).
inline void odd4(int v1, int v3, int v5, int v7, int32_t &t0, int32_t &t2) {
    t2 = add(madd(v1, v3, 20995, 7373), madd(v5, v7, -4926, -4176));
    t0 = add(madd(v1, v3, 8697, -17799), madd(v5, v7, 11893, -1730));
}

// One 1-D 4-point pass (even part from v0, v2, v6): outputs 0-3 before their descale.
inline void pass4(int v0, int v1, int v2, int v3, int v5, int v6, int v7, int32_t *o) {
    int32_t t0, t2;
    odd4(v1, v3, v5, v7, t0, t2);
    const int32_t e0 = v0 * 16384, e2 = madd(v2, v6, 15137, -6270);  // v0 << (CONST_BITS + 1)
    const int32_t t10 = add(e0, e2), t12 = sub(e0, e2);
    o[0] = add(t10, t2);
    o[3] = sub(t10, t2);
    o[1] = add(t12, t0);
    o[2] = sub(t12, t0);
}

// The 2-point odd part: 3.625 v1 - 1.273 v3 + 0.850 v5 - 0.721 v7.
inline int32_t odd2(int v1, int v3, int v5, int v7) {
    return add(madd(v1, v3, 29692, -10426), madd(v5, v7, 6967, -5906));
}

}  // namespace

Scaled scale_geometry(const Geometry &g, int denom) {
    Scaled s;
    const int min = 8 / denom;  // libjpeg's min_DCT_scaled_size
    s.width = ceil_div(long(g.width) * min, 8);
    s.height = ceil_div(long(g.height) * min, 8);
    for (int i = 0; i < g.ncomp; ++i) {
        const Component &k = g.comps[i];
        Sampling &c = s.comps[i];
        // jpeg_calc_output_dimensions: a subsampled component's IDCT grows by powers of 2
        // while that still divides out of its upsampling (4:2:0 at 1/2: chroma 8x8, no upsampling).
        int bs = min;
        while (bs < 8 && (g.hmax * min) % (k.h * bs * 2) == 0 && (g.vmax * min) % (k.v * bs * 2) == 0) bs *= 2;
        c.bs = bs;
        c.rh = g.hmax * min / (k.h * bs);
        c.rv = g.vmax * min / (k.v * bs);
        c.dw = ceil_div(long(g.width) * k.h * bs, long(g.hmax) * 8);
        c.dh = ceil_div(long(g.height) * k.v * bs, long(g.vmax) * 8);
        c.fancy = min > 1;  // jdmainct.c has no context rows for 1x1 blocks: jinit_upsampler
    }
    return s;
}

// jsimd_idct_4x4_sse2: columns (column 4 unused), their four outputs saturated to int16; a block
// whose rows 1-3 and 5-7 are all zero takes its shortcut (the DC << 2 in 16 bits); then rows.
void idct4x4(const int16_t *coef, const uint16_t *quant, uint8_t *out, ptrdiff_t stride) {
    int16_t ws[4][8] = {};
    int ac = 0;
    for (int r : {1, 2, 3, 5, 6, 7})
        for (int c = 0; c < 8; ++c) ac |= coef[8 * r + c];
    for (int c = 0; c < 8; ++c) {
        if (ac == 0) {
            const int16_t d = int16_t(uint16_t(deq(coef, quant, c)) << 2);  // psllw
            ws[0][c] = ws[1][c] = ws[2][c] = ws[3][c] = d;
            continue;
        }
        if (c == 4) continue;
        int v[8];
        for (int r = 0; r < 8; ++r) v[r] = deq(coef, quant, 8 * r + c);
        int32_t o[4];
        pass4(v[0], v[1], v[2], v[3], v[5], v[6], v[7], o);
        for (int r = 0; r < 4; ++r) ws[r][c] = sat16(add(o[r], 1 << 11) >> 12);  // CONST_BITS - PASS1_BITS + 1
    }
    for (int r = 0; r < 4; ++r) {
        const int16_t *w = ws[r];
        int32_t o[4];
        pass4(w[0], w[1], w[2], w[3], w[5], w[6], w[7], o);
        for (int x = 0; x < 4; ++x) out[r * stride + x] = sample(add(o[x], 1 << 18) >> 19);
    }
}

// jsimd_idct_2x2_sse2: columns 0, 1, 3, 5, 7 to two int32 rows; the row pass saturates the odd
// columns to int16 (its pmaddwd) and shifts column 0 in 32 bits.
void idct2x2(const int16_t *coef, const uint16_t *quant, uint8_t *out, ptrdiff_t stride) {
    int32_t ws[2][8] = {};
    for (int c : {0, 1, 3, 5, 7}) {
        const int32_t t0 = odd2(deq(coef, quant, 8 + c), deq(coef, quant, 24 + c), deq(coef, quant, 40 + c),
                                deq(coef, quant, 56 + c));
        const int32_t t10 = deq(coef, quant, c) * 32768;  // << (CONST_BITS + 2)
        ws[0][c] = add(add(t10, t0), 1 << 12) >> 13;
        ws[1][c] = add(sub(t10, t0), 1 << 12) >> 13;
    }
    for (int r = 0; r < 2; ++r) {
        const int32_t *w = ws[r];
        const int32_t t0 = odd2(sat16(w[1]), sat16(w[3]), sat16(w[5]), sat16(w[7]));
        const int32_t t10 = int32_t(uint32_t(w[0]) << 15);
        out[r * stride] = sample(add(add(t10, t0), 1 << 19) >> 20);
        out[r * stride + 1] = sample(add(sub(t10, t0), 1 << 19) >> 20);
    }
}

// jidctred.c's jpeg_idct_1x1 (libjpeg-turbo has no SIMD one): the DC / 8, through its range
// limit table, which clamps within +-512 of the centre and wraps modulo 1024 beyond.
void idct1x1(const int16_t *coef, const uint16_t *quant, uint8_t *out, ptrdiff_t) {
    const int dc = (int(coef[0]) * int(int16_t(quant[0])) + 4) >> 3;  // ISLOW_MULT_TYPE is short
    const int wrapped = ((dc & 1023) ^ 512) - 512;
    out[0] = sample(wrapped);
}

Idct idct_for(const Kernels &k, int bs) {
    switch (bs) {
        case 4: return k.idct4;
        case 2: return k.idct2;
        case 1: return idct1x1;
        default: return k.idct;
    }
}

}  // namespace fl::coeffs
