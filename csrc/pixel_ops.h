// Pixel-value augmentations on one RGB image in place, equal to Pillow's definitions
// (ImageEnhance, ImageOps, ImageFilter.GaussianBlur, Image.transform NEAREST), driven by one
// sample's row of a PixelProgram (fastloader/decode/pixels/: the op codes and the params layout
// are documented there and mirrored by PixelCode below). Plain C++: never throws, never sees Python.
#pragma once

#include <cstdint>
#include <vector>

namespace fl {

// One step's op; the values are the Python package's (fastloader/decode/pixels/codes.py).
enum PixelCode : int32_t {
    kPixelNone = 0,
    kPixelBrightness = 1,   // p0 factor: ImageEnhance.Brightness
    kPixelContrast = 2,     // p0 factor: ImageEnhance.Contrast
    kPixelSaturation = 3,   // p0 factor: ImageEnhance.Color
    kPixelHue = 4,          // p0 hue factor in [-0.5, 0.5]: HSV hue + uint8(factor * 255)
    kPixelGrayscale = 5,    // convert("L"), three equal bands
    kPixelBlur = 6,         // p0 radius: ImageFilter.GaussianBlur(radius)
    kPixelSolarize = 7,     // p0 threshold: ImageOps.solarize
    kPixelPosterize = 8,    // p0 bits 1..8: ImageOps.posterize
    kPixelAutocontrast = 9, // ImageOps.autocontrast
    kPixelEqualize = 10,    // ImageOps.equalize
    kPixelErase = 11,       // p0 top, p1 left, p2 height, p3 width, p4..p6 the fill's R, G, B
    kPixelSharpness = 12,   // p0 factor: ImageEnhance.Sharpness
    kPixelInvert = 13,      // ImageOps.invert
    kPixelShearX = 14,      // p0 magnitude m: affine shear degrees(atan(m)) about (0, 0)
    kPixelShearY = 15,      // p0 magnitude m
    kPixelTranslateX = 16,  // p0 whole pixels
    kPixelTranslateY = 17,  // p0 whole pixels
    kPixelRotate = 18,      // p0 degrees, counter-clockwise about the centre (Image.rotate)
    kPixelCodeCount = 19,
};

constexpr int kPixelParams = 8;  // floats per step

// Per-thread buffers, grown on first use and reused for every later image.
struct PixelScratch {
    std::vector<uint8_t> copy;   // the source of neighbourhood and geometric ops
    std::vector<uint8_t> plane;  // one row: blur's row pass output, sharpness's smoothed row
    std::vector<uint32_t> line;  // blur's running sums and a line's copy
    std::vector<float> terms;    // sharpness: three rows of the SMOOTH filter's products
};

// In place on one RGB image, rows of width*3 bytes, contiguous; codes/params as one sample's row
// of a PixelProgram (n_ops steps, kPixelParams floats a step). Unknown codes are skipped.
// Never throws, never sees Python.
void apply_pixel_program(uint8_t *image, int height, int width, const int32_t *codes,
                         const float *params, int n_ops, PixelScratch &scratch);

}  // namespace fl
