// A window of video frames from a container held in memory, through libavformat/libavcodec and
// swscale, with no Python in the loop: the caller (video_bindings.cpp) releases the GIL around
// decode_window. The module is built only where FFmpeg's development files are found; the
// Python side (fastloader/decode/video_native.py) falls back to PyAV otherwise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace flv {

struct Crop {  // of the RGB frame, in pixels; the caller checks it lies inside the frame
    int top, left, height, width;
};

struct WindowOut {  // uint8 [count, height, width, 3], C-contiguous
    uint8_t *frames;
    uint8_t *found;  // [count]: 1 where the frame with pts[k] was decoded into slot k
    int height, width;  // each crop scaled to this (Pillow's bilinear, antialiased), or kept
    bool flip;          // mirrored left to right
};

enum Status { kDecoded = 0, kDamaged = 1, kLeft = 2 };  // kLeft: a frame this path cannot
                                                        // convert; the caller uses PyAV
struct Result {
    Status status;
    std::string message;  // what is wrong, for kDamaged and kLeft
};

// Decodes the frames whose pts are listed (ascending, distinct; count of them) from the
// container: seeks to seek_pts (the keyframe at or before the first), decodes forward, skips
// the decode of frames no one references and no one wants (AVDISCARD_NONREF), converts each
// wanted frame to RGB24 (swscale, as PyAV's frame conversion does) and copies its crop.
// thread_type: 1 slice, 2 frame, 3 both (FF_THREAD_*).
Result decode_window(const uint8_t *data, size_t size, int64_t seek_pts, const int64_t *pts,
                     size_t count, int threads, int thread_type, Crop crop, WindowOut out);

}  // namespace flv
