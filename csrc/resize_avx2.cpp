// AVX2 row kernels: the same 32-bit integer sums as the scalar ones, so the bytes are identical.
#include <cstring>

#include "resize_kernels.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define FL_AVX2 __attribute__((target("avx2")))

namespace fl {
namespace kernels {
namespace {

inline uint32_t load4(const uint8_t *p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// Shifts out the fixed-point fraction of 8 sums, in order, as 8 saturated int16 (clip8 follows
// with a packus to bytes).
FL_AVX2 inline __m128i finish8(__m256i acc) {
    const __m256i v = _mm256_srai_epi32(acc, kPrecisionBits);
    return _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
}

}  // namespace

FL_AVX2 void horizontal_avx2(const uint8_t *in, uint8_t *out, const ResampleAxis &axis, bool flip) {
    // One pixel's three channels (and a fourth, ignored byte) in the lanes of one register.
    const int ksize = axis.ksize;
    const int out_size = axis.out_size;
    const __m128i half = _mm_set1_epi32(1 << (kPrecisionBits - 1));
    for (int xx = 0; xx < out_size; ++xx) {
        const int32_t *k = &axis.weights[static_cast<size_t>(xx) * ksize];
        const uint8_t *p = in + 3 * axis.bounds[2 * xx];
        const int taps = axis.bounds[2 * xx + 1];
        __m128i acc = half;
        for (int x = 0; x < taps; ++x) {
            const __m128i px = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(static_cast<int>(load4(p + 3 * x))));
            acc = _mm_add_epi32(acc, _mm_mullo_epi32(px, _mm_set1_epi32(k[x])));
        }
        acc = _mm_srai_epi32(acc, kPrecisionBits);
        const __m128i packed = _mm_packus_epi16(_mm_packs_epi32(acc, acc), acc);  // clamps 0..255
        store_rgb(out + 3 * (flip ? out_size - 1 - xx : xx), static_cast<uint32_t>(_mm_cvtsi128_si32(packed)));
    }
}

FL_AVX2 void horizontal_pairs_avx2(const uint8_t *in, uint8_t *out, const ResampleAxis &axis,
                                   const int32_t *pair_weights, bool flip) {
    // Pixels 2j and 2j+1 share a register (one per 128-bit half), halving the multiplies.
    const int ksize = axis.ksize;
    const int taps = axis.taps;
    const int out_size = axis.out_size;
    const int *bounds = axis.bounds.data();
    const __m256i half = _mm256_set1_epi32(1 << (kPrecisionBits - 1));
    const int last = out_size - 1;
    int xx = 0;
    for (const int32_t *w = pair_weights; xx + 1 < out_size; xx += 2) {
        const uint8_t *pa = in + 3 * bounds[2 * xx];
        const uint8_t *pb = in + 3 * bounds[2 * xx + 2];
        __m256i acc = half;
        for (int x = 0; x < taps; ++x, w += 8) {
            __m128i bytes = _mm_cvtsi32_si128(static_cast<int>(load4(pa + 3 * x)));
            bytes = _mm_insert_epi32(bytes, static_cast<int>(load4(pb + 3 * x)), 1);
            const __m256i px = _mm256_cvtepu8_epi32(bytes);
            const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(w));
            acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(px, wv));
        }
        const __m256i words = _mm256_packs_epi32(_mm256_srai_epi32(acc, kPrecisionBits), acc);
        const __m256i bytes = _mm256_packus_epi16(words, words);
        const uint32_t a = static_cast<uint32_t>(_mm256_extract_epi32(bytes, 0));
        const uint32_t b = static_cast<uint32_t>(_mm256_extract_epi32(bytes, 4));
        store_rgb(out + 3 * (flip ? last - xx : xx), a);
        store_rgb(out + 3 * (flip ? last - xx - 1 : xx + 1), b);
    }
    if (xx < out_size) {  // odd width: the last pixel alone
        const int32_t *k = &axis.weights[static_cast<size_t>(xx) * ksize];
        const uint8_t *p = in + 3 * bounds[2 * xx];
        __m128i acc = _mm256_castsi256_si128(half);
        for (int x = 0; x < taps; ++x) {
            const __m128i px = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(static_cast<int>(load4(p + 3 * x))));
            acc = _mm_add_epi32(acc, _mm_mullo_epi32(px, _mm_set1_epi32(k[x])));
        }
        acc = _mm_srai_epi32(acc, kPrecisionBits);
        const __m128i packed = _mm_packus_epi16(_mm_packs_epi32(acc, acc), acc);
        store_rgb(out + 3 * (flip ? last - xx : xx), static_cast<uint32_t>(_mm_cvtsi128_si32(packed)));
    }
}

