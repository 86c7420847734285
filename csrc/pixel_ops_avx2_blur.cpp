// AVX2 twins of GaussianBlur's box passes (BoxBlur.c): the scalar blur_line / blur_columns'
// integer sums in uint32 lanes (wrapping as theirs), so the bytes are theirs, which are Pillow's.
// The vertical passes run 8 bytes of a row at a time; the horizontal ones 8 rows at a time, on a
// strip transposed into lanes (a running sum along a row is serial, one across rows is not).
#include <algorithm>

#include "pixel_ops_simd.h"

#if FL_PIXEL_AVX2

namespace fl::pixel {
namespace {

// 8 lanes: (acc * ww + (gone + far) * fw + 2^23) >> 24, in uint32 as the scalar kernels wrap.
FL_AVX2 inline __m256i box_out(__m256i acc, __m256i gone, __m256i far, const BoxLine &box) {
    const __m256i bulk = _mm256_add_epi32(
        _mm256_mullo_epi32(acc, _mm256_set1_epi32(static_cast<int>(box.ww))),
        _mm256_mullo_epi32(_mm256_add_epi32(gone, far), _mm256_set1_epi32(static_cast<int>(box.fw))));
    return _mm256_srli_epi32(_mm256_add_epi32(bulk, _mm256_set1_epi32(1 << 23)), 24);
}

FL_AVX2 inline __m256i load8u(const uint8_t *p) {  // 8 bytes as 8 uint32 lanes
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p)));
}


// 8 vectors of 8 int32 transposed: out[k] lane j = in[j] lane k.
FL_AVX2 inline void transpose8(__m256i *v) {
    __m256i t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_epi32(v[i], v[i + 1]);
        t[i + 1] = _mm256_unpackhi_epi32(v[i], v[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int i = 0; i < 4; ++i) {
        v[i] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x20);
        v[i + 4] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x31);
    }
}

// A strip of 8 rows of n pixels into lanes: lanes[3 x + c] lane j = row j's pixel x, channel c.
FL_AVX2 void strip_to_lanes(const uint8_t *strip, size_t row, int n, __m256i *lanes) {
    const __m256i low = _mm256_set1_epi32(255);
    int x = 0;
    for (; x + 8 <= n; x += 8) {
        __m256i v[8];
        for (int j = 0; j < 8; ++j) v[j] = load_rgb8(strip + row * j + 3 * x);
        transpose8(v);
        for (int k = 0; k < 8; ++k) {
            lanes[3 * (x + k)] = _mm256_and_si256(v[k], low);
            lanes[3 * (x + k) + 1] = _mm256_and_si256(_mm256_srli_epi32(v[k], 8), low);
            lanes[3 * (x + k) + 2] = _mm256_srli_epi32(v[k], 16);
        }
    }
    for (; x < n; ++x) {
        for (int c = 0; c < 3; ++c) {
            alignas(32) int32_t column[8];
            for (int j = 0; j < 8; ++j) column[j] = strip[row * j + 3 * x + c];
            lanes[3 * x + c] = _mm256_load_si256(reinterpret_cast<const __m256i *>(column));
        }
    }
}

// The inverse of strip_to_lanes (every lane < 256).
FL_AVX2 void lanes_to_strip(const __m256i *lanes, uint8_t *strip, size_t row, int n) {
    int x = 0;
    for (; x + 8 <= n; x += 8) {
        __m256i v[8];
        for (int k = 0; k < 8; ++k) {
            const __m256i *px = lanes + 3 * (x + k);
            v[k] = _mm256_or_si256(px[0], _mm256_or_si256(_mm256_slli_epi32(px[1], 8),
                                                          _mm256_slli_epi32(px[2], 16)));
        }
        transpose8(v);
        for (int j = 0; j < 8; ++j) store_rgb8(strip + row * j + 3 * x, v[j]);
    }
    for (; x < n; ++x) {
        for (int c = 0; c < 3; ++c) {
            alignas(32) int32_t column[8];
            _mm256_store_si256(reinterpret_cast<__m256i *>(column), lanes[3 * x + c]);
            for (int j = 0; j < 8; ++j) strip[row * j + 3 * x + c] = static_cast<uint8_t>(column[j]);
        }
    }
}

// blur_line's step at x for the three channels' lanes.
FL_AVX2 inline void line_step(const __m256i *in, __m256i *out, __m256i *acc, int x, int sub,
                              int add, int far, const BoxLine &box) {
    for (int c = 0; c < 3; ++c) {
        const __m256i gone = in[3 * sub + c];
        acc[c] = _mm256_sub_epi32(_mm256_add_epi32(acc[c], in[3 * add + c]), gone);
        out[3 * x + c] = box_out(acc[c], gone, in[3 * far + c], box);
    }
}

