// The AVX2 twin of hue (Convert.c's RGB -> HSV -> RGB). It does the scalar kernel's IEEE
// operations in the same order, lane by lane (float lanes where Pillow's C computes in float,
// double lanes where it computes in double), so the bytes are the scalar kernel's, which are
// Pillow's. No FMA: a fused multiply-add would round once where Pillow
// rounds twice (the target is plain "avx2", so GCC cannot contract mul + add either).
#include "pixel_ops_simd.h"

#if FL_PIXEL_AVX2

namespace fl::pixel {
namespace {

// 8 float lanes as two vectors of 4 doubles, and back (each conversion exact or as C's cast).
struct Doubles {
    __m256d lo, hi;
};

FL_AVX2 inline Doubles widen(__m256 x) {
    return {_mm256_cvtps_pd(_mm256_castps256_ps128(x)), _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))};
}

FL_AVX2 inline Doubles widen(__m256i x) {
    return {_mm256_cvtepi32_pd(_mm256_castsi256_si128(x)),
            _mm256_cvtepi32_pd(_mm256_extracti128_si256(x, 1))};
}

FL_AVX2 inline __m256 narrow(Doubles d) {
    return _mm256_set_m128(_mm256_cvtpd_ps(d.hi), _mm256_cvtpd_ps(d.lo));
}

FL_AVX2 inline __m256i truncate(Doubles d) {  // C's (int) of values in int range
    return _mm256_set_m128i(_mm256_cvttpd_epi32(d.hi), _mm256_cvttpd_epi32(d.lo));
}

// C's round() of a double >= 0 as trunc(x + 0.5): x + 0.5 could round up to the next whole
// number only for x within 2^-54 below 0.5, which v * (1.0 - x) never is (checked against
// Convert.c for all 2^24 (h, s, v) by tools/hue_avx2_exhaustive.cpp).
FL_AVX2 inline __m256d add_half(__m256d x) { return _mm256_add_pd(x, _mm256_set1_pd(0.5)); }

FL_AVX2 inline __m256i select(__m256i mask, __m256i yes, __m256i no) {
    return _mm256_blendv_epi8(no, yes, mask);
}

// Lanes of k equal to a or b.
FL_AVX2 inline __m256i either(__m256i k, int a, int b) {
    return _mm256_or_si256(_mm256_cmpeq_epi32(k, _mm256_set1_epi32(a)),
                           _mm256_cmpeq_epi32(k, _mm256_set1_epi32(b)));
}

// fmod(h / 6.0 + 1.0, 1.0): h / 6 + 1 is in (0, 2), so fmod is one exact subtraction.
FL_AVX2 inline __m256d wrap_turn(__m256d h) {
    const __m256d one = _mm256_set1_pd(1.0);
    const __m256d turn = _mm256_add_pd(_mm256_div_pd(h, _mm256_set1_pd(6.0)), one);
    return _mm256_sub_pd(turn, _mm256_and_pd(_mm256_cmp_pd(turn, one, _CMP_GE_OQ), one));
}

// h (float) -> int(float(fmod(h / 6.0 + 1.0, 1.0)) * 255.0), in double as Convert.c.
FL_AVX2 inline __m256i hue_byte(__m256 h) {
    const Doubles d = widen(h);
    const Doubles wrapped = widen(narrow({wrap_turn(d.lo), wrap_turn(d.hi)}));
    const __m256d scale = _mm256_set1_pd(255.0);
    return truncate({_mm256_mul_pd(wrapped.lo, scale), _mm256_mul_pd(wrapped.hi, scale)});
}

// otherwise where mask, yes where it is set: a lane's base of Convert.c's h.
FL_AVX2 inline __m256 hue_base(__m256i mask, float yes, float otherwise) {
    return _mm256_blendv_ps(_mm256_set1_ps(otherwise), _mm256_set1_ps(yes), _mm256_castsi256_ps(mask));
}

