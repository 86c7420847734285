// The coeffs record codec (issue 30): a JPEG's quantized DCT coefficients in a layout built for
// fast, random-access decoding, and a decoder bit-exact with libjpeg-turbo's default decode.
//
// Record layout, version 1 (all integers little-endian):
//   0  "FLCOEF" magic, u8 version (1), u8 layer (1 = nibbles)
//   8  u32 width, u32 height (pixels)
//   16 u8 components (1, 3 or 4), u8 colour (0 grey, 1 YCbCr, 2 RGB, 3 CMYK, 4 YCCK),
//      u8 nibble_from (1..64: the first zigzag position stored as a nibble), u8 seg_mcus (MCU
//      columns per segment, >= 1)
//   20 u8 EXIF orientation of the source JPEG (0: none found, else 1-8), 3 bytes reserved (0)
//   24 per component: u8 h, u8 v (sampling factors, 1-4), u16 quant[64] (natural order)
//   .. u32 segments (= MCU rows x segments per row), u32 offsets[segments + 1] into the payload
//   .. payload, then 8 bytes of padding (the decoder reads 8 bytes at a time)
// A segment is one MCU row x seg_mcus MCUs: u32 mask bytes, u32 nibble bytes, then the mask,
// nibble and byte streams; its blocks go MCU by MCU, component, row, column. DC is predicted
// within a segment only, so any segment decodes alone. Per block the mask stream holds n (bits
// 0-6: last nonzero zigzag index + 1; bit 7: "wide") and ceil(n / 8) bytes of a nonzero mask;
// the DC difference and the values at positions < nibble_from, and every value of a wide block,
// are int8 in the byte stream (-128 escapes to an int16 after it); the rest are signed nibbles
// (-8 escapes to the byte stream).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "jpeg.h"
#include "resize.h"

namespace fl::coeffs {

constexpr int kVersion = 1;
constexpr size_t kPadding = 8;
constexpr int kDefaultSegMcus = 4;
constexpr int kDefaultNibbleFrom = 10;

enum class Color : uint8_t { kGrey = 0, kYCbCr = 1, kRgb = 2, kCmyk = 3, kYcck = 4 };
constexpr int kMaxComponents = 4;

struct Component {
    int h = 1, v = 1;    // sampling factors
    int rh = 1, rv = 1;  // upsampling ratio to full resolution (hmax / h, vmax / v): 1-4
    int bw = 0, bh = 0;  // block grid (whole MCUs)
    int dw = 0, dh = 0;  // samples that are real (libjpeg's downsampled_width / height)
    uint16_t quant[64] = {};
};

// What a record's header says: enough to decode any of its segments.
struct Geometry {
    int width = 0, height = 0, ncomp = 0;
    Color color = Color::kGrey;
    int hmax = 1, vmax = 1, mcu_cols = 0, mcu_rows = 0;
    int seg_mcus = kDefaultSegMcus, segs_per_row = 0, nibble_from = kDefaultNibbleFrom;
    int blocks_per_mcu = 0;
    int orientation = 0;  // the source's EXIF orientation (0: none); the pixels are as stored
    Component comps[kMaxComponents];
};

// True when the bytes start with the record magic (then it is a coeffs record or damaged one).
bool looks_like_record(const uint8_t *data, size_t size);

// Encodes a JPEG's coefficients (jpeg_read_coefficients) as a record; returns "" or why not
// (libjpeg's message, or the kind the codec does not store: progressive files libjpeg smooths).
std::string encode_jpeg(const uint8_t *data, size_t size, std::vector<uint8_t> &out,
                        int seg_mcus = kDefaultSegMcus, int nibble_from = kDefaultNibbleFrom);

// The JPEG of a record's coefficients (jpeg_write_coefficients: baseline, optimised Huffman
// tables, the record's quant tables and sampling): decodes to the record's pixels. Returns ""
// or why not (a damaged record, libjpeg's message).
std::string record_to_jpeg(const uint8_t *data, size_t size, std::vector<uint8_t> &out);

// Parsed and checked record: every length and offset is within the bytes.
struct View {
    Geometry geo;
    const uint8_t *offsets = nullptr;  // u32 per segment + 1
    const uint8_t *payload = nullptr;
    size_t payload_size = 0;
};

// Parses the header and offset table; returns "" or what is wrong with the bytes.
std::string open_record(const uint8_t *data, size_t size, View &view);

// Decodes crop of the record (height == width == 0: whole image), resized to the slot (Pillow
// BILINEAR) and mirrored if asked, as decode_jpeg_into does a JPEG: at the DCT scale it takes
// (options.dct_scaling, dct_denominator), with libjpeg-turbo's reduced IDCTs and upsampling, so
// both give the same pixels. Returns "" or the reason.
std::string decode_into(const uint8_t *data, size_t size, const CropBox &crop, const OutputSlot &out,
                        RowResizer &resizer, const DecodeOptions &options);

// Decodes region's window of scaled pixels (views.h plans its denom, x0, y0, width and height
// from the record's geometry and sizes its pixels) unresampled into region.pixels, with the
// reconstruction decode_into uses: the segments the window touches only. Returns "" or why not.
std::string decode_region(const View &view, ScaledRegion &region, RowResizer &resizer);

// Test seam: the whole record at 1/denom (1, 2, 4, 8) as libjpeg-turbo's scaled decode outputs
// it (out: exactly its ceil(H / denom) x ceil(W / denom) pixels), not resampled.
std::string decode_scaled(const uint8_t *data, size_t size, int denom, const OutputSlot &out, RowResizer &resizer);

// Reconstruction kernels in use: true = AVX2 (chosen at first use when the CPU has it).
bool simd_enabled();
// Test seam: use the AVX2 kernels (when the CPU has them) or the scalar ones; returns the old.
bool set_simd(bool enabled);

// "" for a view as stored (orientation 1); records are decoded as stored, so a turned view of
// one is refused rather than given unturned.
inline std::string refuse_orientation(int orientation) {
    return orientation == 1 ? std::string() : "coeffs record: EXIF orientation is not supported for coeffs records";
}

}  // namespace fl::coeffs
