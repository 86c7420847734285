// FLAC clips (RFC 9639), written from the specification: STREAMINFO and SEEKTABLE, frame
// headers checked by their CRC-8 and against STREAMINFO, subframes CONSTANT/VERBATIM/FIXED/LPC
// with wasted bits, Rice residuals, stereo decorrelation, each frame's CRC-16. A crop is found
// by a search over byte offsets for frame headers (no decode from the start); only the frames
// it covers are decoded. Every read is bounded by the clip's bytes: damaged bytes give a
// message, never a read past the end.
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "audio.h"

namespace fl {

namespace {

AudioResult fail(AudioStatus status, std::string message) {
    AudioResult r;
    r.status = status;
    r.message = std::move(message);
    return r;
}

struct CrcTables {
    uint8_t c8[256];
    uint16_t c16[8][256];  // c16[k][x]: byte x followed by k zero bytes (slicing by 8)
    CrcTables() {
        for (int x = 0; x < 256; x++) {
            uint32_t a = static_cast<uint32_t>(x), b = static_cast<uint32_t>(x) << 8;
            for (int i = 0; i < 8; i++) {
                a = (a & 0x80) ? ((a << 1) ^ 0x07) : (a << 1);
                b = (b & 0x8000) ? ((b << 1) ^ 0x8005) : (b << 1);
            }
            c8[x] = static_cast<uint8_t>(a);
            c16[0][x] = static_cast<uint16_t>(b);
        }
        for (int k = 1; k < 8; k++)
            for (int x = 0; x < 256; x++) {
                const uint16_t prev = c16[k - 1][x];
                c16[k][x] = static_cast<uint16_t>((prev << 8) ^ c16[0][prev >> 8]);
            }
    }
};

const CrcTables &crc_tables() {
    static const CrcTables tables;
    return tables;
}

uint8_t crc8(const uint8_t *p, size_t n) {
    const uint8_t *t = crc_tables().c8;
    uint8_t crc = 0;
    for (size_t i = 0; i < n; i++) crc = t[crc ^ p[i]];
    return crc;
}

uint16_t crc16(const uint8_t *p, size_t n) {
    const auto &t = crc_tables().c16;
    uint32_t crc = 0;
    for (; n >= 8; n -= 8, p += 8) {
        crc ^= (static_cast<uint32_t>(p[0]) << 8) | p[1];
        crc = t[7][crc >> 8] ^ t[6][crc & 0xff] ^ t[5][p[2]] ^ t[4][p[3]] ^ t[3][p[4]] ^
              t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]];
    }
    for (; n; n--, p++) crc = ((crc << 8) ^ t[0][((crc >> 8) ^ *p) & 0xff]) & 0xffff;
    return static_cast<uint16_t>(crc);
}

// An MSB-first bit reader over [p, end): a 64-bit cache refilled 8 bytes at a time, past the
// end with zero bits it counts (overrun() says whether any of them was consumed).
class BitReader {
public:
    BitReader(const uint8_t *p, const uint8_t *end) : begin_(p), p_(p), end_(end) { refill(); }

    void refill() {
        if (end_ - p_ >= 8) {
            uint64_t v;
            std::memcpy(&v, p_, 8);
            cache_ |= __builtin_bswap64(v) >> count_;
            p_ += (63 - count_) >> 3;
            count_ |= 56;
            return;
        }
        while (count_ < 56) {
            uint64_t b = 0;
            if (p_ < end_) {
                b = *p_++;
            } else {
                phantom_ += 8;
            }
            cache_ |= b << (56 - count_);
            count_ += 8;
        }
    }

    uint32_t bits(int n) {  // 0 <= n <= 32
        if (n == 0) return 0;
        if (count_ < n) refill();
        const uint32_t v = static_cast<uint32_t>(cache_ >> (64 - n));
        cache_ <<= n;
        count_ -= n;
        return v;
    }

    int32_t sbits(int n) {  // a two's complement n-bit value, 1 <= n <= 32
        const uint32_t v = bits(n);
        return n == 32 ? static_cast<int32_t>(v)
                       : static_cast<int32_t>(v << (32 - n)) >> (32 - n);
    }

