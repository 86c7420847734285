// Planar conversion kernels: scalar ones and runtime-dispatched AVX2 ones with identical results.
#include "normalize.h"

#include "resize_kernels.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define FL_HAVE_AVX2_KERNELS 1
#define FL_AVX2 __attribute__((target("avx2")))
#endif

namespace fl {
namespace {

void planar_float_scalar(const uint8_t *src, size_t begin, size_t pixels, const float *scale,
                         const float *shift, float *dst) {
    float *r = dst, *g = dst + pixels, *b = dst + 2 * pixels;
    for (size_t i = begin; i < pixels; ++i) {
        r[i] = static_cast<float>(src[3 * i]) * scale[0] + shift[0];
        g[i] = static_cast<float>(src[3 * i + 1]) * scale[1] + shift[1];
        b[i] = static_cast<float>(src[3 * i + 2]) * scale[2] + shift[2];
    }
}

void planar_u8_scalar(const uint8_t *src, size_t begin, size_t pixels, uint8_t *dst) {
    for (size_t i = begin; i < pixels; ++i) {
        dst[i] = src[3 * i];
        dst[pixels + i] = src[3 * i + 1];
        dst[2 * pixels + i] = src[3 * i + 2];
    }
}

void affine_scalar(const uint8_t *src, size_t begin, size_t count, float scale, float shift, float *dst) {
    for (size_t i = begin; i < count; ++i) dst[i] = static_cast<float>(src[i]) * scale + shift;
}

#ifdef FL_HAVE_AVX2_KERNELS

// 16 RGB pixels (48 bytes at src) split into 16 R, 16 G and 16 B bytes: each channel's bytes
// come from the three 16-byte loads at fixed positions (pixel i's channel c is byte 3i + c).
FL_AVX2 inline void deinterleave16(const uint8_t *src, __m128i &r, __m128i &g, __m128i &b) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i *>(src));
    const __m128i m = _mm_loadu_si128(reinterpret_cast<const __m128i *>(src + 16));
    const __m128i z = _mm_loadu_si128(reinterpret_cast<const __m128i *>(src + 32));
    const char x = -1;  // pshufb: a negative index writes 0
    r = _mm_or_si128(
        _mm_or_si128(_mm_shuffle_epi8(a, _mm_setr_epi8(0, 3, 6, 9, 12, 15, x, x, x, x, x, x, x, x, x, x)),
                     _mm_shuffle_epi8(m, _mm_setr_epi8(x, x, x, x, x, x, 2, 5, 8, 11, 14, x, x, x, x, x))),
        _mm_shuffle_epi8(z, _mm_setr_epi8(x, x, x, x, x, x, x, x, x, x, x, 1, 4, 7, 10, 13)));
    g = _mm_or_si128(
        _mm_or_si128(_mm_shuffle_epi8(a, _mm_setr_epi8(1, 4, 7, 10, 13, x, x, x, x, x, x, x, x, x, x, x)),
                     _mm_shuffle_epi8(m, _mm_setr_epi8(x, x, x, x, x, 0, 3, 6, 9, 12, 15, x, x, x, x, x))),
        _mm_shuffle_epi8(z, _mm_setr_epi8(x, x, x, x, x, x, x, x, x, x, x, 2, 5, 8, 11, 14)));
    b = _mm_or_si128(
        _mm_or_si128(_mm_shuffle_epi8(a, _mm_setr_epi8(2, 5, 8, 11, 14, x, x, x, x, x, x, x, x, x, x, x)),
                     _mm_shuffle_epi8(m, _mm_setr_epi8(x, x, x, x, x, 1, 4, 7, 10, 13, x, x, x, x, x, x))),
        _mm_shuffle_epi8(z, _mm_setr_epi8(x, x, x, x, x, x, x, x, x, x, 0, 3, 6, 9, 12, 15)));
}

