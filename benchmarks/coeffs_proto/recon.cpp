// Prototype reconstruction (issue 30): ISLOW IDCT (AVX2), fancy upsampling, colour conversion.
#include "recon.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#define AVX2 __attribute__((target("avx2")))

namespace proto {

namespace {

AVX2 inline __m256i mulc(__m256i a, int c) { return _mm256_mullo_epi32(a, _mm256_set1_epi32(c)); }

// jidctint.c's 1-D ISLOW butterfly on 8 lanes; `fudge` is added to the DC term (pass 2).
AVX2 inline void idct_1d(const __m256i* v, __m256i* o, int fudge) {
  __m256i z2 = v[2], z3 = v[6];
  __m256i z1 = mulc(_mm256_add_epi32(z2, z3), 4433);
  __m256i tmp2 = _mm256_add_epi32(z1, mulc(z3, -15137));
  __m256i tmp3 = _mm256_add_epi32(z1, mulc(z2, 6270));
  z2 = _mm256_add_epi32(v[0], _mm256_set1_epi32(fudge));
  z3 = v[4];
  __m256i tmp0 = _mm256_slli_epi32(_mm256_add_epi32(z2, z3), 13);
  __m256i tmp1 = _mm256_slli_epi32(_mm256_sub_epi32(z2, z3), 13);
  __m256i tmp10 = _mm256_add_epi32(tmp0, tmp3), tmp13 = _mm256_sub_epi32(tmp0, tmp3);
  __m256i tmp11 = _mm256_add_epi32(tmp1, tmp2), tmp12 = _mm256_sub_epi32(tmp1, tmp2);
  __m256i t0 = v[7], t1 = v[5], t2 = v[3], t3 = v[1];
  z1 = _mm256_add_epi32(t0, t3);
  z2 = _mm256_add_epi32(t1, t2);
  z3 = _mm256_add_epi32(t0, t2);
  __m256i z4 = _mm256_add_epi32(t1, t3);
  __m256i z5 = mulc(_mm256_add_epi32(z3, z4), 9633);
  t0 = mulc(t0, 2446);
  t1 = mulc(t1, 16819);
  t2 = mulc(t2, 25172);
  t3 = mulc(t3, 12299);
  z1 = mulc(z1, -7373);
  z2 = mulc(z2, -20995);
  z3 = _mm256_add_epi32(mulc(z3, -16069), z5);
  z4 = _mm256_add_epi32(mulc(z4, -3196), z5);
  t0 = _mm256_add_epi32(t0, _mm256_add_epi32(z1, z3));
  t1 = _mm256_add_epi32(t1, _mm256_add_epi32(z2, z4));
  t2 = _mm256_add_epi32(t2, _mm256_add_epi32(z2, z3));
  t3 = _mm256_add_epi32(t3, _mm256_add_epi32(z1, z4));
  o[0] = _mm256_add_epi32(tmp10, t3);
  o[7] = _mm256_sub_epi32(tmp10, t3);
  o[1] = _mm256_add_epi32(tmp11, t2);
  o[6] = _mm256_sub_epi32(tmp11, t2);
  o[2] = _mm256_add_epi32(tmp12, t1);
  o[5] = _mm256_sub_epi32(tmp12, t1);
  o[3] = _mm256_add_epi32(tmp13, t0);
  o[4] = _mm256_sub_epi32(tmp13, t0);
}

AVX2 inline void transpose8(__m256i* r) {
  __m256i t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 4; i++) {
    r[i] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x31);
  }
}

}  // namespace