// Convert.c's rgb2hsv_row on 8 lanes: H and S (V is the maximum). Grey lanes divide by 1 and
// are replaced by 0, as the scalar kernel does.
FL_AVX2 inline void rgb_to_hs(__m256i r, __m256i g, __m256i b, __m256i &hue, __m256i &sat) {
    const __m256i maxc = _mm256_max_epi32(r, _mm256_max_epi32(g, b));
    const __m256i minc = _mm256_min_epi32(r, _mm256_min_epi32(g, b));
    const __m256i grey = _mm256_cmpeq_epi32(maxc, minc), ones = _mm256_set1_epi32(1);
    const __m256 cr = _mm256_cvtepi32_ps(select(grey, ones, _mm256_sub_epi32(maxc, minc)));
    const __m256 s = _mm256_div_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(maxc, minc)),
                                   _mm256_cvtepi32_ps(select(grey, ones, maxc)));
    // (maxc - x) / cr is 0 for the maximum and 1 for the minimum (exactly, as IEEE divides), so
    // Convert.c's h is base + q or base - q, q the middle value's (maxc - mid) / cr: bc - gc in
    // float is that sum's float rounding, and 2.0 + rc - bc, 4.0 + gc - rc are exact in double
    // and rounded to float once, as the float sum is.
    const __m256i mid = _mm256_sub_epi32(_mm256_add_epi32(r, _mm256_add_epi32(g, b)),
                                         _mm256_add_epi32(maxc, minc));
    const __m256 q = _mm256_div_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(maxc, mid)), cr);
    const __m256i r_max = _mm256_cmpeq_epi32(r, maxc), g_max = _mm256_cmpeq_epi32(g, maxc);
    const __m256i g_min = _mm256_cmpeq_epi32(g, minc), r_min = _mm256_cmpeq_epi32(r, minc);
    // r max: g min -1 + q, else 1 - q; g max: r min 3 - q, else 1 + q; b max: g min 5 - q, else 3 + q
    const __m256 base = _mm256_blendv_ps(
        _mm256_blendv_ps(hue_base(g_min, 5.0f, 3.0f), hue_base(r_min, 3.0f, 1.0f),
                         _mm256_castsi256_ps(g_max)),
        hue_base(g_min, -1.0f, 1.0f), _mm256_castsi256_ps(r_max));
    const __m256i negative = select(r_max, _mm256_andnot_si256(g_min, r_max),
                                    select(g_max, r_min, g_min));
    const __m256 sign = _mm256_and_ps(_mm256_castsi256_ps(negative), _mm256_set1_ps(-0.0f));
    const __m256 h = _mm256_add_ps(base, _mm256_xor_ps(q, sign));
    const Doubles sd = widen(s);
    const __m256d scale = _mm256_set1_pd(255.0);
    const __m256i us = truncate({_mm256_mul_pd(sd.lo, scale), _mm256_mul_pd(sd.hi, scale)});
    hue = _mm256_andnot_si256(grey, hue_byte(h));
    sat = _mm256_andnot_si256(grey, us);
}

// round(v * (1.0 - x)) for 8 lanes, x in double: Convert.c's p, q and t.
FL_AVX2 inline __m256i scaled_value(Doubles v, Doubles x) {
    const __m256d one = _mm256_set1_pd(1.0);
    return truncate({add_half(_mm256_mul_pd(v.lo, _mm256_sub_pd(one, x.lo))),
                     add_half(_mm256_mul_pd(v.hi, _mm256_sub_pd(one, x.hi)))});
}