    uint32_t unary() {  // zeros before the next one bit
        uint32_t q = 0;
        for (;;) {
            if (cache_) {
                const int z = __builtin_clzll(cache_);
                if (z < count_) {
                    cache_ <<= z + 1;
                    count_ -= z + 1;
                    return q + static_cast<uint32_t>(z);
                }
            }
            q += static_cast<uint32_t>(count_);
            cache_ = 0;
            count_ = 0;
            refill();
            if (phantom_ > 64) return q;  // past the end: overrun() is now true
        }
    }

    // n Rice-coded values of parameter k (<= 30), zigzag-decoded, handed to put in turn (a
    // predictor: decoding and prediction in one loop, so their two dependency chains overlap).
    // The reader's state lives in locals here (put's int32 stores could alias the members).
    template <typename Put>
    void rice(int64_t n, int k, Put &put) {
        uint64_t cache = cache_;
        int count = count_;
        const uint8_t *p = p_;
        for (int64_t i = 0; i < n; i++) {
            if (count < 40 && end_ - p >= 8) {
                uint64_t v;
                std::memcpy(&v, p, 8);
                cache |= __builtin_bswap64(v) >> count;
                p += (63 - count) >> 3;
                count |= 56;
            }
            const int z = __builtin_clzll(cache | 1);
            uint32_t u;
            if (z + 1 + k <= count) {
                const uint64_t t = (cache << z) << 1;
                u = (static_cast<uint32_t>(z) << k) | static_cast<uint32_t>((t >> 1) >> (63 - k));
                cache <<= z + 1 + k;
                count -= z + 1 + k;
            } else {  // a long quotient, or the clip's last bytes: the general path
                cache_ = cache, count_ = count, p_ = p;
                const uint32_t q = unary();
                u = (q << k) | bits(k);
                cache = cache_, count = count_, p = p_;
                if (overrun()) break;
            }
            put(static_cast<int32_t>((u >> 1) ^ (0u - (u & 1))));
        }
        cache_ = cache, count_ = count, p_ = p;
    }

    void align() { bits(count_ & 7); }  // to the next byte boundary (count_ mod 8 = bits left)
    bool overrun() const { return phantom_ > count_; }
    size_t consumed_bytes() const {  // whole bytes read since the start (after align())
        return static_cast<size_t>((p_ - begin_) * 8 + phantom_ - count_) / 8;
    }

private:
    const uint8_t *begin_, *p_, *end_;
    uint64_t cache_ = 0;
    int count_ = 0;
    int phantom_ = 0;
};

struct StreamInfo {
    int min_block = 0, max_block = 0, rate = 0, channels = 0, bits = 0;
    uint64_t total = 0;
    size_t audio_at = 0;                                 // the first frame's byte offset
    std::vector<std::pair<uint64_t, uint64_t>> points;   // seek table: (sample, byte offset)
};

uint32_t be(const uint8_t *p, int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}

