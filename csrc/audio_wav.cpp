// WAV (RIFF/WAVE) clips: the fmt and data chunks found by walking the chunk list (every size
// checked against the bytes there), PCM 8/16/24/32-bit and IEEE float 32/64, a seek by
// arithmetic.
#include <cstring>
#include <vector>

#include "audio.h"

namespace fl {

namespace {

uint32_t le16(const uint8_t *p) { return p[0] | (p[1] << 8); }
uint32_t le32(const uint8_t *p) {
    return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

struct WavFormat {
    int channels = 0, rate = 0, bits = 0, block = 0;
    bool is_float = false;
    size_t data_at = 0, data_bytes = 0;
};

AudioResult parse_fmt(const uint8_t *p, uint32_t n, WavFormat &f) {
    if (n < 16) return audio_fail(AudioStatus::kDamaged, "its WAV fmt chunk is " + std::to_string(n) +
                                                             " bytes, under 16");
    uint32_t tag = le16(p);
    f.channels = static_cast<int>(le16(p + 2));
    f.rate = static_cast<int>(le32(p + 4) & 0x7fffffff);
    f.block = static_cast<int>(le16(p + 12));
    f.bits = static_cast<int>(le16(p + 14));
    if (tag == 0xFFFE) {  // WAVE_FORMAT_EXTENSIBLE: the sub-format GUID's first two bytes
        if (n < 40) return audio_fail(AudioStatus::kDamaged, "its WAV extensible fmt chunk is short");
        uint32_t valid = le16(p + 18);
        if (valid != 0 && static_cast<int>(valid) != f.bits)
            return audio_fail(AudioStatus::kUnsupported, "WAV with valid bits below the container's");
        tag = le16(p + 24);
    }
    if (tag != 1 && tag != 3)
        return audio_fail(AudioStatus::kUnsupported, "WAV format tag " + std::to_string(tag));
    f.is_float = tag == 3;
    const bool pcm_ok = !f.is_float && (f.bits == 8 || f.bits == 16 || f.bits == 24 || f.bits == 32);
    const bool float_ok = f.is_float && (f.bits == 32 || f.bits == 64);
    if (!pcm_ok && !float_ok)
        return audio_fail(AudioStatus::kUnsupported, "WAV of " + std::to_string(f.bits) + "-bit samples");
    if (f.channels < 1 || f.channels > 64 || f.rate < 1)
        return audio_fail(AudioStatus::kDamaged, "its WAV fmt chunk says " + std::to_string(f.channels) +
                                                     " channels at " + std::to_string(f.rate) + " Hz");
    if (f.block != f.channels * f.bits / 8)
        return audio_fail(AudioStatus::kUnsupported, "WAV whose block align is not channels x sample size");
    return {};
}

AudioResult parse_wav(const uint8_t *data, size_t size, WavFormat &f) {
    size_t at = 12;
    bool have_fmt = false;
    while (at + 8 <= size) {
        const uint8_t *id = data + at;
        const uint32_t n = le32(data + at + 4);
        const size_t body = at + 8;
        if (std::memcmp(id, "fmt ", 4) == 0) {
            if (n > size - body)
                return audio_fail(AudioStatus::kDamaged, "its WAV fmt chunk runs past the end");
            AudioResult r = parse_fmt(data + body, n, f);
            if (r.status != AudioStatus::kOk) return r;
            have_fmt = true;
        } else if (std::memcmp(id, "data", 4) == 0) {
            if (!have_fmt) return audio_fail(AudioStatus::kUnsupported, "WAV data chunk before its fmt chunk");
            // A data chunk longer than the bytes there is cut to them, as libsndfile does.
            f.data_at = body;
            f.data_bytes = n > size - body ? size - body : n;
            return {};
        }
        if (n > size - body) break;
        at = body + n + (n & 1);
    }
    return audio_fail(AudioStatus::kDamaged, have_fmt ? "its WAV has no data chunk"
                                                      : "its WAV has no fmt chunk");
}

// Samples of frames [first, first + n) as float32, libsndfile's scaling: PCM x / 2^(bits-1)
// (8-bit unsigned, less 128), float as is, double cast to float.
void convert(const uint8_t *p, int64_t count, const WavFormat &f, float *dst) {
    switch (f.is_float ? -f.bits : f.bits) {
    case 8:
        for (int64_t i = 0; i < count; i++) dst[i] = (static_cast<float>(p[i]) - 128.0f) * (1.0f / 128);
        break;
    case 16:
        for (int64_t i = 0; i < count; i++)
            dst[i] = static_cast<float>(static_cast<int16_t>(le16(p + 2 * i))) * (1.0f / 32768);
        break;
    case 24:
        for (int64_t i = 0; i < count; i++) {
            const uint8_t *q = p + 3 * i;
            const int32_t v = static_cast<int32_t>((q[0] << 8) | (q[1] << 16) |
                                                   (static_cast<uint32_t>(q[2]) << 24));
            dst[i] = static_cast<float>(v) * (1.0f / 2147483648.0f);
        }
        break;
    case 32:
        for (int64_t i = 0; i < count; i++)
            dst[i] = static_cast<float>(static_cast<int32_t>(le32(p + 4 * i))) * (1.0f / 2147483648.0f);
        break;
    case -32:
        std::memcpy(dst, p, static_cast<size_t>(count) * 4);
        break;
    default:  // -64
        for (int64_t i = 0; i < count; i++) {
            double d;
            std::memcpy(&d, p + 8 * i, 8);
            dst[i] = static_cast<float>(d);
        }
    }
}

}  // namespace

AudioResult wav_info(const uint8_t *data, size_t size) {
    WavFormat f;
    AudioResult r = parse_wav(data, size, f);
    r.rate = f.rate;
    r.channels = f.channels;
    r.frames = f.block ? static_cast<int64_t>(f.data_bytes / static_cast<size_t>(f.block)) : 0;
    return r;
}

AudioResult wav_decode(const uint8_t *data, size_t size, int64_t start, int64_t frames,
                       const AudioOut &out) {
    WavFormat f;
    AudioResult r = parse_wav(data, size, f);
    if (r.status != AudioStatus::kOk) return r;
    if (!out.mono && out.channels != f.channels && f.channels != 1)
        return audio_fail(AudioStatus::kDamaged, "has " + std::to_string(f.channels) +
                                                     " channels, the loader wants " +
                                                     std::to_string(out.channels));
    if (out.mono && f.channels >= kMonoMixMax)
        return audio_fail(AudioStatus::kUnsupported, "a mix of " + std::to_string(f.channels) +
                                                         " channels to mono (numpy sums 8 or more pairwise)");
    r.rate = f.rate;
    r.channels = f.channels;
    const int64_t total = static_cast<int64_t>(f.data_bytes / static_cast<size_t>(f.block));
    if (start >= total) return r;  // no frames there: the caller says the clip is short
    const int64_t n = frames < total - start ? frames : total - start;
    const uint8_t *p = data + f.data_at + static_cast<size_t>(start) * f.block;
    std::vector<float> chunk;
    const int64_t step = 4096;  // frames converted at a time (interleaved), then stored
    chunk.resize(static_cast<size_t>(step * f.channels));
    for (int64_t done = 0; done < n; done += step) {
        const int64_t m = n - done < step ? n - done : step;
        convert(p + done * f.block, m * f.channels, f, chunk.data());
        audio_store(chunk.data(), m, f.channels, f.channels, 1, out, done);
    }
    r.frames = n;
    return r;
}

}  // namespace fl
