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
    uint64_t decodes = 0;             // records this thread's batches decoded (BatchDecoder counts)
};

// The crop, a box of the image as its orientation shows it (the whole image when it is 0x0), as a
// box of the stored pixels; false, with why, when it does not fit in the image.
bool stored_crop_box(const CropBox &crop, int stored_height, int stored_width, int orientation, CropBox &stored,
                     char *why, size_t why_size);

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

// A window of an image's pixels at a DCT scale, unresampled: the scaled pixels [x0, x0 + width)
// x [y0, y0 + height) of the stored image decoded at 1/denom (scaled_width x scaled_height in
// all, libjpeg's output size), RGB rows of width * 3 bytes in pixels. The union that several
// views of one record share (views.h); the planner fills every field but the pixels.
struct ScaledRegion {
    int denom = 1;
    int scaled_width = 0, scaled_height = 0;
    int x0 = 0, y0 = 0, width = 0, height = 0;
    std::vector<uint8_t> pixels;  // sized by the planner: height * width * 3
    const uint8_t *row(int y) const { return pixels.data() + static_cast<size_t>(y - y0) * width * 3; }
};

// Chooses a region once the stored image's size is known (views.h's ViewPlanner); false with a
// message (at most why_size bytes, NUL-terminated) when the request does not fit the image.
// Never longjmps and owns nothing the decode must free: it runs inside the libjpeg decode.
class RegionPlanner {
public:
    virtual ~RegionPlanner() = default;
    virtual bool plan(int stored_height, int stored_width, ScaledRegion &region, char *why,
                      size_t why_size) = 0;
};

// Reads the JPEG's header, lets planner choose the scale and window, then decodes exactly that
// window of scaled pixels into region.pixels, as decode_jpeg_into decodes a crop's window (the
// same pixels: column pads, skipped rows, CMYK). Returns "" or the reason, as decode_jpeg_into.
std::string decode_jpeg_region(const uint8_t *data, size_t size, RegionPlanner &planner,
                               ScaledRegion &region, DecodeScratch &scratch);

// Decodes crop of the JPEG (a box of the image as out.orientation shows it), resized to the slot
// (Pillow BILINEAR), turned by the orientation, then mirrored if asked.
// Returns "" on success, else the reason: libjpeg's message for bad data, or what Pillow would
// refuse; of libjpeg's warnings only "premature end of JPEG file" (truncation) counts.
std::string decode_jpeg_into(const uint8_t *data, size_t size, const CropBox &crop,
                             const OutputSlot &out, DecodeScratch &scratch,
                             const DecodeOptions &options);

}  // namespace fl