AudioResult parse_stream(const uint8_t *data, size_t size, StreamInfo &si) {
    size_t at = 0;
    if (size >= 10 && std::memcmp(data, "ID3", 3) == 0) {
        at = 10 + ((static_cast<size_t>(data[6]) << 21) | (data[7] << 14) | (data[8] << 7) | data[9]) +
             ((data[5] & 0x10) ? 10 : 0);
    }
    at += 4;  // "fLaC" (audio_container checked it)
    bool last = false, have_info = false;
    while (!last) {
        if (at + 4 > size) return fail(AudioStatus::kDamaged, "its FLAC metadata runs past the end");
        last = data[at] & 0x80;
        const int type = data[at] & 0x7f;
        const size_t n = be(data + at + 1, 3);
        const uint8_t *b = data + at + 4;
        if (n > size - at - 4) return fail(AudioStatus::kDamaged, "a FLAC metadata block runs past the end");
        if (!have_info && type != 0)
            return fail(AudioStatus::kDamaged, "its FLAC metadata does not start with STREAMINFO");
        if (type == 0) {
            if (n < 34) return fail(AudioStatus::kDamaged, "its FLAC STREAMINFO is short");
            si.min_block = static_cast<int>(be(b, 2));
            si.max_block = static_cast<int>(be(b + 2, 2));
            si.rate = static_cast<int>(be(b + 10, 3) >> 4);
            si.channels = ((b[12] >> 1) & 7) + 1;
            si.bits = (((b[12] & 1) << 4) | (b[13] >> 4)) + 1;
            si.total = (static_cast<uint64_t>(b[13] & 0x0f) << 32) | be(b + 14, 4);
            have_info = true;
        } else if (type == 3) {
            for (size_t k = 0; k + 18 <= n; k += 18) {
                const uint64_t s = (static_cast<uint64_t>(be(b + k, 4)) << 32) | be(b + k + 4, 4);
                const uint64_t o = (static_cast<uint64_t>(be(b + k + 8, 4)) << 32) | be(b + k + 12, 4);
                if (s != ~0ull) si.points.emplace_back(s, o);
            }
        } else if (type == 127) {
            return fail(AudioStatus::kDamaged, "a FLAC metadata block of the invalid type 127");
        }
        at += 4 + n;
    }
    si.audio_at = at;
    if (si.rate < 1 || si.max_block < 16 || si.min_block > si.max_block)
        return fail(AudioStatus::kDamaged, "its FLAC STREAMINFO says " + std::to_string(si.rate) +
                                               " Hz, blocks of " + std::to_string(si.min_block) + "-" +
                                               std::to_string(si.max_block));
    if (si.bits != 8 && si.bits != 16 && si.bits != 24)
        return fail(AudioStatus::kUnsupported, "FLAC of " + std::to_string(si.bits) + "-bit samples");
    if (si.total == 0) return fail(AudioStatus::kUnsupported, "FLAC with no sample count");
    return {};
}

struct Header {
    size_t pos = 0, length = 0;  // the frame's byte offset; the header's bytes (with CRC-8)
    uint64_t sample = 0;         // the frame's first sample
    int block = 0, assignment = 0;
};

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
    const uint8_t first = p[at++];
    int extra;
    uint64_t number;
    if (first < 0x80) { extra = 0; number = first; }
    else if ((first & 0xE0) == 0xC0) { extra = 1; number = first & 0x1F; }
    else if ((first & 0xF0) == 0xE0) { extra = 2; number = first & 0x0F; }
    else if ((first & 0xF8) == 0xF0) { extra = 3; number = first & 0x07; }
    else if ((first & 0xFC) == 0xF8) { extra = 4; number = first & 0x03; }
    else if ((first & 0xFE) == 0xFC) { extra = 5; number = first & 0x01; }
    else if (first == 0xFE && variable) { extra = 6; number = 0; }
    else return false;
    if (size - pos < at + extra + 3) return false;
    for (int i = 0; i < extra; i++) {
        const uint8_t c = p[at++];
        if ((c & 0xC0) != 0x80) return false;
        number = (number << 6) | (c & 0x3F);
    }
    int block;
    if (block_code == 1) block = 192;
    else if (block_code <= 5) block = 576 << (block_code - 2);
    else if (block_code == 6) block = p[at++] + 1;
    else if (block_code == 7) { block = static_cast<int>(be(p + at, 2)) + 1; at += 2; }
    else block = 256 << (block_code - 8);
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

