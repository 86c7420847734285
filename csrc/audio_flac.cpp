// FLAC clips (RFC 9639), the stream layer, written from the specification: STREAMINFO and
// SEEKTABLE, frame headers checked by their CRC-8 and against STREAMINFO, the crop's first frame
// found by a search over byte offsets for frame headers (no decode from the start), and the crop
// loop that decodes only the frames it covers (each by the frame layer, audio_flac_frame.cpp)
// into the caller's channels. Every read is bounded by the clip's bytes: damaged bytes give a
// message, never a read past the end.
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "audio.h"
#include "audio_flac_internal.h"

namespace fl {

namespace {

using flac::be;
using flac::FrameDecoder;
using flac::Header;
using flac::StreamInfo;

uint8_t crc8(const uint8_t *p, size_t n) {
    struct Table {
        uint8_t c8[256];
        Table() {
            for (int x = 0; x < 256; x++) {
                uint32_t a = static_cast<uint32_t>(x);
                for (int i = 0; i < 8; i++) a = (a & 0x80) ? ((a << 1) ^ 0x07) : (a << 1);
                c8[x] = static_cast<uint8_t>(a);
            }
        }
    };
    static const Table table;
    const uint8_t *t = table.c8;
    uint8_t crc = 0;
    for (size_t i = 0; i < n; i++) crc = t[crc ^ p[i]];
    return crc;
}

// The byte after "fLaC", past an ID3v2 tag if one comes first (audio_container checked both).
size_t after_magic(const uint8_t *data, size_t size) {
    size_t at = 0;
    if (size >= 10 && std::memcmp(data, "ID3", 3) == 0) {
        at = 10 + ((static_cast<size_t>(data[6]) << 21) | (data[7] << 14) | (data[8] << 7) | data[9]) +
             ((data[5] & 0x10) ? 10 : 0);
    }
    return at + 4;
}

// STREAMINFO's fields from its 34-byte body b.
void read_streaminfo(const uint8_t *b, StreamInfo &si) {
    si.min_block = static_cast<int>(be(b, 2));
    si.max_block = static_cast<int>(be(b + 2, 2));
    si.rate = static_cast<int>(be(b + 10, 3) >> 4);
    si.channels = ((b[12] >> 1) & 7) + 1;
    si.bits = (((b[12] & 1) << 4) | (b[13] >> 4)) + 1;
    si.total = (static_cast<uint64_t>(b[13] & 0x0f) << 32) | be(b + 14, 4);
}

// A SEEKTABLE's points from its body b of n bytes (18 a point; placeholders skipped).
void read_seektable(const uint8_t *b, size_t n, StreamInfo &si) {
    for (size_t k = 0; k + 18 <= n; k += 18) {
        const uint64_t s = (static_cast<uint64_t>(be(b + k, 4)) << 32) | be(b + k + 4, 4);
        const uint64_t o = (static_cast<uint64_t>(be(b + k + 8, 4)) << 32) | be(b + k + 12, 4);
        if (s != ~0ull) si.points.emplace_back(s, o);
    }
}

// Whether STREAMINFO describes a stream this decoder takes: damaged values, or ones left to
// libsndfile (sample sizes other than 8/16/24 bits, no sample count to seek by).
AudioResult check_stream(const StreamInfo &si) {
    if (si.rate < 1 || si.max_block < 16 || si.min_block > si.max_block)
        return audio_fail(AudioStatus::kDamaged, "its FLAC STREAMINFO says " + std::to_string(si.rate) +
                                                     " Hz, blocks of " + std::to_string(si.min_block) + "-" +
                                                     std::to_string(si.max_block));
    if (si.bits != 8 && si.bits != 16 && si.bits != 24)
        return audio_fail(AudioStatus::kUnsupported, "FLAC of " + std::to_string(si.bits) + "-bit samples");
    if (si.total == 0) return audio_fail(AudioStatus::kUnsupported, "FLAC with no sample count");
    return {};
}

// The metadata blocks into si (which keeps what was read when a block is damaged: flac_info
// reports it) up to the first frame.
AudioResult parse_stream(const uint8_t *data, size_t size, StreamInfo &si) {
    size_t at = after_magic(data, size);
    bool last = false, have_info = false;
    while (!last) {
        if (at + 4 > size) return audio_fail(AudioStatus::kDamaged, "its FLAC metadata runs past the end");
        last = data[at] & 0x80;
        const int type = data[at] & 0x7f;
        const size_t n = be(data + at + 1, 3);
        const uint8_t *b = data + at + 4;
        if (n > size - at - 4)
            return audio_fail(AudioStatus::kDamaged, "a FLAC metadata block runs past the end");
        if (!have_info && type != 0)
            return audio_fail(AudioStatus::kDamaged, "its FLAC metadata does not start with STREAMINFO");
        if (type == 0) {
            if (n < 34) return audio_fail(AudioStatus::kDamaged, "its FLAC STREAMINFO is short");
            read_streaminfo(b, si);
            have_info = true;
        } else if (type == 3) {
            read_seektable(b, n, si);
        } else if (type == 127) {
            return audio_fail(AudioStatus::kDamaged, "a FLAC metadata block of the invalid type 127");
        }
        at += 4 + n;
    }
    si.audio_at = at;
    return check_stream(si);
}

// The header's coded frame or sample number (UTF-8-like, 1-7 bytes; 7 only for variable
// blocks) at p[at], at moved past it; false if malformed, or if it and the block size bytes
// after it would run past `room` (the clip's bytes from p).
bool coded_number(const uint8_t *p, size_t room, bool variable, size_t &at, uint64_t &number) {
    const uint8_t first = p[at++];
    int extra;
    if (first < 0x80) { extra = 0; number = first; }
    else if ((first & 0xE0) == 0xC0) { extra = 1; number = first & 0x1F; }
    else if ((first & 0xF0) == 0xE0) { extra = 2; number = first & 0x0F; }
    else if ((first & 0xF8) == 0xF0) { extra = 3; number = first & 0x07; }
    else if ((first & 0xFC) == 0xF8) { extra = 4; number = first & 0x03; }
    else if ((first & 0xFE) == 0xFC) { extra = 5; number = first & 0x01; }
    else if (first == 0xFE && variable) { extra = 6; number = 0; }
    else return false;
    if (room < at + extra + 3) return false;
    for (int i = 0; i < extra; i++) {
        const uint8_t c = p[at++];
        if ((c & 0xC0) != 0x80) return false;
        number = (number << 6) | (c & 0x3F);
    }
    return true;
}

// The block size of header code `code` (1-15), read from p[at] for codes 6 and 7 (at moved past).
int block_size(int code, const uint8_t *p, size_t &at) {
    if (code == 1) return 192;
    if (code <= 5) return 576 << (code - 2);
    if (code == 6) return p[at++] + 1;
    if (code == 7) {
        const int block = static_cast<int>(be(p + at, 2)) + 1;
        at += 2;
        return block;
    }
    return 256 << (code - 8);
}

// Whether a valid frame header (sync, codes, CRC-8, and STREAMINFO's channels, sample size,
// block size and sample count) starts at pos.
bool parse_header(const uint8_t *data, size_t size, size_t pos, const StreamInfo &si, Header &h) {
    if (size - pos < 6) return false;
    const uint8_t *p = data + pos;
    if (p[0] != 0xFF || (p[1] & 0xFE) != 0xF8) return false;
    const bool variable = p[1] & 1;
    const int block_code = p[2] >> 4, rate_code = p[2] & 15;
    const int assignment = p[3] >> 4, size_code = (p[3] >> 1) & 7;
    if (block_code == 0 || rate_code == 15 || assignment > 10 || size_code == 3 || (p[3] & 1))
        return false;
    static const int kBits[8] = {0, 8, 12, 0, 16, 20, 24, 32};
    if (size_code != 0 && kBits[size_code] != si.bits) return false;
    if ((assignment < 8 ? assignment + 1 : 2) != si.channels) return false;
    size_t at = 4;
    uint64_t number = 0;
    if (!coded_number(p, size - pos, variable, at, number)) return false;
    const int block = block_size(block_code, p, at);
    if (size - pos < at + 3) return false;
    if (rate_code == 12) at += 1;
    else if (rate_code == 13 || rate_code == 14) at += 2;
    if (size - pos < at + 1) return false;
    if (crc8(p, at) != p[at]) return false;
    h.pos = pos;
    h.length = at + 1;
    h.sample = variable ? number : number * static_cast<uint64_t>(si.max_block);
    h.block = block;
    h.assignment = assignment;
    if (block > si.max_block || h.sample >= si.total) return false;
    if (!variable && block != si.max_block && h.sample + block != si.total) return false;
    return true;
}

// The first valid header at or after `from`, before `until`.
bool next_header(const uint8_t *data, size_t size, size_t from, size_t until, const StreamInfo &si,
                 Header &h) {
    until = std::min(until, size);
    while (from + 1 < until) {
        const void *hit = std::memchr(data + from, 0xFF, until - from - 1);
        if (!hit) return false;
        const size_t at = static_cast<size_t>(static_cast<const uint8_t *>(hit) - data);
        if (parse_header(data, size, at, si, h)) return true;
        from = at + 1;
    }
    return false;
}

// The header at the seek table's point nearest at or before target whose header is where the
// point says and numbers the point's sample; else the first frame's position (its header unread).
Header seek_point(const uint8_t *data, size_t size, const StreamInfo &si, uint64_t target) {
    Header lo;
    lo.pos = si.audio_at;
    for (const auto &pt : si.points) {
        Header h;
        if (pt.first <= target && pt.first > lo.sample && pt.second < size - si.audio_at &&
            parse_header(data, size, si.audio_at + pt.second, si, h) && h.sample == pt.first)
            lo = h;
    }
    return lo;
}

// A frame header at or before the crop's first sample, found without decoding: the seek
// table's point if any, then a search over byte offsets (interpolated by sample), then a walk
// over the headers of the last few frames.
Header seek_frame(const uint8_t *data, size_t size, const StreamInfo &si, uint64_t target) {
    Header lo = seek_point(data, size, si, target);
    const uint64_t frames = (si.total + si.max_block - 1) / si.max_block;
    const size_t span = size - si.audio_at;
    const size_t frame_bytes = std::max<size_t>(16, span / std::max<uint64_t>(1, frames));
    size_t hi = size;
    uint64_t hi_sample = si.total;
    for (int step = 0; step < 64 && hi - lo.pos > 3 * frame_bytes; step++) {
        const double share = static_cast<double>(target - lo.sample) /
                             static_cast<double>(std::max<uint64_t>(1, hi_sample - lo.sample));
        size_t mid = lo.pos + static_cast<size_t>(share * static_cast<double>(hi - lo.pos));
        mid = mid > lo.pos + frame_bytes ? mid - frame_bytes : lo.pos + 1;  // land before it
        mid = std::min(std::max(mid, lo.pos + 1), hi - 1);
        Header h;
        if (!next_header(data, size, mid, hi, si, h) || h.sample > target) {
            hi = mid;
            if (h.sample > target && h.sample < hi_sample) hi_sample = h.sample;
        } else {
            lo = h;
        }
    }
    for (;;) {  // the last frames, header to header
        Header h;
        if (!next_header(data, size, lo.pos + 1, size, si, h) || h.sample > target ||
            h.sample <= lo.sample)
            return lo;
        lo = h;
    }
}

// Why a clip whose metadata parsed is not decoded into out here: its channels do not fit out
// (damaged), or it is left to libsndfile (a mono mix of kMonoMixMax or more channels; fixed
// blocks whose STREAMINFO gives a range of sizes, so frame numbers do not give sample numbers).
AudioResult refusal(const uint8_t *data, size_t size, const StreamInfo &si, const AudioOut &out) {
    if (!out.mono && out.channels != si.channels && si.channels != 1)
        return audio_fail(AudioStatus::kDamaged, "has " + std::to_string(si.channels) +
                                                     " channels, the loader wants " +
                                                     std::to_string(out.channels));
    if (out.mono && si.channels >= kMonoMixMax)
        return audio_fail(AudioStatus::kUnsupported, "a mix of " + std::to_string(si.channels) +
                                                         " channels to mono (numpy sums 8 or more pairwise)");
    if (si.audio_at + 1 < size && !(data[si.audio_at + 1] & 1) && si.min_block != si.max_block)
        return audio_fail(AudioStatus::kUnsupported, "FLAC of fixed blocks whose STREAMINFO gives a "
                                                     "range of block sizes");
    return {};
}

// The samples of crop [first, last) in the frame h heads (just decoded by decoder) into out,
// scaled as libsndfile scales them (x / 2^(bits-1)); the frames written. A mono mix goes
// through wave (the scaled channels, summed by audio_store); otherwise each channel is scaled
// straight into its output channel, with no staging copy.
int64_t store_frame(const FrameDecoder &decoder, const Header &h, const StreamInfo &si,
                    uint64_t first, uint64_t last, const AudioOut &out, float *wave) {
    const uint64_t lo = std::max(first, h.sample);
    const uint64_t hi = std::min(last, h.sample + static_cast<uint64_t>(h.block));
    if (lo >= hi) return 0;
    const float scale = 1.0f / static_cast<float>(1 << (si.bits - 1));
    const int64_t n = static_cast<int64_t>(hi - lo), off = static_cast<int64_t>(lo - h.sample);
    const int64_t at = static_cast<int64_t>(lo - first);
    if (out.mono && si.channels > 1) {
        for (int c = 0; c < si.channels; c++) {
            const int32_t *src = decoder.channel(c) + off;
            float *dst = wave + static_cast<size_t>(c) * si.max_block;
            for (int64_t i = 0; i < n; i++) dst[i] = static_cast<float>(src[i]) * scale;
        }
        audio_store(wave, n, si.channels, 1, si.max_block, out, at);
        return n;
    }
    for (int c = 0; c < (out.mono ? 1 : out.channels); c++) {
        const int32_t *src = decoder.channel(si.channels == 1 ? 0 : c) + off;
        float *dst = out.data + at * out.frame_stride + c * out.channel_stride;
        const int64_t step = out.frame_stride;
        if (step == 1) {  // planar: a loop the compiler vectorizes
            for (int64_t i = 0; i < n; i++) dst[i] = static_cast<float>(src[i]) * scale;
        } else {
            for (int64_t i = 0; i < n; i++) dst[i * step] = static_cast<float>(src[i]) * scale;
        }
    }
    return n;
}

// Decodes the frames that cover [first, last) into out, header to header from the seek's frame;
// r (the stream's rate and channels) gains the frames written, frames decoded and channel
// assignments seen. A frame that fails after the seek means the search landed on a false
// header (its CRC-8 matched by chance): the walk restarts from the first frame. A failure
// there is damage, reported with the frame's byte and sample.
AudioResult decode_crop(const uint8_t *data, size_t size, const StreamInfo &si, uint64_t first,
                        uint64_t last, const AudioOut &out, AudioResult r) {
    FrameDecoder decoder(si);
    std::vector<float> wave(static_cast<size_t>(si.max_block) * si.channels);
    Header h = seek_frame(data, size, si, first);
    bool from_seek = h.pos != si.audio_at;
    uint64_t expect = h.sample;
    size_t pos = h.pos;
    while (expect < last) {
        size_t end = 0;
        std::string why;
        if (!parse_header(data, size, pos, si, h) || h.sample != expect) {
            why = "no valid frame header";
        } else {
            why = decoder.decode(data, size, h, end);
            r.blocks++;
            r.modes |= 1 << h.assignment;
        }
        if (!why.empty()) {
            if (from_seek) {
                from_seek = false;
                pos = si.audio_at;
                expect = 0;
                continue;
            }
            return audio_fail(AudioStatus::kDamaged, "its FLAC frame at byte " + std::to_string(pos) +
                                                         " (sample " + std::to_string(expect) +
                                                         ") is damaged: " + why);
        }
        from_seek = false;
        r.frames += store_frame(decoder, h, si, first, last, out, wave.data());
        expect = h.sample + static_cast<uint64_t>(h.block);
        pos = end;
    }
    return r;
}

}  // namespace

AudioResult flac_info(const uint8_t *data, size_t size) {
    StreamInfo si;
    AudioResult r = parse_stream(data, size, si);
    r.rate = si.rate;
    r.channels = si.channels;
    r.frames = static_cast<int64_t>(si.total);
    return r;
}

AudioResult flac_decode(const uint8_t *data, size_t size, int64_t start, int64_t frames,
                        const AudioOut &out) {
    StreamInfo si;
    AudioResult r = parse_stream(data, size, si);
    if (r.status != AudioStatus::kOk) return r;
    r.rate = si.rate;
    r.channels = si.channels;
    AudioResult refused = refusal(data, size, si, out);
    if (refused.status != AudioStatus::kOk) return refused;
    const uint64_t first = static_cast<uint64_t>(start);
    if (first >= si.total || frames == 0) return r;
    const uint64_t last = std::min<uint64_t>(si.total, first + static_cast<uint64_t>(frames));
    return decode_crop(data, size, si, first, last, out, std::move(r));
}

}  // namespace fl
