// AVX2 twins of the blends (ImageEnhance's Image.blend: brightness, contrast, saturation,
// sharpness) and of the sums they need (luma, the SMOOTH filter: each row's products by 1/13
// made once, as the same float products the scalar sum makes nine times). Each lane does the scalar
// kernel's float operations in its order (no FMA: the target is plain "avx2", so mul + add stay
// two roundings, as in Pillow), and luma is the same integer sum, so the bytes are the scalar
// kernels', which are Pillow's. Each returns how much it did (whole vectors); the scalar kernel
// does the rest.
#include <algorithm>

#include "pixel_ops_simd.h"

#if FL_PIXEL_AVX2

namespace fl::pixel {
namespace {

FL_AVX2 inline __m256 float8(const uint8_t *p) {  // 8 bytes as 8 float lanes
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p))));
}

// blend_fast<kInside> on 8 lanes: degenerate + alpha * (value - degenerate), clipped outside
// [0, 1], truncated.
template <bool kInside>
FL_AVX2 inline __m256i blend8(__m256 degenerate, __m256 value, __m256 alpha) {
    __m256 temp = _mm256_add_ps(degenerate, _mm256_mul_ps(alpha, _mm256_sub_ps(value, degenerate)));
    if (!kInside) temp = _mm256_min_ps(_mm256_max_ps(temp, _mm256_setzero_ps()), _mm256_set1_ps(255.0f));
    return _mm256_cvttps_epi32(temp);
}

// 16 int32 lanes in 0..255 (a, then b) as 16 bytes in order.
FL_AVX2 inline __m128i pack16(__m256i a, __m256i b) {
    const __m256i words = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
    return _mm_packus_epi16(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1));
}

FL_AVX2 inline void store16(uint8_t *p, __m128i v) {
    _mm_storeu_si128(reinterpret_cast<__m128i *>(p), v);
}

// luma() on 8 pixels' lanes: ITU-R 601-2 in 16-bit fixed point.
FL_AVX2 inline __m256i luma8(__m256i r, __m256i g, __m256i b) {
    const __m256i sum = _mm256_add_epi32(
        _mm256_add_epi32(_mm256_mullo_epi32(r, _mm256_set1_epi32(19595)),
                         _mm256_mullo_epi32(g, _mm256_set1_epi32(38470))),
        _mm256_add_epi32(_mm256_mullo_epi32(b, _mm256_set1_epi32(7471)), _mm256_set1_epi32(0x8000)));
    return _mm256_srli_epi32(sum, 16);
}

template <bool kInside>
FL_AVX2 size_t blend_rows_with(const uint8_t *degenerate, const uint8_t *image, uint8_t *out,
                               size_t n, float alpha) {
    const __m256 a = _mm256_set1_ps(alpha);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256i lo = blend8<kInside>(float8(degenerate + i), float8(image + i), a);
        const __m256i hi = blend8<kInside>(float8(degenerate + i + 8), float8(image + i + 8), a);
        store16(out + i, pack16(lo, hi));
    }
    return i;
}

template <bool kInside>
FL_AVX2 size_t blend_constant_with(uint8_t *image, size_t n, int degenerate, float alpha) {
    const __m256 a = _mm256_set1_ps(alpha), d = _mm256_set1_ps(static_cast<float>(degenerate));
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256i lo = blend8<kInside>(d, float8(image + i), a);
        const __m256i hi = blend8<kInside>(d, float8(image + i + 8), a);
        store16(image + i, pack16(lo, hi));
    }
    return i;
}

template <bool kInside>
FL_AVX2 size_t saturation_with(uint8_t *image, size_t pixels, float factor) {
    const __m256i low = _mm256_set1_epi32(255);
    const __m256 a = _mm256_set1_ps(factor);
    size_t done = 0;
    for (; done + 8 <= pixels; done += 8) {
        uint8_t *p = image + 3 * done;
        const __m256i px = load_rgb8(p);
        const __m256i r = _mm256_and_si256(px, low);
        const __m256i g = _mm256_and_si256(_mm256_srli_epi32(px, 8), low);
        const __m256i b = _mm256_srli_epi32(px, 16);
        const __m256 gray = _mm256_cvtepi32_ps(luma8(r, g, b));
        const __m256i r2 = blend8<kInside>(gray, _mm256_cvtepi32_ps(r), a);
        const __m256i g2 = blend8<kInside>(gray, _mm256_cvtepi32_ps(g), a);
        const __m256i b2 = blend8<kInside>(gray, _mm256_cvtepi32_ps(b), a);
        store_rgb8(p, _mm256_or_si256(r2, _mm256_or_si256(_mm256_slli_epi32(g2, 8),
                                                          _mm256_slli_epi32(b2, 16))));
    }
    return done;
}

