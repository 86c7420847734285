// AVX2 reconstruction kernels of the coeffs codec (GCC/Clang target attributes, chosen at run
// time): the same bits as the scalar ones in coeffs_recon.cpp, and as libjpeg-turbo's SIMD.
#include "coeffs_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#define AVX2 __attribute__((target("avx2")))

namespace fl::coeffs {

namespace {

// 8x8 int16 transpose of rows r[0..7].
AVX2 inline void transpose16(__m128i* r) {
  __m128i a0 = _mm_unpacklo_epi16(r[0], r[1]), a1 = _mm_unpackhi_epi16(r[0], r[1]);
  __m128i a2 = _mm_unpacklo_epi16(r[2], r[3]), a3 = _mm_unpackhi_epi16(r[2], r[3]);
  __m128i a4 = _mm_unpacklo_epi16(r[4], r[5]), a5 = _mm_unpackhi_epi16(r[4], r[5]);
  __m128i a6 = _mm_unpacklo_epi16(r[6], r[7]), a7 = _mm_unpackhi_epi16(r[6], r[7]);
  __m128i b0 = _mm_unpacklo_epi32(a0, a2), b1 = _mm_unpackhi_epi32(a0, a2);
  __m128i b2 = _mm_unpacklo_epi32(a1, a3), b3 = _mm_unpackhi_epi32(a1, a3);
  __m128i b4 = _mm_unpacklo_epi32(a4, a6), b5 = _mm_unpackhi_epi32(a4, a6);
  __m128i b6 = _mm_unpacklo_epi32(a5, a7), b7 = _mm_unpackhi_epi32(a5, a7);
  r[0] = _mm_unpacklo_epi64(b0, b4);
  r[1] = _mm_unpackhi_epi64(b0, b4);
  r[2] = _mm_unpacklo_epi64(b1, b5);
  r[3] = _mm_unpackhi_epi64(b1, b5);
  r[4] = _mm_unpacklo_epi64(b2, b6);
  r[5] = _mm_unpackhi_epi64(b2, b6);
  r[6] = _mm_unpacklo_epi64(b3, b7);
  r[7] = _mm_unpackhi_epi64(b3, b7);
}

// (a, b) pairs of 8 int16 lanes as 16 interleaved int16 (lanes 0-3 low, 4-7 high), for madd.
AVX2 inline __m256i pairs(__m128i a, __m128i b) {
  return _mm256_set_m128i(_mm_unpackhi_epi16(a, b), _mm_unpacklo_epi16(a, b));
}
AVX2 inline __m256i madd(__m256i p, int ca, int cb) {
  return _mm256_madd_epi16(p, _mm256_set1_epi32(int((uint32_t(uint16_t(cb)) << 16) | uint16_t(ca))));
}

// jidctint.c's 1-D ISLOW on 16-bit inputs (8 lanes) as libjpeg-turbo's AVX2 kernel computes it:
// in0 +- in4, z3 = in7 + in3 and z4 = in5 + in1 summed in 16 bits, every product a madd pair.
// Outputs 8 int32 lanes before the descale.
AVX2 inline void idct_1d16(const __m128i* v, __m256i* o, int fudge) {
  __m256i p26 = pairs(v[2], v[6]), p71 = pairs(v[7], v[1]), p53 = pairs(v[5], v[3]);
  __m256i pz = pairs(_mm_add_epi16(v[7], v[3]), _mm_add_epi16(v[5], v[1]));  // (z3, z4)
  __m256i f = _mm256_set1_epi32(fudge << 13);
  __m256i tmp0 = _mm256_add_epi32(_mm256_slli_epi32(_mm256_cvtepi16_epi32(_mm_add_epi16(v[0], v[4])), 13), f);
  __m256i tmp1 = _mm256_add_epi32(_mm256_slli_epi32(_mm256_cvtepi16_epi32(_mm_sub_epi16(v[0], v[4])), 13), f);
  __m256i tmp2 = madd(p26, 4433, -10704);
  __m256i tmp3 = madd(p26, 10703, 4433);
  __m256i tmp10 = _mm256_add_epi32(tmp0, tmp3), tmp13 = _mm256_sub_epi32(tmp0, tmp3);
  __m256i tmp11 = _mm256_add_epi32(tmp1, tmp2), tmp12 = _mm256_sub_epi32(tmp1, tmp2);
  __m256i z3 = madd(pz, -6436, 9633), z4 = madd(pz, 9633, 6437);
  __m256i t0 = _mm256_add_epi32(madd(p71, -4927, -7373), z3);
  __m256i t1 = _mm256_add_epi32(madd(p53, -4176, -20995), z4);
  __m256i t2 = _mm256_add_epi32(madd(p53, -20995, 4177), z3);
  __m256i t3 = _mm256_add_epi32(madd(p71, -7373, 4926), z4);
  o[0] = _mm256_add_epi32(tmp10, t3);
  o[7] = _mm256_sub_epi32(tmp10, t3);
  o[1] = _mm256_add_epi32(tmp11, t2);
  o[6] = _mm256_sub_epi32(tmp11, t2);
  o[2] = _mm256_add_epi32(tmp12, t1);
  o[5] = _mm256_sub_epi32(tmp12, t1);
  o[3] = _mm256_add_epi32(tmp13, t0);
  o[4] = _mm256_sub_epi32(tmp13, t0);
}

// 8 int32 lanes (as idct_1d16 orders them) to 8 int16 with signed saturation.
AVX2 inline __m128i to16(__m256i x) {
  return _mm_packs_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
}

AVX2 void idct_avx2(const int16_t* coef, const uint16_t* quant, uint8_t* out, ptrdiff_t stride) {
  __m128i v[8];
  __m256i o[8];
  #pragma GCC unroll 8
  for (int i = 0; i < 8; i++)
    v[i] = _mm_mullo_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(coef + 8 * i)),
                           _mm_loadu_si128(reinterpret_cast<const __m128i*>(quant + 8 * i)));
  __m128i ac = _mm_loadu_si128(reinterpret_cast<const __m128i*>(coef + 8));
  for (int i = 2; i < 8; i++) ac = _mm_or_si128(ac, _mm_loadu_si128(reinterpret_cast<const __m128i*>(coef + 8 * i)));
  if (_mm_testz_si128(ac, ac)) {  // libjpeg-turbo's shortcut for DCs alone: DC << PASS1_BITS, 16 bits
    const __m128i d = _mm_slli_epi16(v[0], 2);
    for (int i = 0; i < 8; i++) v[i] = d;
  } else {
    idct_1d16(v, o, 0);  // columns: lanes are columns, vectors are rows
    const __m256i r1 = _mm256_set1_epi32(1 << 10);
    #pragma GCC unroll 8
    for (int i = 0; i < 8; i++) v[i] = to16(_mm256_srai_epi32(_mm256_add_epi32(o[i], r1), 11));
  }
  transpose16(v);
  idct_1d16(v, o, 1 << 4);  // rows; DC fudge (1 << (PASS1_BITS + 2)) rounds the final shift
  #pragma GCC unroll 8
  for (int i = 0; i < 8; i++) v[i] = to16(_mm256_srai_epi32(o[i], 18));
  transpose16(v);
  // libjpeg-turbo's SIMD range limit: saturate to int8, then + CENTERJSAMPLE.
  const __m128i c80 = _mm_set1_epi8(char(0x80));
  #pragma GCC unroll 8
  for (int i = 0; i < 8; i += 2) {
    __m128i b = _mm_xor_si128(_mm_packs_epi16(v[i], v[i + 1]), c80);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + size_t(i) * stride), b);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + size_t(i + 1) * stride), _mm_srli_si128(b, 8));
  }
}