namespace {

// Per pair of taps (2j, 2j+1), a per-lane byte shuffle taking those two pixels' R, G and B
// (bytes 6j..6j+5 of a 16-byte load) into int16 pairs (R0 R1)(G0 G1)(B0 B1)(0 0), ready for
// madd; a missing second tap (odd T) reads as 0.
template <int T>
FL_AVX2 inline __m256i tap_pair_shuffle(int j) {
    const char a = static_cast<char>(6 * j), z = -1;
    const bool two = 2 * j + 1 < T;
    const char b = two ? static_cast<char>(a + 3) : z;
    const char b1 = two ? static_cast<char>(a + 4) : z;
    const char b2 = two ? static_cast<char>(a + 5) : z;
    const char a1 = static_cast<char>(a + 1), a2 = static_cast<char>(a + 2);
    return _mm256_setr_epi8(a, z, b, z, a1, z, b1, z, a2, z, b2, z, z, z, z, z,
                            a, z, b, z, a1, z, b1, z, a2, z, b2, z, z, z, z, z);
}

// Two output pixels (one per 128-bit half) of a T-tap window: one 16-byte load per pixel covers
// all T <= 5 source pixels, and one shuffle and one madd per pair of taps sum them (weights
// are int16, kPrecisionBits 14, so the int32 sums are the scalar kernel's exactly).
template <int T>
FL_AVX2 inline __m256i pair_sum(const uint8_t *pa, const uint8_t *pb, const int32_t *w) {
    const __m256i src = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(pa))),
        _mm_loadu_si128(reinterpret_cast<const __m128i *>(pb)), 1);
    __m256i acc = _mm256_set1_epi32(1 << (kPrecisionBits - 1));
    for (int j = 0; j < (T + 1) / 2; ++j) {
        const __m256i px = _mm256_shuffle_epi8(src, tap_pair_shuffle<T>(j));
        const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(w + 8 * j));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(px, wv));
    }
    return _mm256_srai_epi32(acc, kPrecisionBits);
}

// Positions p..p+3 in memory order from two pair sums (p, p+1) and (p+2, p+3): 12 bytes, stored
// with a 16-byte write whose last 4 bytes the next group overwrites.
FL_AVX2 inline void store4(uint8_t *dst, __m256i s01, __m256i s23) {
    const __m256i words = _mm256_packs_epi32(s01, s23);      // [p0 p2 | p1 p3] as int16
    const __m256i bytes = _mm256_packus_epi16(words, words);  // clip8
    const __m256i ordered = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 0, 0, 0, 0));
    const __m128i packed = _mm_shuffle_epi8(_mm256_castsi256_si128(ordered),
                                            _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1));
    _mm_storeu_si128(reinterpret_cast<__m128i *>(dst), packed);
}

template <int T>
FL_AVX2 void positions_avx2(const uint8_t *in, uint8_t *out, int n, const int *offsets, const int32_t *w) {
    constexpr int kStride = 8 * ((T + 1) / 2);  // int32 weight words per pair of positions
    int p = 0;
    for (; p + 6 <= n; p += 4, w += 2 * kStride) {
        const __m256i s01 = pair_sum<T>(in + offsets[p], in + offsets[p + 1], w);
        const __m256i s23 = pair_sum<T>(in + offsets[p + 2], in + offsets[p + 3], w + kStride);
        store4(out + 3 * p, s01, s23);
    }
    for (; p < n; p += 2, w += kStride) {  // the last few: 3-byte stores that stay inside the row
        const __m256i s = pair_sum<T>(in + offsets[p], in + offsets[p + 1 < n ? p + 1 : p], w);
        const __m256i bytes = _mm256_packus_epi16(_mm256_packs_epi32(s, s), s);
        store_rgb(out + 3 * p, static_cast<uint32_t>(_mm256_extract_epi32(bytes, 0)));
        if (p + 1 < n) store_rgb(out + 3 * (p + 1), static_cast<uint32_t>(_mm256_extract_epi32(bytes, 4)));
    }
}

}  // namespace

void horizontal_positions_avx2(const uint8_t *in, uint8_t *out, const HorizontalPlan &plan) {
    const int n = static_cast<int>(plan.offsets.size());
    const int *offsets = plan.offsets.data();
    const int32_t *w = plan.weights.data();
    switch (plan.taps) {
        case 1: return positions_avx2<1>(in, out, n, offsets, w);
        case 2: return positions_avx2<2>(in, out, n, offsets, w);
        case 3: return positions_avx2<3>(in, out, n, offsets, w);
        case 4: return positions_avx2<4>(in, out, n, offsets, w);
        default: return positions_avx2<5>(in, out, n, offsets, w);
    }
}