// 16 bytes -> 16 floats x * scale + shift at dst (a separate multiply and add, like the scalar).
FL_AVX2 inline void store_affine16(__m128i v, __m256 scale, __m256 shift, float *dst) {
    const __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
    const __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8)));
    _mm256_storeu_ps(dst, _mm256_add_ps(_mm256_mul_ps(lo, scale), shift));
    _mm256_storeu_ps(dst + 8, _mm256_add_ps(_mm256_mul_ps(hi, scale), shift));
}

FL_AVX2 size_t planar_float_avx2(const uint8_t *src, size_t pixels, const float *scale, const float *shift,
                                 float *dst) {
    const __m256 s0 = _mm256_set1_ps(scale[0]), s1 = _mm256_set1_ps(scale[1]), s2 = _mm256_set1_ps(scale[2]);
    const __m256 t0 = _mm256_set1_ps(shift[0]), t1 = _mm256_set1_ps(shift[1]), t2 = _mm256_set1_ps(shift[2]);
    size_t i = 0;
    for (; i + 16 <= pixels; i += 16) {
        __m128i r, g, b;
        deinterleave16(src + 3 * i, r, g, b);
        store_affine16(r, s0, t0, dst + i);
        store_affine16(g, s1, t1, dst + pixels + i);
        store_affine16(b, s2, t2, dst + 2 * pixels + i);
    }
    return i;  // the scalar kernel finishes the last < 16 pixels
}

FL_AVX2 size_t affine_avx2(const uint8_t *src, size_t count, float scale, float shift, float *dst) {
    const __m256 s = _mm256_set1_ps(scale), t = _mm256_set1_ps(shift);
    size_t i = 0;
    for (; i + 16 <= count; i += 16)
        store_affine16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(src + i)), s, t, dst + i);
    return i;  // the scalar kernel finishes the last < 16 values
}

FL_AVX2 size_t planar_u8_avx2(const uint8_t *src, size_t pixels, uint8_t *dst) {
    size_t i = 0;
    for (; i + 16 <= pixels; i += 16) {
        __m128i r, g, b;
        deinterleave16(src + 3 * i, r, g, b);
        _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + i), r);
        _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + pixels + i), g);
        _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + 2 * pixels + i), b);
    }
    return i;
}

#endif

}  // namespace

void hwc_to_planar_float(const uint8_t *src, size_t pixels, const float *scale, const float *shift,
                         float *dst) {
    size_t done = 0;
#ifdef FL_HAVE_AVX2_KERNELS
    if (kernels::use_avx2()) done = planar_float_avx2(src, pixels, scale, shift, dst);
#endif
    planar_float_scalar(src, done, pixels, scale, shift, dst);
}

void hwc_to_planar_u8(const uint8_t *src, size_t pixels, uint8_t *dst) {
    size_t done = 0;
#ifdef FL_HAVE_AVX2_KERNELS
    if (kernels::use_avx2()) done = planar_u8_avx2(src, pixels, dst);
#endif
    planar_u8_scalar(src, done, pixels, dst);
}

void planar_u8_to_float(const uint8_t *src, size_t pixels, const float *scale, const float *shift,
                        float *dst) {
    for (size_t c = 0; c < 3; ++c) {
        const uint8_t *plane = src + c * pixels;
        float *out = dst + c * pixels;
        size_t done = 0;
#ifdef FL_HAVE_AVX2_KERNELS
        if (kernels::use_avx2()) done = affine_avx2(plane, pixels, scale[c], shift[c], out);
#endif
        affine_scalar(plane, done, pixels, scale[c], shift[c], out);
    }
}

void write_planar(const uint8_t *src, size_t pixels, size_t k, const PlanarOutput &out) {
    if (out.data == nullptr) return;
    if (out.is_float)
        hwc_to_planar_float(src, pixels, out.scale, out.shift, static_cast<float *>(out.data) + k * 3 * pixels);
    else
        hwc_to_planar_u8(src, pixels, static_cast<uint8_t *>(out.data) + k * 3 * pixels);
}

}  // namespace fl