// A frame header at or before the crop's first sample, found without decoding: the seek
// table's point if any, then a search over byte offsets (interpolated by sample), then a walk
// over the headers of the last few frames.
Header seek_frame(const uint8_t *data, size_t size, const StreamInfo &si, uint64_t target) {
    Header lo;
    lo.pos = si.audio_at;
    for (const auto &pt : si.points) {
        Header h;
        if (pt.first <= target && pt.first > lo.sample && pt.second < size - si.audio_at &&
            parse_header(data, size, si.audio_at + pt.second, si, h) && h.sample == pt.first)
            lo = h;
    }
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

// Predictors: each takes the residuals in order and writes s[i] = residual + prediction.
// FIXED (orders 0-4) in 64-bit arithmetic.
template <int Order>
struct Fixed {
    int32_t *s;
    int64_t i = Order;
    void operator()(int32_t r) {
        int64_t p = 0;
        if constexpr (Order == 1) p = s[i - 1];
        if constexpr (Order == 2) p = 2 * static_cast<int64_t>(s[i - 1]) - s[i - 2];
        if constexpr (Order == 3) p = 3 * (static_cast<int64_t>(s[i - 1]) - s[i - 2]) + s[i - 3];
        if constexpr (Order == 4)
            p = 4 * (static_cast<int64_t>(s[i - 1]) + s[i - 3]) - 6 * static_cast<int64_t>(s[i - 2]) - s[i - 4];
        s[i] = static_cast<int32_t>(p + r);
        i++;
    }
};

// LPC of one order, unrolled at compile time. Acc uint32_t: a 32-bit sum, used where the
// spec's bound says it cannot overflow (it wraps, never UB, on streams that break it);
// int64_t otherwise. The newest sample stays in a register and its product is added last, so
// one sample's chain to the next is a multiply, two adds and a shift.
template <int Order, typename Acc>
struct Lpc {
    int32_t *s;
    int shift;
    Acc c[Order];
    Acc prev;
    int64_t i = Order;
    Lpc(int32_t *samples, const int32_t *coef, int sh) : s(samples), shift(sh) {
        for (int j = 0; j < Order; j++) c[j] = static_cast<Acc>(coef[j]);
        prev = static_cast<Acc>(s[Order - 1]);
    }
    void operator()(int32_t r) {
        Acc sum = 0;
        for (int j = Order - 1; j >= 1; j--) sum += c[j] * static_cast<Acc>(s[i - 1 - j]);
        sum += c[0] * prev;
        int32_t v;
        if constexpr (sizeof(Acc) == 4) {
            v = static_cast<int32_t>(static_cast<uint32_t>(r) +
                                     static_cast<uint32_t>(static_cast<int32_t>(sum) >> shift));
        } else {
            v = static_cast<int32_t>(r + (sum >> shift));
        }
        s[i++] = v;
        prev = static_cast<Acc>(v);
    }
};

// The residual of a subframe of n samples after `order` warm-up samples, each handed to put.
template <typename Put>
std::string residual(BitReader &br, int64_t n, int order, Put &put) {
    const uint32_t method = br.bits(2);
    if (method > 1) return "a residual of the reserved coding method " + std::to_string(method);
    const int pbits = method ? 5 : 4;
    const uint32_t escape = method ? 31 : 15;
    const int porder = static_cast<int>(br.bits(4));
    const int64_t per = n >> porder;
    if ((per << porder) != n || per < order) return "a residual's partitions do not fit its block";
    for (int64_t p = 0; p < (int64_t{1} << porder); p++) {
        const int64_t count = per - (p == 0 ? order : 0);
        const uint32_t k = br.bits(pbits);
        if (k == escape) {
            const int raw = static_cast<int>(br.bits(5));
            for (int64_t i = 0; i < count; i++) put(raw ? br.sbits(raw) : 0);
        } else {
            br.rice(count, static_cast<int>(k), put);
        }
        if (br.overrun()) return "a residual runs past the clip's end";
    }
    return {};
}

template <int Order>
std::string fixed_subframe(BitReader &br, int32_t *s, int64_t n) {
    Fixed<Order> put{s};
    return residual(br, n, Order, put);
}

template <int Order, typename Acc>
std::string lpc_subframe(BitReader &br, int32_t *s, int64_t n, const int32_t *coef, int shift) {
    Lpc<Order, Acc> put(s, coef, shift);
    return residual(br, n, Order, put);
}

using LpcFn = std::string (*)(BitReader &, int32_t *, int64_t, const int32_t *, int);

template <typename Acc, int... Orders>
LpcFn lpc_for(int order, std::integer_sequence<int, Orders...>) {
    static constexpr LpcFn table[] = {&lpc_subframe<Orders + 1, Acc>...};
    return table[order - 1];
}

// An LPC subframe's residual and prediction: a 32-bit sum where the spec's bound (sample bits +
// coefficient precision + log2(order) <= 32) says it cannot overflow.
std::string lpc(BitReader &br, int32_t *s, int64_t n, const int32_t *coef, int order, int shift,
                int bits, int precision) {
    int log2 = 0;
    while ((1 << log2) < order) log2++;
    const auto orders = std::make_integer_sequence<int, 32>{};
    const LpcFn fn = bits + precision + log2 <= 32 ? lpc_for<uint32_t>(order, orders)
                                                   : lpc_for<int64_t>(order, orders);
    return fn(br, s, n, coef, shift);
}

std::string fixed(BitReader &br, int32_t *s, int64_t n, int order) {
    switch (order) {
    case 0: return fixed_subframe<0>(br, s, n);
    case 1: return fixed_subframe<1>(br, s, n);
    case 2: return fixed_subframe<2>(br, s, n);
    case 3: return fixed_subframe<3>(br, s, n);
    default: return fixed_subframe<4>(br, s, n);
    }
}

class FrameDecoder {
public:
    explicit FrameDecoder(const StreamInfo &si)
        : si_(si), samples_(static_cast<size_t>(si.max_block) * si.channels) {}

    const int32_t *channel(int c) const { return samples_.data() + static_cast<size_t>(c) * si_.max_block; }

    // Decodes the frame h heads; its end (the byte after its CRC-16) in end, or why not.
    std::string decode(const uint8_t *data, size_t size, const Header &h, size_t &end) {
        BitReader br(data + h.pos + h.length, data + size);
        for (int c = 0; c < si_.channels; c++) {
            const bool side = (h.assignment == 8 && c == 1) || (h.assignment == 9 && c == 0) ||
                              (h.assignment == 10 && c == 1);
            int32_t *dst = samples_.data() + static_cast<size_t>(c) * si_.max_block;
            std::string why = subframe(br, dst, h.block, si_.bits + side);
            if (!why.empty()) return why + " in channel " + std::to_string(c);
        }
        br.align();
        const uint32_t stored = br.bits(16);
        if (br.overrun()) return "it ends past the clip's end";
        end = h.pos + h.length + br.consumed_bytes();
        if (crc16(data + h.pos, end - h.pos - 2) != stored) return "its CRC-16 does not match";
        decorrelate(h);
        return {};
    }

private:
    std::string subframe(BitReader &br, int32_t *s, int64_t n, int bits) {
        const uint32_t head = br.bits(8);
        if (head & 0x80) return "a subframe's padding bit is set";
        const int type = static_cast<int>(head >> 1) & 0x3F;
        int wasted = 0;
        if (head & 1) {
            const uint32_t k = br.unary() + 1;
            if (k >= static_cast<uint32_t>(bits)) return "a subframe wastes all its bits";
            wasted = static_cast<int>(k);
            bits -= wasted;
        }
        std::string why;
        if (type == 0) {
            const int32_t v = br.sbits(bits);
            std::fill(s, s + n, v);
        } else if (type == 1) {
            for (int64_t i = 0; i < n; i++) s[i] = br.sbits(bits);
        } else if (type >= 8 && type <= 12) {
            const int order = type - 8;
            if (order > n) return "a FIXED subframe's order exceeds its block";
            for (int i = 0; i < order; i++) s[i] = br.sbits(bits);
            why = fixed(br, s, n, order);
        } else if (type >= 32) {
            const int order = type - 31;
            if (order > n) return "an LPC subframe's order exceeds its block";
            for (int i = 0; i < order; i++) s[i] = br.sbits(bits);
            const int precision = static_cast<int>(br.bits(4)) + 1;
            if (precision == 16) return "an LPC subframe's coefficient precision is invalid";
            const int shift = br.sbits(5);
            if (shift < 0) return "an LPC subframe's shift is negative";
            int32_t coef[32];
            for (int i = 0; i < order; i++) coef[i] = br.sbits(precision);
            why = lpc(br, s, n, coef, order, shift, bits, precision);
        } else {
            return "a subframe of the reserved type " + std::to_string(type);
        }
        if (!why.empty()) return why;
        if (br.overrun()) return "a subframe runs past the clip's end";
        if (wasted)
            for (int64_t i = 0; i < n; i++) s[i] = static_cast<int32_t>(static_cast<uint32_t>(s[i]) << wasted);
        return {};
    }

    void decorrelate(const Header &h) {
        if (h.assignment < 8) return;
        int32_t *a = samples_.data(), *b = samples_.data() + si_.max_block;
        for (int i = 0; i < h.block; i++) {
            const int64_t x = a[i], y = b[i];
            if (h.assignment == 8) {
                b[i] = static_cast<int32_t>(x - y);  // right = left - side
            } else if (h.assignment == 9) {
                a[i] = static_cast<int32_t>(x + y);  // left = side + right
            } else {
                const int64_t mid = static_cast<int64_t>(static_cast<uint64_t>(x) << 1) | (y & 1);
                a[i] = static_cast<int32_t>((mid + y) >> 1);
                b[i] = static_cast<int32_t>((mid - y) >> 1);
            }
        }
    }

    const StreamInfo &si_;
    std::vector<int32_t> samples_;
};

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
    if (!out.mono && out.channels != si.channels && si.channels != 1)
        return fail(AudioStatus::kDamaged, "has " + std::to_string(si.channels) +
                                               " channels, the loader wants " + std::to_string(out.channels));
    if (out.mono && si.channels >= kMonoMixMax)
        return fail(AudioStatus::kUnsupported, "a mix of " + std::to_string(si.channels) +
                                                   " channels to mono (numpy sums 8 or more pairwise)");
    if (si.audio_at + 1 < size && !(data[si.audio_at + 1] & 1) && si.min_block != si.max_block)
        return fail(AudioStatus::kUnsupported, "FLAC of fixed blocks whose STREAMINFO gives a "
                                               "range of block sizes");
    const uint64_t first = static_cast<uint64_t>(start);
    if (first >= si.total || frames == 0) return r;
    const uint64_t last = std::min<uint64_t>(si.total, first + static_cast<uint64_t>(frames));
    FrameDecoder decoder(si);
    std::vector<float> wave(static_cast<size_t>(si.max_block) * si.channels);
    const float scale = 1.0f / static_cast<float>(1 << (si.bits - 1));
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
            if (from_seek) {  // the search landed on a false header: from the first frame
                from_seek = false;
                pos = si.audio_at;
                expect = 0;
                continue;
            }
            return fail(AudioStatus::kDamaged, "its FLAC frame at byte " + std::to_string(pos) +
                                                   " (sample " + std::to_string(expect) + ") is damaged: " + why);
        }
        from_seek = false;
        const uint64_t lo = std::max(first, h.sample);
        const uint64_t hi = std::min(last, h.sample + static_cast<uint64_t>(h.block));
        if (lo < hi) {
            const int64_t n = static_cast<int64_t>(hi - lo), off = static_cast<int64_t>(lo - h.sample);
            const int64_t at = static_cast<int64_t>(lo - first);
            if (out.mono && si.channels > 1) {  // mixed from the scaled channels
                for (int c = 0; c < si.channels; c++) {
                    const int32_t *src = decoder.channel(c) + off;
                    float *dst = wave.data() + static_cast<size_t>(c) * si.max_block;
                    for (int64_t i = 0; i < n; i++) dst[i] = static_cast<float>(src[i]) * scale;
                }
                audio_store(wave.data(), n, si.channels, 1, si.max_block, out, at);
            } else {  // scaled straight into each output channel
                for (int c = 0; c < (out.mono ? 1 : out.channels); c++) {
                    const int32_t *src = decoder.channel(si.channels == 1 ? 0 : c) + off;
                    float *dst = out.data + at * out.frame_stride + c * out.channel_stride;
                    const int64_t step = out.frame_stride;
                    if (step == 1) {
                        for (int64_t i = 0; i < n; i++) dst[i] = static_cast<float>(src[i]) * scale;
                    } else {
                        for (int64_t i = 0; i < n; i++) dst[i * step] = static_cast<float>(src[i]) * scale;
                    }
                }
            }
            r.frames += n;
        }
        expect = h.sample + static_cast<uint64_t>(h.block);
        pos = end;
    }
    return r;
}

}  // namespace fl
