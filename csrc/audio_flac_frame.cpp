// FLAC's frame layer (RFC 9639 section 9.2-9.3), written from the specification: the subframes
// of one frame (CONSTANT, VERBATIM, FIXED and LPC, with wasted bits) read by an MSB-first bit
// reader, Rice residuals decoded in one loop with the prediction, stereo decorrelation, and the
// frame's CRC-16. The stream layer (audio_flac.cpp) finds the frame and checks its header.
// Every read is bounded by the clip's bytes: damaged bytes give a message, never a read past
// the end.
#include <algorithm>
#include <cstring>
#include <utility>

#include "audio_flac_internal.h"

namespace fl {
namespace flac {

namespace {

struct Crc16Tables {
    uint16_t c16[8][256];  // c16[k][x]: byte x followed by k zero bytes (slicing by 8)
    Crc16Tables() {
        for (int x = 0; x < 256; x++) {
            uint32_t b = static_cast<uint32_t>(x) << 8;
            for (int i = 0; i < 8; i++) b = (b & 0x8000) ? ((b << 1) ^ 0x8005) : (b << 1);
            c16[0][x] = static_cast<uint16_t>(b);
        }
        for (int k = 1; k < 8; k++)
            for (int x = 0; x < 256; x++) {
                const uint16_t prev = c16[k - 1][x];
                c16[k][x] = static_cast<uint16_t>((prev << 8) ^ c16[0][prev >> 8]);
            }
    }
};

uint16_t crc16(const uint8_t *p, size_t n) {
    static const Crc16Tables tables;
    const auto &t = tables.c16;
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

// One subframe of n samples at `bits` bits (the side channel's one more) into s.
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

// Left/right from the coded pair (assignments 8-10: left-side, side-right, mid-side).
void decorrelate(int32_t *a, int32_t *b, int block, int assignment) {
    if (assignment < 8) return;
    for (int i = 0; i < block; i++) {
        const int64_t x = a[i], y = b[i];
        if (assignment == 8) {
            b[i] = static_cast<int32_t>(x - y);  // right = left - side
        } else if (assignment == 9) {
            a[i] = static_cast<int32_t>(x + y);  // left = side + right
        } else {
            const int64_t mid = static_cast<int64_t>(static_cast<uint64_t>(x) << 1) | (y & 1);
            a[i] = static_cast<int32_t>((mid + y) >> 1);
            b[i] = static_cast<int32_t>((mid - y) >> 1);
        }
    }
}

}  // namespace

std::string FrameDecoder::decode(const uint8_t *data, size_t size, const Header &h, size_t &end) {
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
    decorrelate(samples_.data(), samples_.data() + si_.max_block, h.block, h.assignment);
    return {};
}

}  // namespace flac
}  // namespace fl
