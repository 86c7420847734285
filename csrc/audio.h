// Native decoders of FLAC (RFC 9639) and WAV (RIFF/WAVE, PCM and IEEE float) clips: a seek to
// the crop's first frame without decoding from the start, and float32 samples scaled exactly as
// libsndfile scales them, written through strides straight into a batch row. Plain C++, no
// Python; audio_bindings.cpp is the bridge.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace fl {

// What a decode came to: kOk, kUnsupported (a clip or feature these decoders leave to
// libsndfile: the caller falls back), or kDamaged (the bytes are bad: message says what).
enum class AudioStatus : int { kOk = 0, kUnsupported = 1, kDamaged = 2 };

// Where the samples go: sample (frame f, output channel c) at data[f * frame_stride +
// c * channel_stride] (in floats). mono: the clip's channels averaged into channel 0 (as
// numpy's float32 mean: summed in order, divided by the count); else channels equals the
// clip's, or is more than 1 for a mono clip (repeated).
// Clips of this many channels or more are not mixed to mono here: numpy's float32 mean (the
// soundfile path's mix) sums 8 or more values pairwise, in an order this mix does not copy.
constexpr int kMonoMixMax = 8;

struct AudioOut {
    float *data = nullptr;
    int64_t frame_stride = 1;
    int64_t channel_stride = 0;
    int channels = 1;
    bool mono = false;
};

struct AudioResult {
    AudioStatus status = AudioStatus::kOk;
    std::string message;      // why, when not kOk
    int64_t frames = 0;       // frames written (fewer than asked when the clip ends first)
    int64_t blocks = 0;       // FLAC frames decoded (a test seam: the seek skipped the rest)
    int modes = 0;            // FLAC channel assignments decoded, bit k for code k (a test seam)
    int rate = 0, channels = 0;
};

// The clip's container by its first bytes: 1 FLAC ("fLaC", after an optional ID3v2 tag),
// 2 WAV ("RIFF....WAVE"), 0 neither.
int audio_container(const uint8_t *data, size_t size);

// `frames` frames from frame `start` of the clip into out (out must hold `frames` frames).
AudioResult audio_decode(const uint8_t *data, size_t size, int64_t start, int64_t frames,
                         const AudioOut &out);

// The clip's rate, channels and frames (in frames) from its header alone, or why not.
AudioResult audio_info(const uint8_t *data, size_t size);

// The decoders behind audio_decode and audio_info, by container.
AudioResult flac_info(const uint8_t *data, size_t size);
AudioResult wav_info(const uint8_t *data, size_t size);
AudioResult flac_decode(const uint8_t *data, size_t size, int64_t start, int64_t frames,
                        const AudioOut &out);
AudioResult wav_decode(const uint8_t *data, size_t size, int64_t start, int64_t frames,
                       const AudioOut &out);

// A result of status (not kOk) saying why in message, with no frames (shared by both decoders).
AudioResult audio_fail(AudioStatus status, std::string message);

// Writes n frames of float samples to out from frame `at`, by out's channel rule (shared by
// both decoders): sample (frame f, channel c) of the clip is src[f * frame_step + c * chan_step].
void audio_store(const float *src, int64_t n, int channels, int64_t frame_step,
                 int64_t chan_step, const AudioOut &out, int64_t at);

}  // namespace fl
