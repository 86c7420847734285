// EXIF orientation (1-8) on the decode path: crops of the turned image mapped to the stored
// pixels, and the decoded stored-orientation pixels written turned into the output slot.
#pragma once
#include <cstdint>

#include "jpeg.h"

namespace fl {

// What PIL.ImageOps.exif_transpose does to the stored pixels S (H x W), as the source pixel of
// each turned pixel O[y][x]: without transpose S[fy ? H-1-y : y][fx ? W-1-x : x], with it
// S[fy ? H-1-x : x][fx ? W-1-y : y] (O is then W x H).
struct Moves {
    bool transpose = false;
    bool flip_y = false;
    bool flip_x = false;
};

// The moves of an orientation (anything outside 2-8 is 1, as exif_transpose ignores it), then
// a left-right mirror of the turned image when mirror is set.
Moves moves_of(int orientation, bool mirror = false);

// True for the EXIF orientations 5-8, which swap height and width.
inline bool transposes(int orientation) { return orientation >= 5 && orientation <= 8; }

// A box of the image as `orientation` shows it, as a box of the stored image (stored_height x
// stored_width); oriented_crop is its inverse. The whole-image box (0, 0, 0, 0) stays whole.
CropBox stored_crop(const CropBox &oriented, int stored_height, int stored_width, int orientation);
CropBox oriented_crop(const CropBox &stored, int stored_height, int stored_width, int orientation);

// Where the stored-orientation decode writes so that out receives the turned pixels: for 1-4
// the slot itself (rows reversed by a negative stride for a vertical flip, the mirror as its
// flip); for 5-8 a turned.size() >= height * width * 3 buffer of the transposed size, which
// write_turned then copies into out.
OutputSlot stored_target(const OutputSlot &out, uint8_t *turned);

// Copies the transposed decode (out.width x out.height pixels, rows packed) into out, turned.
void write_turned(const uint8_t *turned, const OutputSlot &out);

}  // namespace fl
