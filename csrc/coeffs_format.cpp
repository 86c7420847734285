// The coeffs record's bytes: geometry, the writer, and the checked reader of header and segments.
#include <algorithm>
#include <cstring>

#include "coeffs_internal.h"

namespace fl::coeffs {

const uint8_t kMagic[6] = {'F', 'L', 'C', 'O', 'E', 'F'};
const int kZigzag[64] = {0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,
                         12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6,  7,  14, 21, 28,
                         35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
                         58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63};

namespace {
constexpr uint8_t kLayerNibbles = 1;
// A block whose nibble positions hold this many values outside -7..7 stores them all as bytes.
constexpr int kWideEscapes = 4;

int ceil_div(int a, int b) { return (a + b - 1) / b; }

void put32(std::vector<uint8_t> &b, uint32_t v) {
    for (int i = 0; i < 4; ++i) b.push_back(uint8_t(v >> (8 * i)));
}

// Calls f(component, block row, block column) for a segment's blocks in stored order.
template <class F>
void for_segment_blocks(const Geometry &g, int row, int seg, F &&f) {
    const int m0 = seg * g.seg_mcus, m1 = std::min(g.mcu_cols, m0 + g.seg_mcus);
    for (int m = m0; m < m1; ++m)
        for (int ci = 0; ci < g.ncomp; ++ci) {
            const Component &k = g.comps[ci];
            for (int yy = 0; yy < k.v; ++yy)
                for (int xx = 0; xx < k.h; ++xx) f(ci, row * k.v + yy, m * k.h + xx);
        }
}

// Streams of one segment, written through raw pointers into buffers sized for the worst case
// (3 bytes a value, 9 mask bytes and 32 nibble bytes a block).
struct SegmentWriter {
    std::vector<uint8_t> mask, nib, esc;
    uint8_t *m = nullptr, *e = nullptr;
    size_t nibbles = 0;
    void start(size_t blocks) {
        if (mask.size() < blocks * 9) mask.resize(blocks * 9);
        if (nib.size() < blocks * 32 + 1) nib.resize(blocks * 32 + 1);
        if (esc.size() < blocks * 192) esc.resize(blocks * 192);
        std::memset(nib.data(), 0, blocks * 32 + 1);
        m = mask.data();
        e = esc.data();
        nibbles = 0;
    }
    size_t mask_bytes() const { return size_t(m - mask.data()); }
    size_t nib_bytes() const { return (nibbles + 1) / 2; }
    size_t esc_bytes() const { return size_t(e - esc.data()); }
    void byte_value(int v) {
        if (v >= -127 && v <= 127) {
            *e++ = uint8_t(int8_t(v));
            return;
        }
        e[0] = 0x80;
        e[1] = uint8_t(v & 255);
        e[2] = uint8_t((v >> 8) & 255);
        e += 3;
    }
    void block(const int16_t *blk, int16_t &pred, int nibble_from) {
        int vals[64];
        vals[0] = int16_t(uint16_t(blk[0] - pred));  // wraps: the decoder adds modulo 2^16 too
        pred = blk[0];
        uint64_t nz = vals[0] != 0;
        for (int k = 1; k < 64; ++k) {
            vals[k] = blk[kZigzag[k]];
            nz |= uint64_t(vals[k] != 0) << k;
        }
        const int n = nz ? 64 - __builtin_clzll(nz) : 0;
        const uint64_t high = nibble_from >= 64 ? 0 : nz & ~((uint64_t(1) << nibble_from) - 1) & ~uint64_t(1);
        int escapes = 0;
        for (uint64_t h = high; h; h &= h - 1) {
            const int v = vals[__builtin_ctzll(h)];
            escapes += v < -7 || v > 7;
        }
        const bool wide = escapes >= kWideEscapes;
        *m++ = uint8_t(n | (wide ? 128 : 0));
        for (int by = 0; by < (n + 7) / 8; ++by) *m++ = uint8_t(nz >> (8 * by));
        for (uint64_t bits = nz; bits; bits &= bits - 1) {
            const int k = __builtin_ctzll(bits);
            const int v = vals[k];
            if (!wide && ((high >> k) & 1)) {
                const bool fits = v >= -7 && v <= 7;
                nib[nibbles >> 1] = uint8_t(nib[nibbles >> 1] | (((fits ? unsigned(v) : 8u) & 15) << (4 * (nibbles & 1))));
                ++nibbles;  // 8 (= -8) escapes to the byte stream
                if (fits) continue;
            }
            byte_value(v);
        }
    }
};
}  // namespace

std::string derive_geometry(Geometry &g) {
    if (g.width < 1 || g.height < 1 || g.width > 65535 || g.height > 65535)
        return "image size out of range";
    if (double(g.width) * g.height > kMaxPixels) return "image exceeds the decompression-bomb limit";
    if (g.ncomp != 1 && g.ncomp != 3 && g.ncomp != 4) return "not 1, 3 or 4 components";
    if (g.seg_mcus < 1 || g.nibble_from < 1 || g.nibble_from > 64) return "layout parameters out of range";
    g.hmax = g.vmax = 1;
    for (int i = 0; i < g.ncomp; ++i) {
        if (g.ncomp == 1) g.comps[i].h = g.comps[i].v = 1;  // libjpeg ignores a lone component's
        Component &k = g.comps[i];
        if (k.h < 1 || k.h > 4 || k.v < 1 || k.v > 4) return "sampling factors outside 1..4";
        g.hmax = std::max(g.hmax, k.h);
        g.vmax = std::max(g.vmax, k.v);
    }
    int blocks = 0;
    for (int i = 0; i < g.ncomp; ++i) {
        if (g.hmax % g.comps[i].h || g.vmax % g.comps[i].v)
            return "fractional sampling factors (libjpeg does not decode them either)";
        blocks += g.comps[i].h * g.comps[i].v;
    }
    if (g.ncomp > 1 && blocks > 10) return "more than 10 blocks an MCU (JPEG's limit)";
    g.mcu_cols = ceil_div(g.width, 8 * g.hmax);
    g.mcu_rows = ceil_div(g.height, 8 * g.vmax);
    g.segs_per_row = ceil_div(g.mcu_cols, g.seg_mcus);
    g.blocks_per_mcu = 0;
    for (int i = 0; i < g.ncomp; ++i) {
        Component &k = g.comps[i];
        k.rh = g.hmax / k.h;
        k.rv = g.vmax / k.v;
        k.bw = g.mcu_cols * k.h;
        k.bh = g.mcu_rows * k.v;
        k.dw = ceil_div(g.width * k.h, g.hmax);
        k.dh = ceil_div(g.height * k.v, g.vmax);
        g.blocks_per_mcu += k.h * k.v;
    }
    return {};
}

void write_record(const Coefficients &c, std::vector<uint8_t> &out) {
    const Geometry &g = c.geo;
    out.insert(out.end(), kMagic, kMagic + 6);
    out.push_back(uint8_t(kVersion));
    out.push_back(kLayerNibbles);
    put32(out, uint32_t(g.width));
    put32(out, uint32_t(g.height));
    out.push_back(uint8_t(g.ncomp));
    out.push_back(uint8_t(g.color));
    out.push_back(uint8_t(g.nibble_from));
    out.push_back(uint8_t(g.seg_mcus));
    out.push_back(uint8_t(g.orientation));
    out.insert(out.end(), 3, 0);
    for (int i = 0; i < g.ncomp; ++i) {
        out.push_back(uint8_t(g.comps[i].h));
        out.push_back(uint8_t(g.comps[i].v));
        for (int j = 0; j < 64; ++j) {
            out.push_back(uint8_t(g.comps[i].quant[j] & 255));
            out.push_back(uint8_t(g.comps[i].quant[j] >> 8));
        }
    }
    const int nseg = g.mcu_rows * g.segs_per_row;
    put32(out, uint32_t(nseg));
    const size_t table = out.size();
    out.resize(table + 4 * size_t(nseg + 1));
    const size_t payload = out.size();
    SegmentWriter w;
    for (int row = 0; row < g.mcu_rows; ++row)
        for (int seg = 0; seg < g.segs_per_row; ++seg) {
            const uint32_t at = uint32_t(out.size() - payload);
            std::memcpy(&out[table + 4 * size_t(row * g.segs_per_row + seg)], &at, 4);
            const int mcus = std::min(g.mcu_cols, (seg + 1) * g.seg_mcus) - seg * g.seg_mcus;
            w.start(size_t(mcus) * g.blocks_per_mcu);
            int16_t pred[kMaxComponents] = {0, 0, 0, 0};
            for_segment_blocks(g, row, seg, [&](int ci, int by, int bx) {
                const Component &k = g.comps[ci];
                w.block(&c.blocks[ci][(size_t(by) * k.bw + bx) * 64], pred[ci], g.nibble_from);
            });
            put32(out, uint32_t(w.mask_bytes()));
            put32(out, uint32_t(w.nib_bytes()));
            out.insert(out.end(), w.mask.data(), w.mask.data() + w.mask_bytes());
            out.insert(out.end(), w.nib.data(), w.nib.data() + w.nib_bytes());
            out.insert(out.end(), w.esc.data(), w.esc.data() + w.esc_bytes());
        }
    const uint32_t end = uint32_t(out.size() - payload);
    std::memcpy(&out[table + 4 * size_t(nseg)], &end, 4);
    out.insert(out.end(), kPadding, 0);
}

bool looks_like_record(const uint8_t *data, size_t size) {
    return size >= 6 && std::memcmp(data, kMagic, 6) == 0;
}

std::string open_record(const uint8_t *data, size_t size, View &view) {
    if (!looks_like_record(data, size)) return "not a coeffs record (no FLCOEF magic)";
    if (size < kFixedHeader) return "record is truncated inside its header";
    if (data[6] != kVersion)
        return "coeffs record version " + std::to_string(data[6]) + " (this fastloader reads version " +
               std::to_string(kVersion) + "; upgrade fastloader)";
    if (data[7] != kLayerNibbles) return "unknown coeffs layer " + std::to_string(data[7]);
    Geometry &g = view.geo;
    g = Geometry{};
    const uint32_t w = rd32(data + 8), h = rd32(data + 12);
    if (w < 1 || h < 1 || w > 65535 || h > 65535) return "record header: image size out of range";
    g.width = int(w);
    g.height = int(h);
    g.ncomp = data[16];
    if (data[17] > uint8_t(Color::kYcck)) return "record header: unknown colour space";
    g.color = Color(data[17]);
    g.nibble_from = data[18];
    g.seg_mcus = data[19];
    g.orientation = data[20] <= 8 ? data[20] : 0;
    const int expected = g.color == Color::kGrey ? 1 : g.color >= Color::kCmyk ? 4 : 3;
    if (g.ncomp != expected) return "record header: colour space and components disagree";
    size_t at = kFixedHeader;
    if (size < at + kComponentHeader * size_t(g.ncomp) + 4) return "record is truncated inside its header";
    for (int i = 0; i < g.ncomp; ++i, at += kComponentHeader) {
        g.comps[i].h = data[at];
        g.comps[i].v = data[at + 1];
        for (int j = 0; j < 64; ++j) g.comps[i].quant[j] = rd16(data + at + 2 + 2 * j);
    }
    if (g.ncomp == 1 && (g.comps[0].h != 1 || g.comps[0].v != 1)) return "record header: bad sampling factors";
    if (std::string why = derive_geometry(g); !why.empty()) return "record header: " + why;
    const uint64_t nseg = uint64_t(g.mcu_rows) * uint64_t(g.segs_per_row);
    if (rd32(data + at) != nseg) return "record header: segment count disagrees with the image size";
    at += 4;
    if (size - at < 4 * (nseg + 1) + kPadding) return "record is truncated inside its segment table";
    view.offsets = data + at;
    view.payload = data + at + 4 * (nseg + 1);
    view.payload_size = size - (at + 4 * (nseg + 1)) - kPadding;
    uint32_t prev = 0;
    if (rd32(view.offsets) != 0) return "segment table: first offset is not 0";
    for (uint64_t i = 1; i <= nseg; ++i) {
        const uint32_t o = rd32(view.offsets + 4 * i);
        if (o < prev + 8) return "segment table: offsets out of order or a segment shorter than its header";
        prev = o;
    }
    if (prev != view.payload_size) return "segment table: the payload's length disagrees with the table (truncated?)";
    return {};
}

namespace {

struct Cursor {
    const uint8_t *m, *m_end;  // mask stream
    const uint8_t *nib;        // nibble stream
    size_t ni, n_nibbles;      // next nibble, nibbles available
    const uint8_t *e, *e_end;  // byte stream
};

template <bool kChecked>
inline bool byte_value(Cursor &c, int &v) {
    if (kChecked && c.e >= c.e_end) return false;
    v = int8_t(*c.e++);
    if (__builtin_expect(v == -128, 0)) {
        if (kChecked && c.e_end - c.e < 2) return false;
        v = int16_t(rd16(c.e));
        c.e += 2;
    }
    return true;
}

// One block; kChecked: the streams may end inside it, so every read is checked.
template <bool kChecked>
inline bool block(Cursor &c, int nibble_from, int16_t &pred, int16_t *blk) {
    std::memset(blk, 0, 128);
    if (kChecked && c.m >= c.m_end) return false;
    const int nb = *c.m++;
    const int n = nb & 127;
    if (n > 64) return false;
    const int mbytes = (n + 7) >> 3;
    if (kChecked && c.m_end - c.m < mbytes) return false;
    uint64_t m = 0;
    std::memcpy(&m, c.m, 8);  // within the record: the padding follows the payload
    if (n < 64) m &= (uint64_t(1) << n) - 1;
    c.m += mbytes;
    int v;
    if (m & 1) {
        if (!byte_value<kChecked>(c, v)) return false;
        pred = int16_t(uint16_t(pred + v));
        m &= m - 1;
    }
    blk[0] = pred;
    const uint64_t low = nibble_from >= 64 ? m : m & ((uint64_t(1) << nibble_from) - 1);
    uint64_t lo = low;
    m &= ~low;
    while (lo) {
        const int k = __builtin_ctzll(lo);
        lo &= lo - 1;
        if (!byte_value<kChecked>(c, v)) return false;
        blk[kZigzag[k]] = int16_t(v);
    }
    if (nb & 128) {
        while (m) {
            const int k = __builtin_ctzll(m);
            m &= m - 1;
            if (!byte_value<kChecked>(c, v)) return false;
            blk[kZigzag[k]] = int16_t(v);
        }
        return true;
    }
    while (m) {
        const int k = __builtin_ctzll(m);
        m &= m - 1;
        if (kChecked && c.ni >= c.n_nibbles) return false;
        // A sign-extended nibble; -8 escapes to the byte stream.
        v = int(uint32_t(c.nib[c.ni >> 1]) << (28 - 4 * (c.ni & 1))) >> 28;
        ++c.ni;
        if (__builtin_expect(v == -8, 0) && !byte_value<kChecked>(c, v)) return false;
        blk[kZigzag[k]] = int16_t(v);
    }
    return true;
}

// A block's reads stay inside its streams when this much of each is left.
constexpr ptrdiff_t kMaxMaskBytes = 9, kMaxValueBytes = 3 * 64;
constexpr size_t kMaxNibbles = 64;

}  // namespace

bool decode_segment(const View &view, int row, int seg, int16_t *blocks) {
    const Geometry &g = view.geo;
    const size_t index = size_t(row) * g.segs_per_row + seg;
    const uint32_t begin = rd32(view.offsets + 4 * index), end = rd32(view.offsets + 4 * index + 4);
    const uint8_t *p = view.payload + begin;  // open_record checked begin + 8 <= end <= size
    const uint64_t mask_len = rd32(p), nib_len = rd32(p + 4);
    if (8 + mask_len + nib_len > end - begin) return false;
    Cursor c;
    c.m = p + 8;
    c.m_end = c.m + mask_len;
    c.nib = c.m_end;
    c.ni = 0;
    c.n_nibbles = 2 * nib_len;
    c.e = c.nib + nib_len;
    c.e_end = view.payload + end;
    int16_t pred[kMaxComponents] = {0, 0, 0, 0};
    const int m0 = seg * g.seg_mcus, m1 = std::min(g.mcu_cols, m0 + g.seg_mcus);
    int16_t *blk = blocks;
    for (int mcu = m0; mcu < m1; ++mcu)
        for (int ci = 0; ci < g.ncomp; ++ci)
            for (int b = 0; b < g.comps[ci].h * g.comps[ci].v; ++b, blk += 64) {
                const bool room = c.m_end - c.m >= kMaxMaskBytes && c.e_end - c.e >= kMaxValueBytes &&
                                  c.n_nibbles - c.ni >= kMaxNibbles;
                const bool ok = room ? block<false>(c, g.nibble_from, pred[ci], blk)
                                     : block<true>(c, g.nibble_from, pred[ci], blk);
                if (!ok) return false;
            }
    // Every stream used up exactly: what a damaged segment rarely manages by chance.
    return c.m == c.m_end && c.e == c.e_end && (c.ni + 1) / 2 == nib_len;
}

}  // namespace fl::coeffs