// pshufb masks that interleave 16 R, G, B bytes into 48 RGB bytes.
struct RgbMasks {
  alignas(16) uint8_t m[3][3][16];
  RgbMasks() {
    for (int q = 0; q < 3; q++)
      for (int c = 0; c < 3; c++)
        for (int t = 0; t < 16; t++) {
          int j = 16 * q + t;
          m[q][c][t] = uint8_t(j % 3 == c ? j / 3 : 0x80);
        }
  }
};
const RgbMasks kMasks;

// libjpeg's ycc_rgb_convert in 16-bit lanes. With jdcolor.c's FIX() constants split so each
// product fits madd (the integer results are identical):
//   R = y + cr + ((26345 cr + 32768) >> 16)                  (91881 = 65536 + 26345)
//   G = y - cr + ((-22554 cb + 18734 cr + 32768) >> 16)      (-46802 = 18734 - 65536)
//   B = y + 2 cb + ((-14942 cb + 32768) >> 16)               (116130 = 131072 - 14942)
// with cb, cr already minus 128. madd of (v, 2) pairs by (c, 16384) adds the 32768.
AVX2 inline __m256i madd_term(__m256i a, __m256i b, int ca, int cb) {
  const __m256i k = _mm256_set1_epi32(int((uint32_t(uint16_t(cb)) << 16) | uint16_t(ca)));
  __m256i lo = _mm256_srai_epi32(_mm256_madd_epi16(_mm256_unpacklo_epi16(a, b), k), 16);
  __m256i hi = _mm256_srai_epi32(_mm256_madd_epi16(_mm256_unpackhi_epi16(a, b), k), 16);
  return _mm256_packs_epi32(lo, hi);  // back in lane order
}

