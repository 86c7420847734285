// Crop splice of a tiled record: a valid JPEG made of only the restart segments a crop needs.
#include <cstring>

#include "tiles.h"

namespace fl::tiles {
namespace {

uint32_t read_u16(const uint8_t* p) { return (static_cast<uint32_t>(p[0]) << 8) | p[1]; }

Status fail(std::string* message, Status status, const std::string& text) {
    *message = text;
    return status;
}

// Cheap checks that the table describes these bytes: geometry consistent with itself and the
// SOF, offsets anchored at both ends. Per-segment checks happen on the segments used.
Status check_table(const uint8_t* data, size_t size, const Geometry& g, size_t n_offsets,
                   const uint32_t* offsets, std::string* message) {
    if (g.mcu_width == 0 || g.mcu_height == 0 || g.restart_mcus == 0 || g.width == 0 ||
        g.height == 0 || g.mcus_per_row != (g.width + g.mcu_width - 1) / g.mcu_width ||
        g.mcu_rows != (g.height + g.mcu_height - 1) / g.mcu_height ||
        g.mcus_per_row % g.restart_mcus != 0)
        return fail(message, Status::kCorrupt, "tile table geometry is inconsistent");
    size_t segments = size_t(g.mcu_rows) * (g.mcus_per_row / g.restart_mcus);
    if (n_offsets != segments + 1)
        return fail(message, Status::kCorrupt, "tile table has the wrong number of offsets");
    if (offsets[0] != g.scan_offset || offsets[segments] != size || g.scan_offset > size ||
        size_t(g.sof_offset) + 10 > g.scan_offset)
        return fail(message, Status::kCorrupt, "tile table offsets do not fit the record");
    const uint8_t* sof = data + g.sof_offset;
    if (data[0] != 0xFF || data[1] != 0xD8 || sof[0] != 0xFF || (sof[1] != 0xC0 && sof[1] != 0xC1) ||
        read_u16(sof + 5) != g.height || read_u16(sof + 7) != g.width)
        return fail(message, Status::kCorrupt, "record header does not match its tile table");
    return Status::kOk;
}

struct Selection {
    uint32_t row0, row1, seg0, seg1;  // MCU rows [row0, row1), segment columns [seg0, seg1)
};

Selection select(const Geometry& g, const Crop& crop, uint32_t context) {
    int64_t top = crop.top - context > 0 ? crop.top - context : 0;
    int64_t left = crop.left - context > 0 ? crop.left - context : 0;
    int64_t bottom = crop.top + crop.height + context;
    int64_t right = crop.left + crop.width + context;
    bottom = bottom < g.height ? bottom : g.height;
    right = right < g.width ? right : g.width;
    uint32_t segment_px = g.mcu_width * g.restart_mcus;
    Selection s{};
    s.row0 = static_cast<uint32_t>(top / g.mcu_height);
    s.row1 = static_cast<uint32_t>((bottom + g.mcu_height - 1) / g.mcu_height);
    s.seg0 = static_cast<uint32_t>(left / segment_px);
    s.seg1 = static_cast<uint32_t>((right + segment_px - 1) / segment_px);
    // libjpeg-turbo's fancy upsampling gives different interior pixels for a region only 1-2
    // chroma samples wide (measured: region widths 2-4 px at the right edge of a 4:2:0 image),
    // so a region narrower than one MCU takes the segment (row) before it too.
    if (s.seg0 > 0 && static_cast<int64_t>(s.seg0) * segment_px + g.mcu_width > right) --s.seg0;
    if (s.row0 > 0 && static_cast<int64_t>(s.row0) * g.mcu_height + g.mcu_height > bottom)
        --s.row0;
    return s;
}

// Checks every selected segment (ordered, in the record, ending in the marker its index says)
// and returns the spliced size, or 0 when something is wrong.
size_t checked_size(const uint8_t* data, const Geometry& g, const uint32_t* offsets,
                    size_t n_offsets, const Selection& s) {
    size_t per_row = g.mcus_per_row / g.restart_mcus;
    size_t total = g.scan_offset;
    uint32_t previous_end = g.scan_offset;  // rows must not overlap: the splice fits the record
    for (uint32_t row = s.row0; row < s.row1; ++row) {
        size_t first = row * per_row + s.seg0, end = row * per_row + s.seg1;
        if (offsets[first] < previous_end || offsets[end] > offsets[n_offsets - 1]) return 0;
        previous_end = offsets[end];
        for (size_t k = first; k < end; ++k) {
            if (size_t(offsets[k]) + 2 > offsets[k + 1] || offsets[k + 1] > offsets[end]) return 0;
            const uint8_t* marker = data + offsets[k + 1] - 2;
            uint8_t expected = k + 2 == n_offsets ? 0xD9 : static_cast<uint8_t>(0xD0 + (k & 7));
            if (marker[0] != 0xFF || marker[1] != expected) return 0;
        }
        total += offsets[end] - offsets[first];
    }
    return total;
}

void put_u16(uint8_t* p, uint32_t value) {
    p[0] = static_cast<uint8_t>(value >> 8);
    p[1] = static_cast<uint8_t>(value & 0xFF);
}

// Copies header + one byte range per MCU row, renumbering the RST markers 0..7 in output order.
void assemble(const uint8_t* data, const Geometry& g, const uint32_t* offsets,
              const Selection& s, const Spliced& region, uint8_t* out) {
    std::memcpy(out, data, g.scan_offset);
    put_u16(out + g.sof_offset + 5, region.height);
    put_u16(out + g.sof_offset + 7, region.width);
    size_t per_row = g.mcus_per_row / g.restart_mcus;
    size_t at = g.scan_offset;
    uint32_t serial = 0;
    for (uint32_t row = s.row0; row < s.row1; ++row) {
        size_t first = row * per_row + s.seg0, end = row * per_row + s.seg1;
        size_t length = offsets[end] - offsets[first];
        std::memcpy(out + at, data + offsets[first], length);
        for (size_t k = first; k < end; ++k, ++serial) {
            out[at + (offsets[k + 1] - offsets[first]) - 1] = static_cast<uint8_t>(0xD0 + (serial & 7));
        }
        at += length;
    }
    out[at - 1] = 0xD9;  // the last segment ends the image
}

}  // namespace

Spliced splice(const uint8_t* data, size_t size, const Geometry& g, const uint32_t* offsets,
               size_t n_offsets, const Crop& crop, uint32_t context, uint8_t* out,
               size_t out_capacity) {
    Spliced result;
    if (data == nullptr || offsets == nullptr || n_offsets < 2 || size < 4) {
        result.status = fail(&result.message, Status::kCorrupt, "empty record or tile table");
        return result;
    }
    result.status = check_table(data, size, g, n_offsets, offsets, &result.message);
    if (result.status != Status::kOk) return result;
    if (crop.top < 0 || crop.left < 0 || crop.height < 1 || crop.width < 1 ||
        crop.top >= g.height || crop.left >= g.width || crop.height > g.height - crop.top ||
        crop.width > g.width - crop.left) {
        result.status = fail(&result.message, Status::kInvalidArgument,
                             "crop is empty or outside the image");
        return result;
    }
    Selection s = select(g, crop, context);
    uint32_t segment_px = g.mcu_width * g.restart_mcus;
    result.y0 = s.row0 * g.mcu_height;
    result.x0 = s.seg0 * segment_px;
    uint32_t bottom = s.row1 * g.mcu_height, right = s.seg1 * segment_px;
    result.height = (bottom < g.height ? bottom : g.height) - result.y0;
    result.width = (right < g.width ? right : g.width) - result.x0;
    result.size = checked_size(data, g, offsets, n_offsets, s);
    if (result.size == 0) {
        result.status = fail(&result.message, Status::kCorrupt,
                             "tile table does not match the record's restart segments");
        return result;
    }
    if (out == nullptr || out_capacity < result.size) {
        result.status = fail(&result.message, Status::kInvalidArgument,
                             "output buffer too small for the splice");
        return result;
    }
    assemble(data, g, offsets, s, result, out);
    return result;
}

}  // namespace fl::tiles