// Convert.c's hsv2rgb on 8 lanes, returned as 0x00BBGGRR. Sector i = floor(6h / 255) and
// f = frac(6h / 255) come from integers: (6h mod 255) / 255.0f and s / 255.0f are the floats
// Convert.c's doubles round to, for every h and s (tools/hue_avx2_exhaustive.cpp). A grey lane
// (s = 0) gets p = q = t = v, so it needs no select.
FL_AVX2 inline __m256i hsv_to_rgb(__m256i h, __m256i s, __m256i v) {
    const __m256i x6 = _mm256_mullo_epi32(h, _mm256_set1_epi32(6));
    const __m256i i = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(x6, _mm256_set1_epi32(1)), _mm256_srli_epi32(x6, 8)), 8);
    const __m256i rest = _mm256_sub_epi32(x6, _mm256_mullo_epi32(i, _mm256_set1_epi32(255)));
    const __m256 f = _mm256_div_ps(_mm256_cvtepi32_ps(rest), _mm256_set1_ps(255.0f));
    const __m256 fs = _mm256_div_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(255.0f));
    const __m256i k = _mm256_andnot_si256(_mm256_cmpeq_epi32(i, _mm256_set1_epi32(6)), i);
    // Every sector takes p and one of q (odd sectors) or t (even): w below.
    const Doubles fsd = widen(fs), fd = widen(f), vd = widen(v);
    const Doubles q_in = widen(_mm256_mul_ps(fs, f));  // fs * f is a float product in C
    const __m256d one = _mm256_set1_pd(1.0);
    const Doubles t_in = {_mm256_mul_pd(fsd.lo, _mm256_sub_pd(one, fd.lo)),
                          _mm256_mul_pd(fsd.hi, _mm256_sub_pd(one, fd.hi))};
    const __m256i odd = _mm256_slli_epi32(k, 31);  // blendv_pd reads each lane's sign bit
    const __m256d odd_lo = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(odd)));
    const __m256d odd_hi = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm256_extracti128_si256(odd, 1)));
    const Doubles w_in = {_mm256_blendv_pd(t_in.lo, q_in.lo, odd_lo),
                          _mm256_blendv_pd(t_in.hi, q_in.hi, odd_hi)};
    const __m256i p = scaled_value(vd, fsd), w = scaled_value(vd, w_in);
    // Sector k's (R, G, B): 0 (v,w,p) 1 (w,v,p) 2 (p,v,w) 3 (p,w,v) 4 (w,p,v) 5 (v,p,w).
    const __m256i red = select(either(k, 0, 5), v,
                               select(either(k, 1, 4), w, p));
    const __m256i green = select(either(k, 1, 2), v,
                                 select(either(k, 0, 3), w, p));
    const __m256i blue = select(either(k, 3, 4), v,
                                select(either(k, 2, 5), w, p));
    return _mm256_or_si256(red, _mm256_or_si256(_mm256_slli_epi32(green, 8),
                                                _mm256_slli_epi32(blue, 16)));
}


}  // namespace

FL_AVX2 size_t hue_avx2(uint8_t *image, size_t pixels, int shift) {
    const __m256i low = _mm256_set1_epi32(255), turn = _mm256_set1_epi32(shift);
    size_t done = 0;
    for (; done + 8 <= pixels; done += 8) {
        uint8_t *p = image + 3 * done;
        const __m256i px = load_rgb8(p);
        const __m256i r = _mm256_and_si256(px, low);
        const __m256i g = _mm256_and_si256(_mm256_srli_epi32(px, 8), low);
        const __m256i b = _mm256_srli_epi32(px, 16);
        __m256i h, s;
        rgb_to_hs(r, g, b, h, s);
        h = _mm256_and_si256(_mm256_add_epi32(h, turn), low);
        const __m256i v = _mm256_max_epi32(r, _mm256_max_epi32(g, b));
        store_rgb8(p, hsv_to_rgb(h, s, v));
    }
    return done;
}

bool avx2_built() { return true; }

}  // namespace fl::pixel

#else  // no AVX2 build: the scalar kernels do everything

namespace fl::pixel {
size_t hue_avx2(uint8_t *, size_t, int) { return 0; }
bool avx2_built() { return false; }
}  // namespace fl::pixel

#endif
