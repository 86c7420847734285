// Prototype reconstruction (issue 30): ISLOW IDCT, fancy h2v2 upsampling, YCbCr->RGB,
// written to match libjpeg-turbo's default decode bit for bit (AVX2, GCC target attributes).
#pragma once
#include <cstddef>
#include <cstdint>

namespace proto {

// One 8x8 block: coefficients (natural order) x quant -> 8 rows of 8 samples at `out`.
void idct_islow(const int16_t* coef, const uint16_t* quant, uint8_t* out, int stride);

struct Geometry {
  int ncomp = 3;
  bool sub = true;   // 4:2:0 (h2v2) chroma, else full-resolution chroma
  int cw = 0, ch = 0;  // chroma downsampled width/height (libjpeg's downsampled_*)
  int stride[4] = {};
};

// Interleaved RGB (grey: 1 byte) of [x0, x0+w) x [y0, y0+h) from the component planes.
void color_rect(const Geometry& g, const uint8_t* const* planes, int x0, int y0, int w, int h,
                uint8_t* out);

}  // namespace proto