AVX2 inline __m256i madd_term_g(__m256i cb, __m256i cr) {
  const __m256i k = _mm256_set1_epi32(int((uint32_t(uint16_t(18734)) << 16) | uint16_t(-22554)));
  const __m256i half = _mm256_set1_epi32(32768);
  __m256i lo = _mm256_madd_epi16(_mm256_unpacklo_epi16(cb, cr), k);
  __m256i hi = _mm256_madd_epi16(_mm256_unpackhi_epi16(cb, cr), k);
  lo = _mm256_srai_epi32(_mm256_add_epi32(lo, half), 16);
  hi = _mm256_srai_epi32(_mm256_add_epi32(hi, half), 16);
  return _mm256_packs_epi32(lo, hi);
}

AVX2 inline __m128i to_u8(__m256i v) {
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi16(v, v), 0xD8));
}

AVX2 inline __m256i ld(const uint8_t* p) {
  return _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// 16 pixels from uint8 Y, Cb, Cr to 48 interleaved RGB bytes.
AVX2 inline void ycc16(const uint8_t* y, const uint8_t* cb, const uint8_t* cr, uint8_t* out) {
  const __m256i c128 = _mm256_set1_epi16(128), two = _mm256_set1_epi16(2);
  __m256i vy = ld(y), vb = _mm256_sub_epi16(ld(cb), c128), vr = _mm256_sub_epi16(ld(cr), c128);
  __m256i r = _mm256_add_epi16(_mm256_add_epi16(vy, vr), madd_term(vr, two, 26345, 16384));
  __m256i gsum = madd_term_g(vb, vr);
  __m256i g = _mm256_add_epi16(_mm256_sub_epi16(vy, vr), gsum);
  __m256i b = _mm256_add_epi16(_mm256_add_epi16(vy, _mm256_add_epi16(vb, vb)),
                               madd_term(vb, two, -14942, 16384));
  __m128i R = to_u8(r), G = to_u8(g), B = to_u8(b);
  #pragma GCC unroll 8
  for (int q = 0; q < 3; q++) {
    const __m128i* m = reinterpret_cast<const __m128i*>(kMasks.m[q]);
    __m128i o = _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(R, m[0]), _mm_shuffle_epi8(G, m[1])),
                             _mm_shuffle_epi8(B, m[2]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16 * q), o);
  }
}


// n pixels; whole groups of 16 in place, the rest through a padded scratch.
AVX2 void ycc_rgb_avx2(const uint8_t* y, const uint8_t* cb, const uint8_t* cr, uint8_t* out, int n) {
  int i = 0;
  for (; i + 16 <= n; i += 16) ycc16(y + i, cb + i, cr + i, out + 3 * i);
  if (i == n) return;
  alignas(16) uint8_t t[3][16] = {};
  uint8_t o[48];
  const size_t rest = size_t(n - i);
  std::memcpy(t[0], y + i, rest);
  std::memcpy(t[1], cb + i, rest);
  std::memcpy(t[2], cr + i, rest);
  ycc16(t[0], t[1], t[2], o);
  std::memcpy(out + 3 * i, o, 3 * rest);
}

// libjpeg's h2v2 fancy upsampling: column sums 3a + b for samples ilo - 1 .. ihi + 1 (edges
// replicated), then the 3:1 horizontal blend with +8 / +7 rounding, 16 chroma samples a step.
AVX2 void h2v2_avx2(const uint8_t* a, const uint8_t* b, int col0, int dw, int x0, int x1, uint8_t* out,
                    int16_t* cs) {
  static thread_local std::vector<uint8_t> up;
  const int ilo = x0 >> 1, ihi = (x1 - 1) >> 1;
  const int i0 = std::max(0, ilo - 1), i1 = std::min(dw - 1, ihi + 1);
  const __m256i three = _mm256_set1_epi16(3);
  // cs[j - ilo + 1] holds sample j's column sum; the loads may read past i1 (the plane's slack).
  for (int j = i0; j <= i1; j += 16) {
    __m256i va = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + (j - col0))));
    __m256i vb = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + (j - col0))));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(cs + (j - ilo + 1)),
                        _mm256_add_epi16(_mm256_mullo_epi16(va, three), vb));
  }
  if (i0 == ilo) cs[0] = cs[1];
  if (i1 == ihi) cs[ihi - ilo + 2] = cs[ihi - ilo + 1];
  const size_t need = size_t(2 * (ihi - ilo + 1) + 64);
  if (up.size() < need) up.resize(need);
  const __m256i r8 = _mm256_set1_epi16(8), r7 = _mm256_set1_epi16(7);
  for (int i = ilo; i <= ihi; i += 16) {
    const int16_t* c = cs + (i - ilo);
    __m256i m = _mm256_mullo_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + 1)), three);
    __m256i l = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c));
    __m256i r = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + 2));
    __m256i e = _mm256_srli_epi16(_mm256_add_epi16(_mm256_add_epi16(m, l), r8), 4);
    __m256i o = _mm256_srli_epi16(_mm256_add_epi16(_mm256_add_epi16(m, r), r7), 4);
    __m256i lo = _mm256_unpacklo_epi16(e, o), hi = _mm256_unpackhi_epi16(e, o);
    __m256i p0 = _mm256_permute2x128_si256(lo, hi, 0x20), p1 = _mm256_permute2x128_si256(lo, hi, 0x31);
    __m256i bytes = _mm256_permute4x64_epi64(_mm256_packus_epi16(p0, p1), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(up.data() + 2 * (i - ilo)), bytes);
  }
  std::memcpy(out, up.data() + (x0 - 2 * ilo), size_t(x1 - x0));
}

