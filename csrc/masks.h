// Label masks (uint8, 0 = background) stored as row-major runs: nearest-neighbour crop, resize
// and mirror straight from the runs into an output slot, never expanding the whole mask.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace fl {

// The crop box (top, left, height, width) of a mask of height x width pixels, resampled to
// out_h x out_w: output pixel (i, j) takes the source pixel under its centre, row
// top + floor((i + 0.5) * crop_h / out_h), column left + floor((j + 0.5) * crop_w / out_w)
// (clipped to the crop and the mask), columns mirrored when flip. Returns "" or why the runs
// do not describe the mask (their lengths must sum to height * width).
std::string mask_from_runs(const uint8_t* values, const uint32_t* lengths, size_t runs,
                           int64_t height, int64_t width, const int64_t crop[4], bool flip,
                           uint8_t* out, int64_t out_h, int64_t out_w);

}  // namespace fl
