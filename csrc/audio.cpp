// The front door of the FLAC and WAV decoders (audio.h): the container by its first bytes, the
// dispatch to audio_flac.cpp or audio_wav.cpp, and what both decoders share: a refusal's result
// and the channel rule that writes samples into the caller's row.
#include <cstring>
#include <utility>

#include "audio.h"

namespace fl {

namespace {

// An ID3v2 tag's length (10-byte header, syncsafe size, optional footer), or 0.
size_t id3_length(const uint8_t *data, size_t size) {
    if (size < 10 || std::memcmp(data, "ID3", 3) != 0) return 0;
    if ((data[6] | data[7] | data[8] | data[9]) & 0x80) return 0;
    size_t body = (static_cast<size_t>(data[6]) << 21) | (data[7] << 14) | (data[8] << 7) | data[9];
    return 10 + body + ((data[5] & 0x10) ? 10 : 0);
}

}  // namespace

AudioResult audio_fail(AudioStatus status, std::string message) {
    AudioResult r;
    r.status = status;
    r.message = std::move(message);
    return r;
}

int audio_container(const uint8_t *data, size_t size) {
    if (size >= 12 && std::memcmp(data, "RIFF", 4) == 0 && std::memcmp(data + 8, "WAVE", 4) == 0)
        return 2;
    const size_t skip = id3_length(data, size);
    if (skip <= size && size - skip >= 4 && std::memcmp(data + skip, "fLaC", 4) == 0) return 1;
    return 0;
}

AudioResult audio_info(const uint8_t *data, size_t size) {
    switch (audio_container(data, size)) {
    case 1: return flac_info(data, size);
    case 2: return wav_info(data, size);
    default: return audio_fail(AudioStatus::kUnsupported, "neither FLAC nor WAV");
    }
}

AudioResult audio_decode(const uint8_t *data, size_t size, int64_t start, int64_t frames,
                         const AudioOut &out) {
    if (start < 0 || frames < 0) return audio_fail(AudioStatus::kDamaged, "a negative crop");
    switch (audio_container(data, size)) {
    case 1: return flac_decode(data, size, start, frames, out);
    case 2: return wav_decode(data, size, start, frames, out);
    default: return audio_fail(AudioStatus::kUnsupported, "neither FLAC nor WAV");
    }
}

void audio_store(const float *src, int64_t n, int channels, int64_t frame_step,
                 int64_t chan_step, const AudioOut &out, int64_t at) {
    float *dst = out.data + at * out.frame_stride;
    if (out.mono && channels > 1) {  // numpy's float32 mean: summed in channel order, / count
        const float count = static_cast<float>(channels);
        for (int64_t f = 0; f < n; f++) {
            const float *s = src + f * frame_step;
            float sum = s[0];
            for (int c = 1; c < channels; c++) sum += s[c * chan_step];
            dst[f * out.frame_stride] = sum / count;
        }
        return;
    }
    const int outs = out.mono ? 1 : out.channels;
    for (int c = 0; c < outs; c++) {
        const float *s = src + (channels == 1 ? 0 : c) * chan_step;
        float *d = dst + c * out.channel_stride;
        if (frame_step == 1 && out.frame_stride == 1) {
            std::memcpy(d, s, static_cast<size_t>(n) * sizeof(float));
        } else {
            for (int64_t f = 0; f < n; f++) d[f * out.frame_stride] = s[f * frame_step];
        }
    }
}

}  // namespace fl
