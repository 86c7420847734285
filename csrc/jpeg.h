// JPEG header reading and fused crop + DCT-scaled decode + resize + flip into an output slot.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "resize.h"

namespace fl {

struct JpegHeader {
    int width = 0;
    int height = 0;
    int components = 0;
    std::string color_space;  // gray | ycbcr | rgb | cmyk | ycck | unknown
    std::string subsampling;  // 4:4:4 | 4:2:2 | 4:2:0 | 4:4:0 | 4:1:1 | gray | other
    bool progressive = false;
};

// Box in source pixels; height == 0 && width == 0 means the whole image.
struct CropBox {
    int top = 0;
    int left = 0;
    int height = 0;
    int width = 0;
};

// Where the decoded pixels go: height x width RGB pixels, rows row_stride bytes apart.
// orientation (EXIF, 1-8): the slot shows the image as PIL.ImageOps.exif_transpose turns it,
// and the crop is a box of that turned image; flip then mirrors the turned result
// (orientation.h maps the crop to the stored pixels and writes the turned pixels).
struct OutputSlot {
    uint8_t *data = nullptr;
    int height = 0;
    int width = 0;
    std::ptrdiff_t row_stride = 0;
    bool flip = false;
    int orientation = 1;
};

struct DecodeOptions {
    bool dct_scaling = true;  // allow libjpeg's 1/2, 1/4, 1/8 scaled IDCT when the crop allows
};

// Per-thread buffers reused across decodes, so the hot path does not allocate per sample.
struct DecodeScratch {
    std::vector<uint8_t> scanlines;   // CMYK rows from libjpeg (RGB rows go straight to resizer)
    RowResizer resizer;               // both resampling passes and the rows they still need
    std::vector<uint8_t> turned;      // a transposing orientation's output before it is turned
};

// Reads the header; returns "" on success, else libjpeg's message.
std::string read_jpeg_header(const uint8_t *data, size_t size, JpegHeader &header);

// True when the bytes start as Pillow wants a JPEG to (SOI, then a marker's 0xFF); others go to
// Pillow, which reads or refuses them.
bool looks_like_jpeg(const uint8_t *data, size_t size);

// The DCT scale denominator (1, 2, 4 or 8) decode_jpeg_into uses for this non-empty stored crop
// and output slot (its orientation considered); the restart-tile splice widens its context by it,
// and coeffs records (coeffs.h) scale their reconstruction by it, so both paths give one image.
int dct_denominator(const CropBox &crop, const OutputSlot &out, const DecodeOptions &options);

// One axis of a stored crop in DCT-scaled pixels (libjpeg's output at 1/denom, scaled_size of
// them): the source interval [lo, hi) the resizer maps onto the output, widened to the whole
// pixels [first, end) that are decoded. denom 1 gives the crop itself.
struct AxisWindow {
    float lo, hi;
    int first, end;
};
AxisWindow scaled_window(int start, int length, int denom, int scaled_size);

// Decodes crop of the JPEG (a box of the image as out.orientation shows it), resized to the slot
// (Pillow BILINEAR), turned by the orientation, then mirrored if asked.
// Returns "" on success, else the reason: libjpeg's message for bad data, or what Pillow would
// refuse; of libjpeg's warnings only "premature end of JPEG file" (truncation) counts.
std::string decode_jpeg_into(const uint8_t *data, size_t size, const CropBox &crop,
                             const OutputSlot &out, DecodeScratch &scratch,
                             const DecodeOptions &options);

}  // namespace fl