// left + centre + right of a row's terms at 8 positions: (t[i-3] + t[i]) + t[i+3].
FL_AVX2 inline __m256 three(const float *t) {
    return _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(t - 3), _mm256_loadu_ps(t)),
                         _mm256_loadu_ps(t + 3));
}

}  // namespace

size_t blend_rows_avx2(const uint8_t *degenerate, const uint8_t *image, uint8_t *out, size_t n,
                       float alpha) {
    if (alpha >= 0.0f && alpha <= 1.0f) return blend_rows_with<true>(degenerate, image, out, n, alpha);
    return blend_rows_with<false>(degenerate, image, out, n, alpha);
}

size_t blend_constant_avx2(uint8_t *image, size_t bytes, int degenerate, float alpha) {
    if (alpha >= 0.0f && alpha <= 1.0f) return blend_constant_with<true>(image, bytes, degenerate, alpha);
    return blend_constant_with<false>(image, bytes, degenerate, alpha);
}

size_t saturation_avx2(uint8_t *image, size_t pixels, float factor) {
    if (factor >= 0.0f && factor <= 1.0f) return saturation_with<true>(image, pixels, factor);
    return saturation_with<false>(image, pixels, factor);
}

FL_AVX2 size_t luma_sum_avx2(const uint8_t *image, size_t pixels, uint64_t &sum) {
    const __m256i low = _mm256_set1_epi32(255);
    size_t done = 0;
    while (done + 8 <= pixels) {
        // int32 lanes hold up to 2^23 lumas of 255 each: sum a block, then widen.
        const size_t block_end = done + std::min<size_t>((pixels - done) & ~size_t{7}, 8u << 20);
        __m256i lanes = _mm256_setzero_si256();
        for (; done < block_end; done += 8) {
            const __m256i px = load_rgb8(image + 3 * done);
            const __m256i g = _mm256_and_si256(_mm256_srli_epi32(px, 8), low);
            lanes = _mm256_add_epi32(lanes, luma8(_mm256_and_si256(px, low), g, _mm256_srli_epi32(px, 16)));
        }
        alignas(32) uint32_t part[8];
        _mm256_store_si256(reinterpret_cast<__m256i *>(part), lanes);
        for (uint32_t v : part) sum += v;
    }
    return done;
}

FL_AVX2 void smooth_terms_avx2(const uint8_t *row, float *terms, size_t n) {
    const float k1 = static_cast<float>(1.0 / 13.0);
    size_t j = 0;
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(terms + j, _mm256_mul_ps(float8(row + j), _mm256_set1_ps(k1)));
    for (; j < n; ++j) terms[j] = static_cast<float>(row[j]) * k1;
}

// The SMOOTH filter at bytes [3, done) of one row from its neighbours' terms (Filter.c's sums in
// its order: row below, row, row above, each left + centre + right): returns done.
FL_AVX2 size_t smooth_row_avx2(const float *up, const float *mid_terms, const float *down,
                               const uint8_t *mid, uint8_t *smooth, size_t row_bytes) {
    const __m256 k5 = _mm256_set1_ps(static_cast<float>(5.0 / 13.0));
    size_t i = 3;
    for (; i + 8 + 3 <= row_bytes; i += 8) {
        __m256 ss = _mm256_set1_ps(0.5f);
        ss = _mm256_add_ps(ss, three(down + i));
        const __m256 centre = _mm256_mul_ps(float8(mid + i), k5);
        ss = _mm256_add_ps(ss, _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(mid_terms + i - 3), centre),
                                             _mm256_loadu_ps(mid_terms + i + 3)));
        ss = _mm256_add_ps(ss, three(up + i));
        ss = _mm256_min_ps(_mm256_max_ps(ss, _mm256_setzero_ps()), _mm256_set1_ps(255.0f));
        const __m128i bytes = pack16(_mm256_cvttps_epi32(ss), _mm256_setzero_si256());
        _mm_storel_epi64(reinterpret_cast<__m128i *>(smooth + i), bytes);
    }
    return i;
}

}  // namespace fl::pixel

#else  // no AVX2 build: the scalar kernels do everything

namespace fl::pixel {
size_t blend_rows_avx2(const uint8_t *, const uint8_t *, uint8_t *, size_t, float) { return 0; }
size_t blend_constant_avx2(uint8_t *, size_t, int, float) { return 0; }
size_t saturation_avx2(uint8_t *, size_t, float) { return 0; }
size_t luma_sum_avx2(const uint8_t *, size_t, uint64_t &) { return 0; }
void smooth_terms_avx2(const uint8_t *, float *, size_t) {}
size_t smooth_row_avx2(const float *, const float *, const float *, const uint8_t *, uint8_t *,
                       size_t) {
    return 3;
}
}  // namespace fl::pixel

#endif
