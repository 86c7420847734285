// What the FLAC decoder's two layers share (not part of audio.h's interface): the stream layer
// (audio_flac.cpp: metadata, frame headers, the seek, the crop loop) parses STREAMINFO and each
// frame's header; the frame layer (audio_flac_frame.cpp: subframes, residuals, decorrelation,
// CRC-16) decodes the frame that header heads into per-channel samples.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fl {
namespace flac {

struct StreamInfo {
    int min_block = 0, max_block = 0, rate = 0, channels = 0, bits = 0;
    uint64_t total = 0;
    size_t audio_at = 0;                                 // the first frame's byte offset
    std::vector<std::pair<uint64_t, uint64_t>> points;   // seek table: (sample, byte offset)
};

struct Header {
    size_t pos = 0, length = 0;  // the frame's byte offset; the header's bytes (with CRC-8)
    uint64_t sample = 0;         // the frame's first sample
    int block = 0, assignment = 0;
};

// A big-endian unsigned of n <= 4 bytes.
inline uint32_t be(const uint8_t *p, int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}

// One frame at a time into a buffer of max_block samples per channel, reused frame to frame
// (so a crop allocates once). The per-sample work all stays inside decode's translation unit:
// the stream layer calls it once per frame.
class FrameDecoder {
public:
    explicit FrameDecoder(const StreamInfo &si)
        : si_(si), samples_(static_cast<size_t>(si.max_block) * si.channels) {}

    // Channel c of the last frame decoded.
    const int32_t *channel(int c) const {
        return samples_.data() + static_cast<size_t>(c) * si_.max_block;
    }

    // Decodes the frame h heads; its end (the byte after its CRC-16) in end, or why not.
    std::string decode(const uint8_t *data, size_t size, const Header &h, size_t &end);

private:
    const StreamInfo &si_;
    std::vector<int32_t> samples_;
};

}  // namespace flac
}  // namespace fl
