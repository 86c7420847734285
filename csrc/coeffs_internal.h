// Shared inside the coeffs codec: geometry set-up, segment walks, reconstruction kernels.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "coeffs.h"
#include "jpeg_errors.h"

namespace fl::coeffs {

extern const uint8_t kMagic[6];
extern const int kZigzag[64];  // zigzag index -> natural index
constexpr size_t kFixedHeader = 24;
constexpr size_t kComponentHeader = 2 + 128;
// The largest image a record may describe: JPEG's 65535 per side, and the JPEG path's
// decompression-bomb limit in all.
using jpeg_errors::kMaxPixels;

inline uint32_t rd32(const uint8_t *p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}
inline uint16_t rd16(const uint8_t *p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}

// Fills geo's derived fields from width, height, ncomp, comps[].h/v and seg_mcus; returns "" or
// why the sampling factors are not ones the codec reconstructs.
std::string derive_geometry(Geometry &geo);

// Quantized coefficients of a whole image, per component on its block grid (bw x bh blocks of
// 64 int16 in natural order), as jpeg_read_coefficients gives them.
struct Coefficients {
    Geometry geo;
    std::vector<int16_t> blocks[kMaxComponents];
};

// Appends the record of c to out.
void write_record(const Coefficients &c, std::vector<uint8_t> &out);

// Decodes segment `seg` of MCU row `row` into blocks (geo.blocks_per_mcu * MCUs in the segment
// blocks of 64, in the segment's block order); false when its bytes are damaged.
bool decode_segment(const View &view, int row, int seg, int16_t *blocks);

// A component as one decode reconstructs it. At full size (denom 1) its header geometry; at a
// DCT scale what libjpeg-turbo's jpeg_calc_output_dimensions and jinit_upsampler choose.
struct Sampling {
    int bs = 8;          // samples per block side: 8 / denom, or up to 8 where libjpeg scales a
                         // subsampled component up in its IDCT rather than upsampling it
    int rh = 1, rv = 1;  // upsampling ratio to the (scaled) output
    int dw = 0, dh = 0;  // samples that are real
    bool fancy = true;   // triangle filters allowed (libjpeg: only when the smallest block is > 1)
};

// The image a decode at 1/denom reconstructs: libjpeg's output_width x output_height.
struct Scaled {
    int width = 0, height = 0;
    Sampling comps[kMaxComponents];
};
Scaled scale_geometry(const Geometry &g, int denom);

// An IDCT of one 8x8 block, coefficients (natural order) x quant, to bs x bs samples at out,
// rows stride bytes apart.
using Idct = void (*)(const int16_t *coef, const uint16_t *quant, uint8_t *out, ptrdiff_t stride);
// libjpeg-turbo's reduced IDCTs as x86-64 runs them (coeffs_scaled.cpp): 4x4 and 2x2 as its
// SSE2 jsimd_idct_4x4 / jsimd_idct_2x2 compute them, 1x1 as jidctred.c's C.
void idct4x4(const int16_t *coef, const uint16_t *quant, uint8_t *out, ptrdiff_t stride);
void idct2x2(const int16_t *coef, const uint16_t *quant, uint8_t *out, ptrdiff_t stride);
void idct1x1(const int16_t *coef, const uint16_t *quant, uint8_t *out, ptrdiff_t stride);
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// The AVX2 set's reduced IDCTs (coeffs_avx2_scaled.cpp): idct4x4's and idct2x2's bits.
void idct4x4_avx2(const int16_t *coef, const uint16_t *quant, uint8_t *out, ptrdiff_t stride);
void idct2x2_avx2(const int16_t *coef, const uint16_t *quant, uint8_t *out, ptrdiff_t stride);
#endif

// Reconstruction kernels, AVX2 or scalar (coeffs_recon.cpp, coeffs_avx2.cpp); the AVX2 ones
// give the same bits.
struct Kernels {
    // One 8x8 block, coefficients (natural order) x quant: the ISLOW IDCT as libjpeg-turbo's
    // SIMD computes it, 8 rows of 8 samples at out, stride bytes apart.
    void (*idct)(const int16_t *coef, const uint16_t *quant, uint8_t *out, ptrdiff_t stride);
    // n pixels of YCbCr samples to interleaved RGB (libjpeg's ycc_rgb_convert); writes out[0, 3n).
    void (*ycc_rgb)(const uint8_t *y, const uint8_t *cb, const uint8_t *cr, uint8_t *out, int n);
    // libjpeg's h2v2 fancy upsampling of one output row: a = the nearer chroma row, b = its
    // other neighbour (itself at the edges), samples [0, dw) valid at a[s - col0]; writes the
    // output columns [x0, x1) to out[0, x1 - x0). cs: scratch of dw + 64 int16.
    void (*h2v2)(const uint8_t *a, const uint8_t *b, int col0, int dw, int x0, int x1, uint8_t *out,
                 int16_t *cs);
    // libjpeg's h2v1 fancy upsampling of one row (a as for h2v2); pad: scratch of dw + 64 bytes.
    void (*h2v1)(const uint8_t *a, int col0, int dw, int x0, int x1, uint8_t *out, uint8_t *pad);
    // libjpeg's h1v2 fancy upsampling: out[x] = (3 a[x] + b[x] + bias) >> 2 for x in [0, n).
    void (*h1v2)(const uint8_t *a, const uint8_t *b, int n, int bias, uint8_t *out);
    // The reduced IDCTs to 4x4 and 2x2 samples (libjpeg-turbo's SSE2 bits).
    Idct idct4, idct2;
};
const Kernels &scalar_kernels();
const Kernels *avx2_kernels();  // nullptr when not built with AVX2 support
const Kernels &kernels();       // the ones in use
// The IDCT giving bs x bs samples (8, 4, 2 or 1): the kernels' full one, or a reduced one.
Idct idct_for(const Kernels &k, int bs);

}  // namespace fl::coeffs
