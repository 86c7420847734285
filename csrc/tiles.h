// Decode-aware packing: lossless restart-marker repack of a JPEG, its segment table, and the
// splice that turns a crop into a small valid JPEG made of only the segments the crop needs.
//
// Layout of a tiled record (written by repack, checked by scan_table):
//   bytes [0, scan_offset)   header: SOI, copied APP0/APP14 (or all APPn/COM), DQT, SOF0/SOF1,
//                            DHT (optimized), DRI = restart_mcus, SOS with every component.
//   segment k, k = 0..n-1    entropy-coded bytes data[offsets[k], offsets[k+1] - 2), followed by
//                            the two marker bytes data[offsets[k+1] - 2, offsets[k+1]):
//                            RST(k mod 8) for k < n - 1, EOI for the last segment.
//   offsets[0] == scan_offset, offsets[n] == record size, n == mcu_rows * mcus_per_row / R.
// Restart rule: R (restart_mcus) is the largest divisor of mcus_per_row that is <= the asked
// maximum (4 by default), so no segment straddles an MCU row and the segments a crop needs in
// one MCU row are one contiguous byte range. When mcus_per_row has no divisor in 2..max, R is 1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fl::tiles {

enum class Status : int {
    kOk = 0,
    kNotTileable = 1,      // valid input that this format cannot hold (keep the original bytes)
    kCorrupt = 2,          // bytes or table are damaged or disagree with each other
    kInvalidArgument = 3,  // crop outside the image, output buffer too small, bad option
};

// Everything about a tiled record except its segment offsets; all values are plain integers so
// the table can live in a numpy index row.
struct Geometry {
    uint32_t width = 0;         // image width in pixels (as in SOF)
    uint32_t height = 0;        // image height in pixels (as in SOF)
    uint32_t sof_offset = 0;    // offset of the 0xFF of the SOF marker
    uint32_t scan_offset = 0;   // offset of the first entropy-coded byte (right after SOS)
    uint32_t mcu_width = 0;     // MCU size in image pixels (8 or 8 * max sampling factor)
    uint32_t mcu_height = 0;
    uint32_t mcus_per_row = 0;  // MCU columns in the scan
    uint32_t mcu_rows = 0;      // MCU rows in the scan
    uint32_t restart_mcus = 0;  // R: MCUs per restart segment, divides mcus_per_row
};
constexpr int kGeometryFields = 9;

struct TiledRecord {
    Status status = Status::kOk;
    std::string message;            // why not tileable / what is corrupt, empty when kOk
    std::vector<uint8_t> data;      // the tiled JPEG
    Geometry geometry;
    std::vector<uint32_t> offsets;  // n_segments + 1 values, see the layout above
};

// Which APPn/COM markers of the source the tiled record keeps.
enum class Markers : int {
    kPixels = 0,  // only JFIF APP0 and Adobe APP14: what decoders use to pick colour transforms
    kAll = 1,     // every APPn and COM marker (EXIF, ICC, XMP, comments)
};

// Losslessly re-encodes data (baseline or progressive, Huffman, 8-bit) as a sequential JPEG
// with optimized Huffman tables and restart segments, then records its table. Never throws
// for bad bytes: any problem comes back as a status and a message.
TiledRecord repack(const uint8_t* data, size_t size, uint32_t max_restart_mcus, Markers markers);

// Reads the table of an already tiled record by scanning it once (used by repack on its own
// output and by verification). Fails with kCorrupt / kNotTileable and a message otherwise.
Status scan_table(const uint8_t* data, size_t size, Geometry* geometry,
                  std::vector<uint32_t>* offsets, std::string* message);

struct Crop {
    int64_t top = 0, left = 0, height = 0, width = 0;  // in source pixels
};

struct Spliced {
    Status status = Status::kOk;
    std::string message;
    size_t size = 0;       // bytes written (or needed, when the buffer was too small)
    uint32_t y0 = 0;       // origin of the spliced image in source pixels
    uint32_t x0 = 0;
    uint32_t height = 0;   // size of the spliced image in pixels
    uint32_t width = 0;
};

// Upper bound of a splice's size for this record: the record size.
inline size_t splice_capacity(size_t record_size) { return record_size; }

// Builds a valid JPEG covering the crop (grown by `context` pixels on each side, clamped to the
// image, so chroma upsampling inside the crop sees its real neighbours) into out. Checks the
// table against the bytes it touches; never reads or writes outside the given buffers.
Spliced splice(const uint8_t* data, size_t size, const Geometry& geometry,
               const uint32_t* offsets, size_t n_offsets, const Crop& crop, uint32_t context,
               uint8_t* out, size_t out_capacity);

}  // namespace fl::tiles