// 16 chroma samples at m (neighbours at m - 1, m + 1) to 32 upsampled bytes at out:
// even (3m + l + 1) >> 2, odd (3m + r + 2) >> 2, as libjpeg's h2v1 fancy upsampling.
AVX2 inline void h2v1_16(const uint8_t* m, uint8_t* out) {
  const __m256i three = _mm256_set1_epi16(3), one = _mm256_set1_epi16(1), two = _mm256_set1_epi16(2);
  __m256i c = _mm256_mullo_epi16(ld(m), three);
  __m256i e = _mm256_srli_epi16(_mm256_add_epi16(_mm256_add_epi16(c, ld(m - 1)), one), 2);
  __m256i o = _mm256_srli_epi16(_mm256_add_epi16(_mm256_add_epi16(c, ld(m + 1)), two), 2);
  __m256i lo = _mm256_unpacklo_epi16(e, o), hi = _mm256_unpackhi_epi16(e, o);
  __m256i p0 = _mm256_permute2x128_si256(lo, hi, 0x20), p1 = _mm256_permute2x128_si256(lo, hi, 0x31);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                      _mm256_permute4x64_epi64(_mm256_packus_epi16(p0, p1), 0xD8));
}

// The needed samples ilo - 1 .. ihi + 1 copied into pad with the edges replicated, then 16
// samples a step; the 32-byte groups go through `up` so out gets exactly x1 - x0 bytes.
AVX2 void h2v1_avx2(const uint8_t* a, int col0, int dw, int x0, int x1, uint8_t* out, uint8_t* pad) {
  static thread_local std::vector<uint8_t> up;
  const int ilo = x0 >> 1, ihi = (x1 - 1) >> 1;
  const int i0 = std::max(0, ilo - 1), i1 = std::min(dw - 1, ihi + 1);
  uint8_t* p = pad + 1 - ilo;  // p[j] for j in [ilo - 1, ihi + 1]
  std::memcpy(p + i0, a + (i0 - col0), size_t(i1 - i0 + 1));
  if (i0 == ilo) p[ilo - 1] = p[ilo];
  if (i1 == ihi) p[ihi + 1] = p[ihi];
  const size_t need = size_t(2 * (ihi - ilo + 1) + 64);
  if (up.size() < need) up.resize(need);
  for (int i = ilo; i <= ihi; i += 16) h2v1_16(p + i, up.data() + 2 * (i - ilo));
  std::memcpy(out, up.data() + (x0 - 2 * ilo), size_t(x1 - x0));
}

AVX2 void h1v2_avx2(const uint8_t* a, const uint8_t* b, int n, int bias, uint8_t* out) {
  const __m256i three = _mm256_set1_epi16(3), vb = _mm256_set1_epi16(int16_t(bias));
  int x = 0;
  for (; x + 16 <= n; x += 16) {
    __m256i v = _mm256_srli_epi16(_mm256_add_epi16(_mm256_add_epi16(_mm256_mullo_epi16(ld(a + x), three), ld(b + x)), vb), 2);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + x), to_u8(v));
  }
  for (; x < n; ++x) out[x] = uint8_t((3 * a[x] + b[x] + bias) >> 2);
}

const Kernels kAvx2{idct_avx2, ycc_rgb_avx2, h2v2_avx2, h2v1_avx2, h1v2_avx2, idct4x4_avx2, idct2x2_avx2};

}  // namespace

const Kernels* avx2_kernels() { return &kAvx2; }

}  // namespace fl::coeffs

#else

namespace fl::coeffs {
const Kernels* avx2_kernels() { return nullptr; }
}  // namespace fl::coeffs

#endif
