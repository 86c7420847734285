// Prototype record codec for JPEG coefficients (issue 30): shared types and entry points.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace proto {

// Quantized DCT coefficients of one image, on the full MCU grid (padding blocks included),
// blocks in raster order, each block 64 int16 in natural (row-major) order.
struct Component {
  int h = 1, v = 1;              // sampling factors
  int bw = 0, bh = 0;            // block grid stored (MCU grid)
  int dw = 0, dh = 0;            // downsampled width/height in samples (libjpeg's meaning)
  uint16_t quant[64] = {};       // natural order
  std::vector<int16_t> blocks;   // bw*bh*64
};

struct Coeffs {
  int width = 0, height = 0;
  int mcu_cols = 0, mcu_rows = 0;
  int hmax = 1, vmax = 1;
  std::vector<Component> comps;
};

// libjpeg side (jpeg_read_coefficients); returns false (with a reason) for unsupported kinds.
bool read_coeffs(const uint8_t* data, size_t size, Coeffs& out, std::string& why);

// Bytes: per block a count, a nonzero mask and int8 values (escape for larger).
// Rans: one rANS stream (2 states) of JPEG run/size symbols with position-band contexts.
// Streams: separate rANS streams for DC, luma AC and chroma AC (2 states each), so symbol
// decoding never waits on the block parse; the parse then reads decoded symbol bytes.
// Nibbles: Bytes' count + mask; the lowest zigzag positions as bytes, the rest as 4-bit values
// with an escape to bytes for values outside -7..7; three byte streams per segment.
// NibblesWide: the same, but a block with 4 or more such values stores all its values as bytes.
enum class Layer : uint8_t { Bytes = 1, Rans = 2, Streams = 3, Nibbles = 4, NibblesWide = 5 };

// Encode to a self-contained record: header, (rANS tables), segment offsets, payload.
// A segment is one MCU row times `seg_mcus` MCU columns (0 = whole row).
std::vector<uint8_t> encode(const Coeffs& c, Layer layer, int seg_mcus);

// Parsed record, ready to decode any set of segments. A Record is reused across images so its
// coefficient and plane buffers are allocated once (as a loader thread would).
struct Record;
Record* new_record();
void open_record(Record* r, const uint8_t* data, size_t size);
void free_record(Record* r);
// Geometry of an opened record (without coefficients).
const Coeffs& record_geometry(const Record* r);
// Decode every segment into `out` (blocks sized by open_record).
void decode_all(Record* r, Coeffs& out);

// Pixels: interleaved RGB (or grey) of the rectangle [x0, x0+w) x [y0, y0+h).
// Decodes only the segments and reconstructs only the blocks the rectangle needs.
void decode_rect(Record* r, int x0, int y0, int w, int h, uint8_t* rgb);

// Exposed for timing breakdowns.
size_t record_segments(const Record* r);

}  // namespace proto
