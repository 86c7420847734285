// Reduced IDCTs of the coeffs codec in SIMD (the AVX2 kernel set, chosen at run time): the same
// bits as coeffs_scaled.cpp's scalar ones, which follow libjpeg-turbo's SSE2 4x4 and 2x2.
#include "coeffs_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include <cstring>

#define AVX2 __attribute__((target("avx2")))

namespace fl::coeffs {

namespace {

AVX2 inline __m128i k16(int a, int b) { return _mm_set1_epi32(int((uint32_t(uint16_t(b)) << 16) | uint16_t(a))); }
AVX2 inline __m128i ld(const void *p) { return _mm_loadu_si128(static_cast<const __m128i *>(p)); }

// The 4-point pass on 4 int32 lanes: pairs (v1, v3), (v5, v7), (v2, v6) interleaved int16, e0 the
// even input << 14 in int32; o[0..3] before the descale.
struct Pass4 {
    __m128i o[4];
    AVX2 Pass4(__m128i p13, __m128i p57, __m128i p26, __m128i e0) {
        const __m128i t2 = _mm_add_epi32(_mm_madd_epi16(p13, k16(20995, 7373)), _mm_madd_epi16(p57, k16(-4926, -4176)));
        const __m128i t0 = _mm_add_epi32(_mm_madd_epi16(p13, k16(8697, -17799)), _mm_madd_epi16(p57, k16(11893, -1730)));
        const __m128i e2 = _mm_madd_epi16(p26, k16(15137, -6270));
        const __m128i t10 = _mm_add_epi32(e0, e2), t12 = _mm_sub_epi32(e0, e2);
        o[0] = _mm_add_epi32(t10, t2);
        o[3] = _mm_sub_epi32(t10, t2);
        o[1] = _mm_add_epi32(t12, t0);
        o[2] = _mm_sub_epi32(t12, t0);
    }
};

// Descale 8 int32 lanes (lo, hi) by shift with rounding, saturated to 8 int16.
AVX2 inline __m128i descale16(__m128i lo, __m128i hi, int shift) {
    const __m128i r = _mm_set1_epi32(1 << (shift - 1));
    return _mm_packs_epi32(_mm_sra_epi32(_mm_add_epi32(lo, r), _mm_cvtsi32_si128(shift)),
                           _mm_sra_epi32(_mm_add_epi32(hi, r), _mm_cvtsi32_si128(shift)));
}

// Pass 1 of the 4x4: the columns (8 int16 lanes) to pass-1 rows w[0..3], saturated to int16.
AVX2 void columns4(const int16_t *coef, const uint16_t *quant, __m128i *w) {
    __m128i v[8];
    for (int r = 0; r < 8; ++r) v[r] = r == 4 ? _mm_setzero_si128() : _mm_mullo_epi16(ld(coef + 8 * r), ld(quant + 8 * r));
    const __m128i ac = _mm_or_si128(_mm_or_si128(_mm_or_si128(ld(coef + 8), ld(coef + 16)), ld(coef + 24)),
                                    _mm_or_si128(_mm_or_si128(ld(coef + 40), ld(coef + 48)), ld(coef + 56)));
    if (_mm_testz_si128(ac, ac)) {  // the SSE2 kernel's shortcut: DC << 2 in 16 bits
        w[0] = w[1] = w[2] = w[3] = _mm_slli_epi16(v[0], 2);
        return;
    }
    const __m128i z = _mm_setzero_si128();
    const Pass4 lo(_mm_unpacklo_epi16(v[1], v[3]), _mm_unpacklo_epi16(v[5], v[7]), _mm_unpacklo_epi16(v[2], v[6]),
                   _mm_srai_epi32(_mm_unpacklo_epi16(z, v[0]), 2));
    const Pass4 hi(_mm_unpackhi_epi16(v[1], v[3]), _mm_unpackhi_epi16(v[5], v[7]), _mm_unpackhi_epi16(v[2], v[6]),
                   _mm_srai_epi32(_mm_unpackhi_epi16(z, v[0]), 2));
    for (int r = 0; r < 4; ++r) w[r] = descale16(lo.o[r], hi.o[r], 12);
}

}  // namespace

AVX2 void idct4x4_avx2(const int16_t *coef, const uint16_t *quant, uint8_t *out, ptrdiff_t stride) {
    __m128i w[4];
    columns4(coef, quant, w);
    // Transposed: [col0 | col1], [col2 | col3], [col4 | col5], [col6 | col7], 4 rows each.
    const __m128i a01 = _mm_unpacklo_epi16(w[0], w[1]), a23 = _mm_unpacklo_epi16(w[2], w[3]);
    const __m128i b01 = _mm_unpackhi_epi16(w[0], w[1]), b23 = _mm_unpackhi_epi16(w[2], w[3]);
    const __m128i c01 = _mm_unpacklo_epi32(a01, a23), c23 = _mm_unpackhi_epi32(a01, a23);
    const __m128i c45 = _mm_unpacklo_epi32(b01, b23), c67 = _mm_unpackhi_epi32(b01, b23);
    const Pass4 p(_mm_unpackhi_epi16(c01, c23), _mm_unpackhi_epi16(c45, c67), _mm_unpacklo_epi16(c23, c67),
                  _mm_srai_epi32(_mm_unpacklo_epi16(_mm_setzero_si128(), c01), 2));
    // Output columns 0-3, lanes = rows, descaled by 19, to int8 rows of 4 bytes + 128.
    const __m128i x02 = descale16(p.o[0], p.o[2], 19), x13 = descale16(p.o[1], p.o[3], 19);
    const __m128i y = _mm_unpacklo_epi16(x02, x13), z = _mm_unpackhi_epi16(x02, x13);
    const __m128i rows = _mm_xor_si128(_mm_packs_epi16(_mm_unpacklo_epi32(y, z), _mm_unpackhi_epi32(y, z)),
                                       _mm_set1_epi8(char(0x80)));
    alignas(16) uint8_t bytes[16];
    _mm_store_si128(reinterpret_cast<__m128i *>(bytes), rows);
    for (int r = 0; r < 4; ++r) std::memcpy(out + r * stride, bytes + 4 * r, 4);
}

// Columns 0-7 to pass-1 rows A, B (int32, as the SSE2 kernel keeps them), then each row's odd
// columns saturated to int16 and paired by one madd, its column 0 shifted in 32 bits.
AVX2 void idct2x2_avx2(const int16_t *coef, const uint16_t *quant, uint8_t *out, ptrdiff_t stride) {
    __m128i v[8];
    for (int r = 0; r < 8; r += r == 0 ? 1 : 2) v[r] = _mm_mullo_epi16(ld(coef + 8 * r), ld(quant + 8 * r));
    const __m128i z = _mm_setzero_si128(), k13 = k16(29692, -10426), k57 = k16(6967, -5906);
    __m128i a[2], b[2];  // rows A, B: columns 0-3, 4-7
    for (int h = 0; h < 2; ++h) {
        const __m128i p13 = h ? _mm_unpackhi_epi16(v[1], v[3]) : _mm_unpacklo_epi16(v[1], v[3]);
        const __m128i p57 = h ? _mm_unpackhi_epi16(v[5], v[7]) : _mm_unpacklo_epi16(v[5], v[7]);
        const __m128i t0 = _mm_add_epi32(_mm_madd_epi16(p13, k13), _mm_madd_epi16(p57, k57));
        const __m128i t10 = _mm_srai_epi32(h ? _mm_unpackhi_epi16(z, v[0]) : _mm_unpacklo_epi16(z, v[0]), 1);
        const __m128i r = _mm_set1_epi32(1 << 12);
        a[h] = _mm_srai_epi32(_mm_add_epi32(_mm_add_epi32(t10, t0), r), 13);
        b[h] = _mm_srai_epi32(_mm_add_epi32(_mm_sub_epi32(t10, t0), r), 13);
    }
    const __m128i odd = _mm_setr_epi16(0, 29692, 0, -10426, 0, 6967, 0, -5906);
    const __m128i ma = _mm_madd_epi16(_mm_packs_epi32(a[0], a[1]), odd);
    const __m128i mb = _mm_madd_epi16(_mm_packs_epi32(b[0], b[1]), odd);
    const __m128i h = _mm_hadd_epi32(ma, mb);
    const __m128i t0 = _mm_hadd_epi32(h, h);                           // (row A, row B, ..)
    const __m128i t10 = _mm_slli_epi32(_mm_unpacklo_epi32(a[0], b[0]), 15);  // column 0 << 15
    const __m128i r = _mm_set1_epi32(1 << 19);
    const __m128i c = _mm_srai_epi32(_mm_add_epi32(_mm_add_epi32(t10, t0), r), 20);
    const __m128i d = _mm_srai_epi32(_mm_add_epi32(_mm_sub_epi32(t10, t0), r), 20);
    const __m128i e = _mm_packs_epi32(_mm_unpacklo_epi32(c, d), z);  // C0 D0 C1 D1
    const uint32_t bytes = uint32_t(_mm_cvtsi128_si32(_mm_xor_si128(_mm_packs_epi16(e, z), _mm_set1_epi8(char(0x80)))));
    out[0] = uint8_t(bytes);
    out[1] = uint8_t(bytes >> 8);
    out[stride] = uint8_t(bytes >> 16);
    out[stride + 1] = uint8_t(bytes >> 24);
}

}  // namespace fl::coeffs

#endif