// blur_line on 8 rows' lanes at once: the same clamped indices, the same sums.
FL_AVX2 void line_lanes(const __m256i *in, __m256i *out, int n, const BoxLine &box) {
    const int r = box.radius, last = n - 1;
    __m256i acc[3] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int j = -r - 1; j <= r - 1; ++j) {
        const int at = std::clamp(j, 0, last);
        for (int c = 0; c < 3; ++c) acc[c] = _mm256_add_epi32(acc[c], in[3 * at + c]);
    }
    const int head = std::min(r + 1, n), tail = std::max(head, n - r - 1);
    for (int x = 0; x < head; ++x)
        line_step(in, out, acc, x, std::max(x - r - 1, 0), std::min(x + r, last),
                  std::min(x + r + 1, last), box);
    for (int x = head; x < tail; ++x) line_step(in, out, acc, x, x - r - 1, x + r, x + r + 1, box);
    for (int x = tail; x < n; ++x)
        line_step(in, out, acc, x, std::max(x - r - 1, 0), std::min(x + r, last),
                  std::min(x + r + 1, last), box);
}

// One pass down the columns, bytes [0, row - row % 8) of each row (the scalar kernel does the
// rest): blur_columns' clamped row indices, its sums 8 bytes at a time. Returns the bytes done.
}  // namespace

FL_AVX2 size_t blur_columns_avx2(const uint8_t *in, uint8_t *out, int height, size_t row,
                            const BoxLine &box, uint32_t *acc_store) {
    const int r = box.radius, last = height - 1;
    const size_t done = row - row % 8;
    auto *acc = reinterpret_cast<__m256i *>(acc_store);
    for (size_t i = 0; i < done; i += 8) {
        __m256i sum = _mm256_setzero_si256();
        for (int j = -r - 1; j <= r - 1; ++j)
            sum = _mm256_add_epi32(sum, load8u(in + row * std::clamp(j, 0, last) + i));
        _mm256_storeu_si256(acc + i / 8, sum);
    }
    const __m128i to_bytes = _mm_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    for (int y = 0; y < height; ++y) {
        const uint8_t *sub = in + row * std::max(y - r - 1, 0);
        const uint8_t *add = in + row * std::min(y + r, last);
        const uint8_t *far = in + row * std::min(y + r + 1, last);
        uint8_t *dst = out + row * y;
        for (size_t i = 0; i < done; i += 8) {
            const __m256i gone = load8u(sub + i);
            __m256i sum = _mm256_loadu_si256(acc + i / 8);
            sum = _mm256_sub_epi32(_mm256_add_epi32(sum, load8u(add + i)), gone);
            _mm256_storeu_si256(acc + i / 8, sum);
            const __m256i v = box_out(sum, gone, load8u(far + i), box);  // each lane < 256
            const __m128i lo = _mm_shuffle_epi8(_mm256_castsi256_si128(v), to_bytes);
            const __m128i hi = _mm_shuffle_epi8(_mm256_extracti128_si256(v, 1), to_bytes);
            _mm_storel_epi64(reinterpret_cast<__m128i *>(dst + i), _mm_unpacklo_epi32(lo, hi));
        }
    }
    return done;
}

// The three box passes along the rows, 8 rows at a time in lanes (a strip transposed into
// `buffer`, 48 n + 8 words, and back). Returns the rows done: rows - rows % 8.
FL_AVX2 int blur_rows_avx2(uint8_t *image, int rows, int n, const BoxLine &box, uint32_t *buffer) {
    const auto start = (reinterpret_cast<uintptr_t>(buffer) + 31) & ~static_cast<uintptr_t>(31);
    auto *a = reinterpret_cast<__m256i *>(start), *b = a + 3 * static_cast<size_t>(n);
    const size_t row = static_cast<size_t>(n) * 3;
    int y = 0;
    for (; y + 8 <= rows; y += 8) {
        uint8_t *strip = image + row * y;
        strip_to_lanes(strip, row, n, a);
        line_lanes(a, b, n, box);
        line_lanes(b, a, n, box);
        line_lanes(a, b, n, box);
        lanes_to_strip(b, strip, row, n);
    }
    return y;
}

}  // namespace fl::pixel

#else  // no AVX2 build: the scalar kernels do everything

namespace fl::pixel {
int blur_rows_avx2(uint8_t *, int, int, const BoxLine &, uint32_t *) { return 0; }
size_t blur_columns_avx2(const uint8_t *, uint8_t *, int, size_t, const BoxLine &, uint32_t *) {
    return 0;
}
}  // namespace fl::pixel

#endif
