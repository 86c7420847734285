// Prototype record codec (issue 30): coefficient extraction, two entropy layers, decoders.
#include "codec.h"

#include <cstdio>  // jpeglib.h needs FILE and size_t first
#include <jpeglib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <csetjmp>

#include "recon.h"

namespace proto {

static const int kZigzag[64] = {
    0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,  12, 19, 26, 33, 40, 48,
    41, 34, 27, 20, 13, 6,  7,  14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23,
    30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63};

// ---------------------------------------------------------------- libjpeg extraction

namespace {
struct ErrMgr {
  jpeg_error_mgr pub;
  jmp_buf jump;
};
void on_error(j_common_ptr cinfo) {
  longjmp(reinterpret_cast<ErrMgr*>(cinfo->err)->jump, 1);
}
void on_message(j_common_ptr) {}

void set_geometry(Coeffs& c, int width, int height, int ncomp, const int* hs, const int* vs) {
  c.width = width;
  c.height = height;
  c.hmax = c.vmax = 1;
  c.comps.resize(size_t(ncomp));
  for (int i = 0; i < ncomp; i++) {
    c.comps[i].h = ncomp == 1 ? 1 : hs[i];
    c.comps[i].v = ncomp == 1 ? 1 : vs[i];
    c.hmax = std::max(c.hmax, c.comps[i].h);
    c.vmax = std::max(c.vmax, c.comps[i].v);
  }
  c.mcu_cols = (width + 8 * c.hmax - 1) / (8 * c.hmax);
  c.mcu_rows = (height + 8 * c.vmax - 1) / (8 * c.vmax);
  for (auto& k : c.comps) {
    k.bw = c.mcu_cols * k.h;
    k.bh = c.mcu_rows * k.v;
    k.dw = (width * k.h + c.hmax - 1) / c.hmax;
    k.dh = (height * k.v + c.vmax - 1) / c.vmax;
    k.blocks.resize(size_t(k.bw) * k.bh * 64);  // every decoded block is written whole
  }
}
}  // namespace

bool read_coeffs(const uint8_t* data, size_t size, Coeffs& out, std::string& why) {
  jpeg_decompress_struct cinfo;
  ErrMgr err;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = on_error;
  err.pub.output_message = on_message;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    why = "libjpeg error";
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, size);
  jpeg_read_header(&cinfo, TRUE);
  jvirt_barray_ptr* arrays = jpeg_read_coefficients(&cinfo);
  int n = cinfo.num_components;
  int hs[4], vs[4];
  for (int i = 0; i < n && i < 4; i++) {
    hs[i] = cinfo.comp_info[i].h_samp_factor;
    vs[i] = cinfo.comp_info[i].v_samp_factor;
  }
  bool ok = (n == 1 && cinfo.jpeg_color_space == JCS_GRAYSCALE) ||
            (n == 3 && cinfo.jpeg_color_space == JCS_YCbCr &&
             ((hs[0] == 1 && vs[0] == 1) || (hs[0] == 2 && vs[0] == 2)) && hs[1] == 1 &&
             vs[1] == 1 && hs[2] == 1 && vs[2] == 1);
  if (!ok) {
    jpeg_destroy_decompress(&cinfo);
    why = "unsupported kind (prototype: grey, 4:4:4, 4:2:0 YCbCr only)";
    return false;
  }
  set_geometry(out, cinfo.image_width, cinfo.image_height, n, hs, vs);
  for (int ci = 0; ci < n; ci++) {
    Component& k = out.comps[ci];
    jpeg_component_info* comp = &cinfo.comp_info[ci];
    for (int i = 0; i < 64; i++) k.quant[i] = comp->quant_table->quantval[i];
    for (int by = 0; by < k.bh; by++) {
      JBLOCKARRAY row = cinfo.mem->access_virt_barray(reinterpret_cast<j_common_ptr>(&cinfo),
                                                      arrays[ci], by, 1, FALSE);
      for (int bx = 0; bx < k.bw; bx++)
        memcpy(&k.blocks[(size_t(by) * k.bw + bx) * 64], row[0][bx], 64 * sizeof(int16_t));
    }
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

// ---------------------------------------------------------------- shared helpers

namespace {

constexpr int kScale = 12;  // rANS probability bits
constexpr uint32_t kProb = 1u << kScale;
constexpr uint32_t kRansL = 1u << 16;
constexpr int kContexts = 8;  // DC luma, DC chroma, 3 AC bands x {luma, chroma}

inline int band_of(int k) { return k < 3 ? 0 : (k < 10 ? 1 : 2); }
inline int ac_ctx(int cls, int k, bool bands) { return 2 + cls * 3 + (bands ? band_of(k) : 0); }

inline int bit_length(int v) {
  unsigned a = unsigned(v < 0 ? -v : v);
  return a ? 32 - __builtin_clz(a) : 0;
}

struct Writer {
  std::vector<uint8_t> b;
  void u8(unsigned v) { b.push_back(uint8_t(v)); }
  void u16(unsigned v) {
    u8(v & 255);
    u8(v >> 8);
  }
  void u32(uint32_t v) {
    u16(v & 0xffff);
    u16(v >> 16);
  }
  void bytes(const uint8_t* p, size_t n) { b.insert(b.end(), p, p + n); }
};

inline uint32_t rd32(const uint8_t* p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}
inline uint16_t rd16(const uint8_t* p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}

struct BitWriter {
  std::vector<uint8_t> b;
  uint64_t acc = 0;
  int n = 0;
  void put(uint32_t bits, int len) {
    if (!len) return;
    acc = (acc << len) | (bits & ((1u << len) - 1));
    n += len;
    while (n >= 8) {
      n -= 8;
      b.push_back(uint8_t(acc >> n));
    }
  }
  void flush() {
    if (n) b.push_back(uint8_t(acc << (8 - n)));
    n = 0;
  }
};

// Walks one segment's blocks in the stored order (MCU by MCU, component, v, h).
template <class F>
void for_segment_blocks(const Coeffs& c, int row, int mc0, int mc1, F&& f) {
  for (int m = mc0; m < mc1; m++)
    for (size_t ci = 0; ci < c.comps.size(); ci++) {
      const Component& k = c.comps[ci];
      for (int yy = 0; yy < k.v; yy++)
        for (int xx = 0; xx < k.h; xx++) {
          int by = row * k.v + yy, bx = m * k.h + xx;
          f(int(ci), size_t(by) * k.bw + bx);
        }
    }
}

int seg_width(const Coeffs& c, int seg_mcus) { return seg_mcus > 0 ? seg_mcus : c.mcu_cols; }
int segs_per_row(const Coeffs& c, int seg_mcus) {
  int k = seg_width(c, seg_mcus);
  return (c.mcu_cols + k - 1) / k;
}

// Symbols of one block in JPEG's run/size alphabet; calls sym(ctx, symbol, bits, nbits).
template <class F>
void block_symbols(const int16_t* blk, int& pred, int cls, bool bands, F&& sym) {
  int diff = blk[0] - pred;
  pred = blk[0];
  int s = bit_length(diff);
  sym(cls, s, uint32_t(diff < 0 ? diff - 1 : diff), s);
  int run = 0;
  for (int k = 1; k < 64; k++) {
    int v = blk[kZigzag[k]];
    if (!v) {
      run++;
      continue;
    }
    while (run >= 16) {
      sym(ac_ctx(cls, k - run, bands), 0xF0, 0, 0);
      run -= 16;
    }
    int sz = bit_length(v);
    sym(ac_ctx(cls, k - run, bands), (run << 4) | sz, uint32_t(v < 0 ? v - 1 : v), sz);
    run = 0;
  }
  if (run) sym(ac_ctx(cls, 64 - run, bands), 0x00, 0, 0);
}

void normalize(const uint32_t* counts, uint16_t* freq) {
  uint64_t total = 0;
  for (int s = 0; s < 256; s++) total += counts[s];
  if (!total) return;
  int sum = 0, big = -1;
  for (int s = 0; s < 256; s++) {
    freq[s] = 0;
    if (!counts[s]) continue;
    uint32_t f = uint32_t((uint64_t(counts[s]) * kProb) / total);
    freq[s] = uint16_t(std::max<uint32_t>(1, f));
    sum += freq[s];
    if (big < 0 || freq[s] > freq[big]) big = s;
  }
  // Fix the sum on the most frequent symbol; keep every frequency in [1, kProb - 1].
  freq[big] = uint16_t(int(freq[big]) + int(kProb) - sum);
  if (freq[big] >= kProb) {  // a single symbol: give a dummy neighbour one slot
    freq[big] = kProb - 1;
    freq[(big + 1) & 255] = 1;
  }
}

struct Sym {
  uint8_t ctx, sym;
};

// rANS-encodes `syms` with `nstates` interleaved states (symbol i in state i % nstates),
// backwards, so the decoder reads 16-bit words forwards after nstates 32-bit initial states.
void rans_encode(const std::vector<Sym>& syms, int nstates, const uint16_t (*freq)[256],
                 const uint16_t (*start)[256], std::vector<uint8_t>& out) {
  std::vector<uint16_t> words;
  uint32_t st[4] = {kRansL, kRansL, kRansL, kRansL};
  for (size_t i = syms.size(); i-- > 0;) {
    uint32_t& x = st[i % size_t(nstates)];
    uint32_t f = freq[syms[i].ctx][syms[i].sym], st0 = start[syms[i].ctx][syms[i].sym];
    if (x >= (f << 20)) {
      words.push_back(uint16_t(x & 0xffff));
      x >>= 16;
    }
    x = ((x / f) << kScale) + (x % f) + st0;
  }
  for (int j = nstates - 1; j >= 0; j--) {
    words.push_back(uint16_t(st[j] & 0xffff));
    words.push_back(uint16_t(st[j] >> 16));
  }
  std::reverse(words.begin(), words.end());
  const uint8_t* wp = reinterpret_cast<const uint8_t*>(words.data());
  out.insert(out.end(), wp, wp + words.size() * 2);
}

void put16(std::vector<uint8_t>& b, size_t at, size_t v) {
  b[at] = uint8_t(v & 255);
  b[at + 1] = uint8_t(v >> 8);
}

// Streams segment: u16 AC counts (luma, chroma), u16 byte lengths (DC, luma AC, chroma AC),
// the three rANS streams, then the raw magnitude bits in block order.
void encode_streams(const Coeffs& c, int r, int mc0, int mc1, const uint16_t (*freq)[256],
                    const uint16_t (*start)[256], std::vector<uint8_t>& payload) {
  std::vector<Sym> dc, ac[2];
  BitWriter bits;
  int pred[4] = {0, 0, 0, 0};
  for_segment_blocks(c, r, mc0, mc1, [&](int ci, size_t b) {
    int cls = ci ? 1 : 0;
    block_symbols(&c.comps[ci].blocks[b * 64], pred[ci], cls, false,
                  [&](int ctx, int sym, uint32_t v, int n) {
                    (ctx < 2 ? dc : ac[cls]).push_back({uint8_t(ctx), uint8_t(sym)});
                    bits.put(v, n);
                  });
  });
  bits.flush();
  size_t hdr = payload.size();
  payload.resize(hdr + 10);
  put16(payload, hdr, ac[0].size());
  put16(payload, hdr + 2, ac[1].size());
  size_t at = payload.size();
  rans_encode(dc, 1, freq, start, payload);
  put16(payload, hdr + 4, payload.size() - at);
  at = payload.size();
  rans_encode(ac[0], 2, freq, start, payload);
  put16(payload, hdr + 6, payload.size() - at);
  at = payload.size();
  rans_encode(ac[1], 2, freq, start, payload);
  put16(payload, hdr + 8, payload.size() - at);
  payload.insert(payload.end(), bits.b.begin(), bits.b.end());
}

#ifndef NIBBLE_FROM
#define NIBBLE_FROM 10
#endif
// Zigzag positions below this (DC diff, lowest ACs: mostly large) are stored as bytes; the
// rest as nibbles, whose escapes are then rare enough to branch on.
constexpr int kNibbleFrom = NIBBLE_FROM;
#ifndef WIDE_ESCAPES
#define WIDE_ESCAPES 4
#endif
// NibblesWide stores a block's high positions as bytes once it has this many escapes.
constexpr int kWideEscapes = WIDE_ESCAPES;

// Nibbles segment: u32 lengths of the mask and nibble streams, then mask, nibble and byte
// streams. Mask stream: per block n (last nonzero zigzag index + 1, DC diff at 0; bit 7 =
// "wide") and ceil(n/8) mask bytes. Values at positions < kNibbleFrom, and all values of wide
// blocks, go to the byte stream (int8, -128 = int16 follows); the others are nibbles, -8
// escaping to the byte stream. Only NibblesWide marks blocks wide (kWideEscapes or more high
// values outside -7..7), so its decoder meets few escapes; Nibbles keeps them all, smaller.
void encode_nibbles(const Coeffs& c, int r, int mc0, int mc1, bool allow_wide,
                    std::vector<uint8_t>& payload) {
  std::vector<uint8_t> mask, nib, esc;
  size_t nn = 0;
  int pred[4] = {0, 0, 0, 0};
  auto put_nib = [&](unsigned v) {
    if (nn % 2 == 0) nib.push_back(0);
    nib.back() |= uint8_t((v & 15) << (4 * (nn % 2)));
    nn++;
  };
  for_segment_blocks(c, r, mc0, mc1, [&](int ci, size_t b) {
    const int16_t* blk = &c.comps[ci].blocks[b * 64];
    int vals[64];
    vals[0] = blk[0] - pred[ci];
    pred[ci] = blk[0];
    int n = 0;
    for (int k = 0; k < 64; k++) {
      if (k) vals[k] = blk[kZigzag[k]];
      if (vals[k]) n = k + 1;
    }
    // A block whose high positions all fit -8..7 stores them as nibbles, else all as bytes
    // (flag in bit 7 of n): no per-value escape test in the decoder.
    int escapes = 0;
    for (int k = kNibbleFrom; k < n; k++) escapes += vals[k] < -7 || vals[k] > 7;
    bool wide = allow_wide && escapes >= kWideEscapes;
    mask.push_back(uint8_t(n | (wide ? 128 : 0)));
    for (int by = 0; by < (n + 7) / 8; by++) {
      uint8_t m = 0;
      for (int i = 0; i < 8 && by * 8 + i < n; i++)
        if (vals[by * 8 + i]) m |= uint8_t(1 << i);
      mask.push_back(m);
    }
    for (int k = 0; k < n; k++) {
      int v = vals[k];
      if (!v) continue;
      if (k >= kNibbleFrom && !wide) {
        bool fits = v >= -7 && v <= 7;
        put_nib(fits ? unsigned(v) : 8u);  // 8 (= -8) escapes to the byte stream
        if (fits) continue;
      }
      if (v >= -127 && v <= 127) {
        esc.push_back(uint8_t(int8_t(v)));
      } else {
        esc.push_back(0x80);
        esc.push_back(uint8_t(v & 255));
        esc.push_back(uint8_t((v >> 8) & 255));
      }
    }
  });
  size_t at = payload.size();
  payload.resize(at + 8);
  uint32_t a = uint32_t(mask.size()), bb = uint32_t(nib.size());
  memcpy(&payload[at], &a, 4);
  memcpy(&payload[at + 4], &bb, 4);
  payload.insert(payload.end(), mask.begin(), mask.end());
  payload.insert(payload.end(), nib.begin(), nib.end());
  payload.insert(payload.end(), esc.begin(), esc.end());
}

}  // namespace

// ---------------------------------------------------------------- encoders

std::vector<uint8_t> encode(const Coeffs& c, Layer layer, int seg_mcus) {
  Writer w;
  w.u32(0x31504643);  // "CFP1"
  w.u8(uint8_t(layer));
  w.u8(uint8_t(c.comps.size()));
  w.u16(uint16_t(seg_mcus));
  w.u32(uint32_t(c.width));
  w.u32(uint32_t(c.height));
  for (const auto& k : c.comps) {
    w.u8(uint8_t(k.h));
    w.u8(uint8_t(k.v));
    for (int i = 0; i < 64; i++) w.u16(k.quant[i]);
  }
  int kw = seg_width(c, seg_mcus), spr = segs_per_row(c, seg_mcus);
  uint16_t freq[kContexts][256] = {};
  uint16_t start[kContexts][256] = {};
  bool bands = layer == Layer::Rans;
  if (layer != Layer::Bytes) {
    static uint32_t counts[kContexts][256];
    memset(counts, 0, sizeof counts);
    for (int r = 0; r < c.mcu_rows; r++)
      for (int s = 0; s < spr; s++) {
        int pred[4] = {0, 0, 0, 0};
        for_segment_blocks(c, r, s * kw, std::min(c.mcu_cols, (s + 1) * kw), [&](int ci, size_t b) {
          block_symbols(&c.comps[ci].blocks[b * 64], pred[ci], ci ? 1 : 0, bands,
                        [&](int ctx, int sym, uint32_t, int) { counts[ctx][sym]++; });
        });
      }
    for (int x = 0; x < kContexts; x++) {
      normalize(counts[x], freq[x]);
      uint16_t acc = 0;
      uint8_t bitmap[32] = {};
      for (int s = 0; s < 256; s++) {
        start[x][s] = acc;
        acc = uint16_t(acc + freq[x][s]);
        if (freq[x][s]) bitmap[s >> 3] |= uint8_t(1 << (s & 7));
      }
      w.u8(acc ? 1 : 0);  // unused contexts cost one byte
      if (!acc) continue;
      w.bytes(bitmap, 32);
      for (int s = 0; s < 256; s++) {
        if (!freq[x][s]) continue;
        if (freq[x][s] < 128) {
          w.u8(freq[x][s]);
        } else {
          w.u8(0x80 | (freq[x][s] >> 8));
          w.u8(freq[x][s] & 255);
        }
      }
    }
  }
  size_t nseg = size_t(c.mcu_rows) * spr;
  std::vector<uint8_t> payload;
  std::vector<uint32_t> offsets;
  std::vector<Sym> syms;
  std::vector<uint16_t> words;
  for (int r = 0; r < c.mcu_rows; r++)
    for (int s = 0; s < spr; s++) {
      offsets.push_back(uint32_t(payload.size()));
      int pred[4] = {0, 0, 0, 0};
      int mc0 = s * kw, mc1 = std::min(c.mcu_cols, (s + 1) * kw);
      if (layer == Layer::Nibbles || layer == Layer::NibblesWide) {
        encode_nibbles(c, r, mc0, mc1, layer == Layer::NibblesWide, payload);
        continue;
      }
      if (layer == Layer::Bytes) {
        for_segment_blocks(c, r, mc0, mc1, [&](int ci, size_t b) {
          const int16_t* blk = &c.comps[ci].blocks[b * 64];
          int vals[64];
          vals[0] = blk[0] - pred[ci];
          pred[ci] = blk[0];
          int n = 0;
          for (int k = 0; k < 64; k++) {
            if (k) vals[k] = blk[kZigzag[k]];
            if (vals[k]) n = k + 1;
          }
          payload.push_back(uint8_t(n));
          for (int by = 0; by < (n + 7) / 8; by++) {
            uint8_t m = 0;
            for (int i = 0; i < 8 && by * 8 + i < n; i++)
              if (vals[by * 8 + i]) m |= uint8_t(1 << i);
            payload.push_back(m);
          }
          for (int k = 0; k < n; k++) {
            int v = vals[k];
            if (!v) continue;
            if (v >= -127 && v <= 127) {
              payload.push_back(uint8_t(int8_t(v)));
            } else {
              payload.push_back(0x80);
              payload.push_back(uint8_t(v & 255));
              payload.push_back(uint8_t((v >> 8) & 255));
            }
          }
        });
        continue;
      }
      if (layer == Layer::Streams) {
        encode_streams(c, r, mc0, mc1, freq, start, payload);
        continue;
      }
      syms.clear();
      BitWriter bits;
      for_segment_blocks(c, r, mc0, mc1, [&](int ci, size_t b) {
        block_symbols(&c.comps[ci].blocks[b * 64], pred[ci], ci ? 1 : 0, bands,
                      [&](int ctx, int sym, uint32_t v, int n) {
                        syms.push_back({uint8_t(ctx), uint8_t(sym)});
                        bits.put(v, n);
                      });
      });
      bits.flush();
      // Two interleaved rANS states, encoded backwards so the decoder reads forwards.
      words.clear();
      uint32_t st[2] = {kRansL, kRansL};
      for (size_t i = syms.size(); i-- > 0;) {
        uint32_t& x = st[i & 1];
        uint32_t f = freq[syms[i].ctx][syms[i].sym], st0 = start[syms[i].ctx][syms[i].sym];
        if (x >= (f << 20)) {
          words.push_back(uint16_t(x & 0xffff));
          x >>= 16;
        }
        x = ((x / f) << kScale) + (x % f) + st0;
      }
      for (int j = 1; j >= 0; j--) {
        words.push_back(uint16_t(st[j] & 0xffff));
        words.push_back(uint16_t(st[j] >> 16));
      }
      std::reverse(words.begin(), words.end());
      uint32_t nbytes = uint32_t(words.size() * 2);
      uint8_t hdr[4];
      memcpy(hdr, &nbytes, 4);
      payload.insert(payload.end(), hdr, hdr + 4);
      const uint8_t* wp = reinterpret_cast<const uint8_t*>(words.data());
      payload.insert(payload.end(), wp, wp + nbytes);
      payload.insert(payload.end(), bits.b.begin(), bits.b.end());
    }
  offsets.push_back(uint32_t(payload.size()));
  w.u32(uint32_t(nseg));
  for (uint32_t o : offsets) w.u32(o);
  w.bytes(payload.data(), payload.size());
  for (int i = 0; i < 8; i++) w.u8(0);  // lets the decoders read 8 bytes at a time
  return w.b;
}

// ---------------------------------------------------------------- decoders

struct Record {
  const uint8_t* data = nullptr;
  size_t size = 0;
  Layer layer = Layer::Bytes;
  int seg_mcus = 0, kw = 0, spr = 0;
  Coeffs geo;      // geometry + coefficient buffer the segments decode into
  uint32_t tab[kContexts][kProb];
  const uint8_t* offsets = nullptr;  // u32 per segment, unaligned
  const uint8_t* payload = nullptr;
  std::vector<uint8_t> planes[4];
  std::vector<int> stride;
};

Record* new_record() { return new Record(); }
void free_record(Record* r) { delete r; }

void open_record(Record* r, const uint8_t* data, size_t size) {
  r->data = data;
  r->size = size;
  const uint8_t* p = data + 4;
  r->layer = Layer(p[0]);
  int n = p[1];
  r->seg_mcus = rd16(p + 2);
  int width = int(rd32(p + 4)), height = int(rd32(p + 8));
  p += 12;
  int hs[4] = {1, 1, 1, 1}, vs[4] = {1, 1, 1, 1};
  const uint8_t* qp[4] = {};
  for (int i = 0; i < n; i++) {
    hs[i] = p[0];
    vs[i] = p[1];
    qp[i] = p + 2;
    p += 2 + 128;
  }
  set_geometry(r->geo, width, height, n, hs, vs);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < 64; j++) r->geo.comps[i].quant[j] = rd16(qp[i] + 2 * j);
  if (r->layer != Layer::Bytes) {
    for (int x = 0; x < kContexts; x++) {
      if (!*p++) continue;
      const uint8_t* bitmap = p;
      p += 32;
      uint32_t acc = 0;
      for (int s = 0; s < 256; s++) {
        if (!(bitmap[s >> 3] & (1 << (s & 7)))) continue;
        uint32_t f = *p++;
        if (f & 0x80) f = ((f & 0x7f) << 8) | *p++;
        uint32_t e = (f << 20) | (acc << 8) | uint32_t(s);
        for (uint32_t i = 0; i < f; i++) r->tab[x][acc + i] = e;
        acc += f;
      }
    }
  }
  r->kw = seg_width(r->geo, r->seg_mcus);
  r->spr = segs_per_row(r->geo, r->seg_mcus);
  p += 4;  // segment count
  r->offsets = p;
  r->payload = p + 4 * (size_t(r->geo.mcu_rows) * r->spr + 1);
  r->stride.clear();
  for (int i = 0; i < n; i++) {
    const Component& k = r->geo.comps[i];
    r->planes[i].resize(size_t(k.bw) * 8 * k.bh * 8 + 64);  // SIMD reads run past the end
    r->stride.push_back(k.bw * 8);
  }
}

const Coeffs& record_geometry(const Record* r) { return r->geo; }
size_t record_segments(const Record* r) { return size_t(r->geo.mcu_rows) * r->spr; }

namespace {

inline uint64_t rd64be(const uint8_t* p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return __builtin_bswap64(v);
}

inline int extend(uint32_t v, int s) { return int(v) - ((int(v) < (1 << (s - 1))) ? (1 << s) - 1 : 0); }

// Next s (1..16) bits at bit `pos` as a JPEG magnitude value, branch-free: the field's top bit
// set means positive, else subtract 2^s - 1.
inline int take_value(const uint8_t* bits, size_t& pos, int s) {
  uint64_t w = rd64be(bits + (pos >> 3)) << (pos & 7);
  pos += size_t(s);
  int v = int(w >> (64 - s));
  int neg = int(~(int64_t(w) >> 63));  // all ones when the top bit is 0
  return v - (((1 << s) - 1) & neg);
}

void decode_segment_bytes(Record* r, int row, int seg) {
  const uint8_t* p = r->payload + rd32(r->offsets + 4 * (size_t(row) * r->spr + seg));
  Coeffs& c = r->geo;
  int pred[4] = {0, 0, 0, 0};
  for_segment_blocks(c, row, seg * r->kw, std::min(c.mcu_cols, (seg + 1) * r->kw),
                     [&](int ci, size_t b) {
                       int16_t* blk = &c.comps[ci].blocks[b * 64];
                       memset(blk, 0, 128);
                       int n = *p++;
                       uint64_t m = 0;
                       memcpy(&m, p, 8);
                       if (n < 64) m &= (uint64_t(1) << n) - 1;
                       p += (n + 7) >> 3;
                       if (m & 1) {
                         int v = int8_t(*p++);
                         if (v == -128) {
                           v = int16_t(rd16(p));
                           p += 2;
                         }
                         pred[ci] += v;
                         m &= m - 1;
                       }
                       blk[0] = int16_t(pred[ci]);
                       while (m) {
                         int k = __builtin_ctzll(m);
                         m &= m - 1;
                         int v = int8_t(*p++);
                         if (v == -128) {
                           v = int16_t(rd16(p));
                           p += 2;
                         }
                         blk[kZigzag[k]] = int16_t(v);
                       }
                     });
}

void decode_segment_rans(Record* r, int row, int seg) {
  const uint8_t* p = r->payload + rd32(r->offsets + 4 * (size_t(row) * r->spr + seg));
  uint32_t nbytes = rd32(p);
  const uint8_t* wp = p + 4;
  const uint8_t* bits = wp + nbytes;
  size_t pos = 0;
  uint32_t x0 = (uint32_t(rd16(wp)) << 16) | rd16(wp + 2);
  uint32_t x1 = (uint32_t(rd16(wp + 4)) << 16) | rd16(wp + 6);
  wp += 8;
  Coeffs& c = r->geo;
  int pred[4] = {0, 0, 0, 0};
  auto next = [&](const uint32_t* tab) -> uint32_t {
    uint32_t slot = x0 & (kProb - 1);
    uint32_t e = tab[slot];
    x0 = (e >> 20) * (x0 >> kScale) + slot - ((e >> 8) & (kProb - 1));
    if (x0 < kRansL) {
      x0 = (x0 << 16) | rd16(wp);
      wp += 2;
    }
    std::swap(x0, x1);
    return e & 255;
  };
  auto getbits = [&](int n) -> uint32_t {
    uint64_t v = rd64be(bits + (pos >> 3)) << (pos & 7);
    pos += size_t(n);
    return uint32_t(v >> (64 - n));
  };
  for_segment_blocks(c, row, seg * r->kw, std::min(c.mcu_cols, (seg + 1) * r->kw),
                     [&](int ci, size_t b) {
                       int16_t* blk = &c.comps[ci].blocks[b * 64];
                       memset(blk, 0, 128);
                       int cls = ci ? 1 : 0;
                       int s = int(next(r->tab[cls]));
                       if (s) pred[ci] += extend(getbits(s), s);
                       blk[0] = int16_t(pred[ci]);
                       const uint32_t(*tabs)[kProb] = r->tab + 2 + cls * 3;
                       for (int k = 1; k < 64;) {
                         int sym = int(next(tabs[band_of(k)]));
                         int sz = sym & 15, run = sym >> 4;
                         if (!sz) {
                           if (run != 15) break;
                           k += 16;
                           continue;
                         }
                         k += run;
                         blk[kZigzag[k & 63]] = int16_t(extend(getbits(sz), sz));
                         k++;
                       }
                     });
}

// Decodes n symbols of one table with two interleaved states into out; branch-free renorm.
inline const uint8_t* rans_symbols(const uint8_t* wp, size_t n, const uint32_t* tab, uint8_t* out) {
  uint32_t x0 = (uint32_t(rd16(wp)) << 16) | rd16(wp + 2);
  uint32_t x1 = (uint32_t(rd16(wp + 4)) << 16) | rd16(wp + 6);
  wp += 8;
  auto step = [&](uint32_t& x) -> uint8_t {
    uint32_t slot = x & (kProb - 1);
    uint32_t e = tab[slot];
    x = (e >> 20) * (x >> kScale) + slot - ((e >> 8) & (kProb - 1));
    uint32_t wv = rd16(wp);
    bool need = x < kRansL;
    x = need ? (x << 16) | wv : x;
    wp += need ? 2 : 0;
    return uint8_t(e);
  };
  size_t i = 0;
  for (; i + 2 <= n; i += 2) {
    out[i] = step(x0);
    out[i + 1] = step(x1);
  }
  if (i < n) out[i] = step(x0);
  return wp;
}

void decode_segment_streams(Record* r, int row, int seg) {
  const uint8_t* p = r->payload + rd32(r->offsets + 4 * (size_t(row) * r->spr + seg));
  size_t ny = rd16(p), nc = rd16(p + 2);
  const uint8_t* dcp = p + 10;
  const uint8_t* yp = dcp + rd16(p + 4);
  const uint8_t* cp = yp + rd16(p + 6);
  const uint8_t* bits = cp + rd16(p + 8);
  static thread_local uint8_t acs[2][65536 + 8];
  rans_symbols(yp, ny, r->tab[2], acs[0]);
  rans_symbols(cp, nc, r->tab[5], acs[1]);
  const uint8_t* ap[2] = {acs[0], acs[1]};
  uint32_t xd = (uint32_t(rd16(dcp)) << 16) | rd16(dcp + 2);
  const uint8_t* dw = dcp + 4;
  size_t pos = 0;
  Coeffs& c = r->geo;
  int pred[4] = {0, 0, 0, 0};
  for_segment_blocks(c, row, seg * r->kw, std::min(c.mcu_cols, (seg + 1) * r->kw),
                     [&](int ci, size_t b) {
                       int16_t* blk = &c.comps[ci].blocks[b * 64];
                       memset(blk, 0, 128);
                       int cls = ci ? 1 : 0;
                       uint32_t slot = xd & (kProb - 1);
                       uint32_t e = r->tab[cls][slot];
                       xd = (e >> 20) * (xd >> kScale) + slot - ((e >> 8) & (kProb - 1));
                       if (xd < kRansL) {
                         xd = (xd << 16) | rd16(dw);
                         dw += 2;
                       }
                       int s = int(e & 255);
                       if (s) pred[ci] += take_value(bits, pos, s);
                       blk[0] = int16_t(pred[ci]);
                       const uint8_t* a = ap[cls];
                       for (int k = 1; k < 64;) {
                         int sym = *a++;
                         int sz = sym & 15;
                         if (!sz) {
                           if (sym != 0xF0) break;
                           k += 16;
                           continue;
                         }
                         k += sym >> 4;
                         blk[kZigzag[k & 63]] = int16_t(take_value(bits, pos, sz));
                         k++;
                       }
                       ap[cls] = a;
                     });
}

inline int next_byte_value(const uint8_t*& e) {
  int v = int8_t(*e++);
  if (__builtin_expect(v == -128, 0)) {
    v = int16_t(rd16(e));
    e += 2;
  }
  return v;
}

void decode_segment_nibbles(Record* r, int row, int seg) {
  const uint8_t* p = r->payload + rd32(r->offsets + 4 * (size_t(row) * r->spr + seg));
  const uint8_t* m8 = p + 8;
  const uint8_t* nib = m8 + rd32(p);
  const uint8_t* e = nib + rd32(p + 4);
  size_t ni = 0;
  Coeffs& c = r->geo;
  int pred[4] = {0, 0, 0, 0};
  for_segment_blocks(c, row, seg * r->kw, std::min(c.mcu_cols, (seg + 1) * r->kw),
                     [&](int ci, size_t b) {
                       int16_t* blk = &c.comps[ci].blocks[b * 64];
                       memset(blk, 0, 128);
                       int nb = *m8++;
                       int n = nb & 127;
                       uint64_t m = 0;
                       memcpy(&m, m8, 8);
                       if (n < 64) m &= (uint64_t(1) << n) - 1;
                       m8 += (n + 7) >> 3;
                       if (m & 1) {
                         pred[ci] += next_byte_value(e);
                         m &= m - 1;
                       }
                       blk[0] = int16_t(pred[ci]);
                       uint64_t lo = m & ((uint64_t(1) << kNibbleFrom) - 1);
                       m &= ~lo;
                       while (lo) {
                         int k = __builtin_ctzll(lo);
                         lo &= lo - 1;
                         blk[kZigzag[k]] = int16_t(next_byte_value(e));
                       }
                       if (nb & 128) {
                         while (m) {
                           int k = __builtin_ctzll(m);
                           m &= m - 1;
                           blk[kZigzag[k]] = int16_t(next_byte_value(e));
                         }
                       } else {
                         while (m) {
                           int k = __builtin_ctzll(m);
                           m &= m - 1;
                           // sign-extended nibble; -8 escapes to the byte stream
                           int v = int(uint32_t(nib[ni >> 1]) << (28 - 4 * (ni & 1))) >> 28;
                           ni++;
                           if (__builtin_expect(v == -8, 0)) v = next_byte_value(e);
                           blk[kZigzag[k]] = int16_t(v);
                         }
                       }
                     });
}

void decode_segment(Record* r, int row, int seg) {
  if (r->layer == Layer::Nibbles || r->layer == Layer::NibblesWide)
    decode_segment_nibbles(r, row, seg);
  else if (r->layer == Layer::Streams)
    decode_segment_streams(r, row, seg);
  else if (r->layer == Layer::Rans)
    decode_segment_rans(r, row, seg);
  else
    decode_segment_bytes(r, row, seg);
}

}  // namespace

void decode_all(Record* r, Coeffs& out) {
  for (int row = 0; row < r->geo.mcu_rows; row++)
    for (int s = 0; s < r->spr; s++) decode_segment(r, row, s);
  if (&out != &r->geo) out = r->geo;
}

void decode_rect(Record* r, int x0, int y0, int w, int h, uint8_t* rgb) {
  Coeffs& c = r->geo;
  int n = int(c.comps.size());
  int x1 = x0 + w, y1 = y0 + h;
  // Sample rectangle each component needs (fancy h2v2 upsampling reads one chroma
  // sample beyond each side), then its block rectangle.
  int bx0[4], bx1[4], by0[4], by1[4];
  int mr0 = c.mcu_rows, mr1 = -1, mc0 = c.mcu_cols, mc1 = -1;
  for (int i = 0; i < n; i++) {
    const Component& k = c.comps[i];
    int sx0 = x0, sx1 = x1 - 1, sy0 = y0, sy1 = y1 - 1;
    if (k.h != c.hmax) {
      sx0 = std::max(0, (x0 >> 1) - 1);
      sx1 = std::min(k.dw - 1, ((x1 - 1) >> 1) + 1);
      sy0 = std::max(0, (y0 >> 1) - 1);
      sy1 = std::min(k.dh - 1, ((y1 - 1) >> 1) + 1);
    }
    bx0[i] = sx0 >> 3;
    bx1[i] = sx1 >> 3;
    by0[i] = sy0 >> 3;
    by1[i] = sy1 >> 3;
    mr0 = std::min(mr0, by0[i] / k.v);
    mr1 = std::max(mr1, by1[i] / k.v);
    mc0 = std::min(mc0, bx0[i] / k.h);
    mc1 = std::max(mc1, bx1[i] / k.h);
  }
  int s0 = mc0 / r->kw, s1 = mc1 / r->kw;
  for (int row = mr0; row <= mr1; row++) {
    for (int s = s0; s <= s1; s++) decode_segment(r, row, s);
    for (int i = 0; i < n; i++) {
      const Component& k = c.comps[i];
      int ya = std::max(by0[i], row * k.v), yb = std::min(by1[i], row * k.v + k.v - 1);
      for (int by = ya; by <= yb; by++)
        for (int bx = bx0[i]; bx <= bx1[i]; bx++)
          idct_islow(&k.blocks[(size_t(by) * k.bw + bx) * 64], k.quant,
                     &r->planes[i][size_t(by) * 8 * r->stride[i] + size_t(bx) * 8], r->stride[i]);
    }
  }
  const uint8_t* planes[3] = {r->planes[0].data(), n > 1 ? r->planes[1].data() : nullptr,
                              n > 2 ? r->planes[2].data() : nullptr};
  Geometry g;
  g.ncomp = n;
  g.sub = n == 3 && c.comps[0].h == 2;
  g.cw = n == 3 ? c.comps[1].dw : 0;
  g.ch = n == 3 ? c.comps[1].dh : 0;
  for (int i = 0; i < n; i++) g.stride[i] = r->stride[i];
  color_rect(g, planes, x0, y0, w, h, rgb);
}

}  // namespace proto
