// What the AVX2 pixel kernels (pixel_ops_avx2*.cpp) share: the target attribute and the moves of
// 8 RGB pixels between memory and int32 lanes. FL_PIXEL_AVX2 is 0 where the compiler cannot build
// them (then the scalar kernels run everywhere).
#pragma once

#include "pixel_ops_internal.h"

#if defined(__GNUC__) && defined(__x86_64__)
#define FL_PIXEL_AVX2 1
#include <immintrin.h>
#define FL_AVX2 __attribute__((target("avx2")))

namespace fl::pixel {

// 8 RGB pixels (24 bytes, nothing read past them) as 8 int32 lanes 0x00BBGGRR.
FL_AVX2 inline __m256i load_rgb8(const uint8_t *p) {
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
    const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p + 8));
    const __m128i lo_mask = _mm_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1);
    const __m128i hi_mask = _mm_setr_epi8(4, 5, 6, -1, 7, 8, 9, -1, 10, 11, 12, -1, 13, 14, 15, -1);
    return _mm256_set_m128i(_mm_shuffle_epi8(hi, hi_mask), _mm_shuffle_epi8(lo, lo_mask));
}

// The inverse: two 16-byte stores covering exactly the 24 bytes (in place is safe: the load of
// these pixels came first and nothing beyond them is touched).
FL_AVX2 inline void store_rgb8(uint8_t *p, __m256i px) {
    const __m128i lo_mask = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
    const __m128i hi_mask = _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14);
    const __m128i lo = _mm_shuffle_epi8(_mm256_castsi256_si128(px), lo_mask);
    const __m128i hi = _mm_shuffle_epi8(_mm256_extracti128_si256(px, 1), hi_mask);
    _mm_storeu_si128(reinterpret_cast<__m128i *>(p), lo);
    _mm_storeu_si128(reinterpret_cast<__m128i *>(p + 8), _mm_or_si128(_mm_srli_si128(lo, 8), hi));
}

}  // namespace fl::pixel

#else
#define FL_PIXEL_AVX2 0
#endif