namespace {

// Two taps' weights as int16 pairs (w0, w1) in every 32-bit lane, for madd.
FL_AVX2 inline __m256i broadcast_weight_pair(int32_t w0, int32_t w1) {
    return _mm256_set1_epi32(static_cast<int32_t>((static_cast<uint32_t>(w1) << 16) |
                                                  (static_cast<uint32_t>(w0) & 0xFFFFu)));
}

// 32 bytes of two source rows: adds w0 * a[i] + w1 * b[i] to the sums of bytes i, the sums
// s0..s3 holding bytes [0-3|16-19], [4-7|20-23], [8-11|24-27], [12-15|28-31].
FL_AVX2 inline void madd_rows(const uint8_t *a, const uint8_t *b, __m256i w, __m256i &s0,
                              __m256i &s1, __m256i &s2, __m256i &s3) {
    const __m256i zero = _mm256_setzero_si256();
    const __m256i va = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(a));
    const __m256i vb = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b));
    const __m256i lo = _mm256_unpacklo_epi8(va, vb);  // a0 b0 a1 b1 ... a7 b7 | a16 b16 ...
    const __m256i hi = _mm256_unpackhi_epi8(va, vb);  // a8 b8 ... a15 b15 | a24 b24 ...
    s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(_mm256_unpacklo_epi8(lo, zero), w));
    s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(_mm256_unpackhi_epi8(lo, zero), w));
    s2 = _mm256_add_epi32(s2, _mm256_madd_epi16(_mm256_unpacklo_epi8(hi, zero), w));
    s3 = _mm256_add_epi32(s3, _mm256_madd_epi16(_mm256_unpackhi_epi8(hi, zero), w));
}

}  // namespace

FL_AVX2 void vertical_avx2(const uint8_t *const *rows, const int32_t *weights, int taps, int len,
                           uint8_t *out) {
    // Weights fit int16 (kPrecisionBits 14), so madd multiplies two rows' bytes at once; its
    // int32 sums are the scalar kernel's exactly. An odd last tap pairs with itself at weight 0.
    const __m256i half = _mm256_set1_epi32(1 << (kPrecisionBits - 1));
    int i = 0;
    for (; i + 32 <= len; i += 32) {
        __m256i s0 = half, s1 = half, s2 = half, s3 = half;
        for (int t = 0; t < taps; t += 2) {
            const bool pair = t + 1 < taps;
            madd_rows(rows[t] + i, rows[pair ? t + 1 : t] + i,
                      broadcast_weight_pair(weights[t], pair ? weights[t + 1] : 0), s0, s1, s2, s3);
        }
        // packs/packus work within each 128-bit half, which puts the bytes back in order.
        const __m256i lo = _mm256_packs_epi32(_mm256_srai_epi32(s0, kPrecisionBits),
                                              _mm256_srai_epi32(s1, kPrecisionBits));
        const __m256i hi = _mm256_packs_epi32(_mm256_srai_epi32(s2, kPrecisionBits),
                                              _mm256_srai_epi32(s3, kPrecisionBits));
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(out + i), _mm256_packus_epi16(lo, hi));
    }
    for (; i + 8 <= len; i += 8) {
        __m256i s = half;
        for (int t = 0; t < taps; ++t) {
            const __m128i px = _mm_loadl_epi64(reinterpret_cast<const __m128i *>(rows[t] + i));
            s = _mm256_add_epi32(s, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(px), _mm256_set1_epi32(weights[t])));
        }
        const __m128i words = finish8(s);
        _mm_storel_epi64(reinterpret_cast<__m128i *>(out + i), _mm_packus_epi16(words, words));
    }
    for (; i < len; ++i) {
        int32_t s = 1 << (kPrecisionBits - 1);
        for (int t = 0; t < taps; ++t) s += rows[t][i] * weights[t];
        out[i] = clip8(s);
    }
}

}  // namespace kernels
}  // namespace fl

#else  // no x86-64 GCC/Clang: use_avx2() is false, so these are never called

namespace fl {
namespace kernels {
void horizontal_avx2(const uint8_t *in, uint8_t *out, const ResampleAxis &axis, bool flip) {
    horizontal_scalar(in, out, axis, flip);
}
void horizontal_pairs_avx2(const uint8_t *in, uint8_t *out, const ResampleAxis &axis, const int32_t *,
                           bool flip) {
    horizontal_scalar(in, out, axis, flip);
}
void horizontal_positions_avx2(const uint8_t *, uint8_t *, const HorizontalPlan &) {}
void vertical_avx2(const uint8_t *const *rows, const int32_t *weights, int taps, int len, uint8_t *out) {
    vertical_scalar(rows, weights, taps, len, out);
}
}  // namespace kernels
}  // namespace fl

#endif