AVX2 void idct_islow(const int16_t* coef, const uint16_t* quant, uint8_t* out, int stride) {
  __m256i v[8], o[8];
  for (int i = 0; i < 8; i++) {
    __m256i c = _mm256_cvtepi16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(coef + 8 * i)));
    __m256i q = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(quant + 8 * i)));
    v[i] = _mm256_mullo_epi32(c, q);
  }
  idct_1d(v, o, 0);  // columns: lanes are columns, vectors are rows
  const __m256i r1 = _mm256_set1_epi32(1 << 10);
  for (int i = 0; i < 8; i++) o[i] = _mm256_srai_epi32(_mm256_add_epi32(o[i], r1), 11);
  transpose8(o);
  idct_1d(o, v, 1 << 4);  // rows; DC fudge (1 << (PASS1_BITS + 2)) rounds the final shift
  // range_limit[x & RANGE_MASK] of libjpeg: wrap to [-512, 512), then clamp x + 128 to a byte.
  const __m256i m = _mm256_set1_epi32(1023), b512 = _mm256_set1_epi32(512),
                c384 = _mm256_set1_epi32(384);
  for (int i = 0; i < 8; i++) {
    __m256i x = _mm256_srai_epi32(v[i], 18);
    v[i] = _mm256_sub_epi32(_mm256_and_si256(_mm256_add_epi32(x, b512), m), c384);
  }
  transpose8(v);
  __m256i p01 = _mm256_permute4x64_epi64(_mm256_packs_epi32(v[0], v[1]), 0xD8);
  __m256i p23 = _mm256_permute4x64_epi64(_mm256_packs_epi32(v[2], v[3]), 0xD8);
  __m256i p45 = _mm256_permute4x64_epi64(_mm256_packs_epi32(v[4], v[5]), 0xD8);
  __m256i p67 = _mm256_permute4x64_epi64(_mm256_packs_epi32(v[6], v[7]), 0xD8);
  __m256i a = _mm256_packus_epi16(p01, p23);  // rows 0, 2, 1, 3 as 64-bit lanes
  __m256i b = _mm256_packus_epi16(p45, p67);  // rows 4, 6, 5, 7
  const int order[4] = {0, 2, 1, 3};
  alignas(32) uint64_t la[4], lb[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(la), a);
  _mm256_store_si256(reinterpret_cast<__m256i*>(lb), b);
  for (int i = 0; i < 4; i++) {
    memcpy(out + size_t(order[i]) * stride, &la[i], 8);
    memcpy(out + size_t(4 + order[i]) * stride, &lb[i], 8);
  }
}

namespace {

inline uint8_t clamp255(int v) { return uint8_t(v < 0 ? 0 : (v > 255 ? 255 : v)); }

inline void ycc_pixel(int y, int cb, int cr, uint8_t* o) {
  cb -= 128;
  cr -= 128;
  o[0] = clamp255(y + ((91881 * cr + 32768) >> 16));
  o[1] = clamp255(y + ((-22554 * cb + 32768 - 46802 * cr) >> 16));
  o[2] = clamp255(y + ((116130 * cb + 32768) >> 16));
}

// libjpeg's h2v2 "fancy" (triangle) upsampling of one chroma row pair for output row y,
// columns [x0, x1): vertical 3:1 blend with the nearer neighbour row, then horizontal 3:1.
void fancy_row(const uint8_t* plane, int stride, int cw, int ch, int y, int x0, int x1,
               int16_t* cs, uint8_t* up) {
  int c = y >> 1;
  int nb = (y & 1) ? std::min(c + 1, ch - 1) : std::max(c - 1, 0);
  const uint8_t* a = plane + size_t(c) * stride;
  const uint8_t* b = plane + size_t(nb) * stride;
  int i0 = std::max(0, (x0 >> 1) - 1), i1 = std::min(cw - 1, ((x1 - 1) >> 1) + 1);
  for (int i = i0; i <= i1; i++) cs[i] = int16_t(3 * a[i] + b[i]);
  for (int x = x0; x < x1; x++) {
    int i = x >> 1;
    if (x & 1)
      up[x - x0] = uint8_t((3 * cs[i] + cs[std::min(i + 1, cw - 1)] + 7) >> 4);
    else
      up[x - x0] = uint8_t((3 * cs[i] + cs[std::max(i - 1, 0)] + 8) >> 4);
  }
}

}  // namespace

void color_rect(const Geometry& g, const uint8_t* const* planes, int x0, int y0, int w, int h,
                uint8_t* out) {
  if (g.ncomp == 1) {
    for (int y = 0; y < h; y++)
      memcpy(out + size_t(y) * w, planes[0] + size_t(y0 + y) * g.stride[0] + x0, size_t(w));
    return;
  }
  static thread_local int16_t cs[2][8192];
  static thread_local uint8_t up[2][16384];
  for (int y = 0; y < h; y++) {
    const uint8_t* yr = planes[0] + size_t(y0 + y) * g.stride[0] + x0;
    const uint8_t *cb, *cr;
    if (g.sub) {
      fancy_row(planes[1], g.stride[1], g.cw, g.ch, y0 + y, x0, x0 + w, cs[0], up[0]);
      fancy_row(planes[2], g.stride[2], g.cw, g.ch, y0 + y, x0, x0 + w, cs[1], up[1]);
      cb = up[0];
      cr = up[1];
    } else {
      cb = planes[1] + size_t(y0 + y) * g.stride[1] + x0;
      cr = planes[2] + size_t(y0 + y) * g.stride[2] + x0;
    }
    uint8_t* o = out + size_t(y) * w * 3;
    for (int x = 0; x < w; x++) ycc_pixel(yr[x], cb[x], cr[x], o + 3 * x);
  }
}

}  // namespace proto
