// EXIF orientation: crop mapping and the turned write of the decode path (see orientation.h).
#include "orientation.h"

#include <cstring>

namespace fl {

Moves moves_of(int orientation, bool mirror) {
    Moves m;
    switch (orientation) {
        case 2: m.flip_x = true; break;                      // FLIP_LEFT_RIGHT
        case 3: m.flip_y = m.flip_x = true; break;           // ROTATE_180
        case 4: m.flip_y = true; break;                      // FLIP_TOP_BOTTOM
        case 5: m.transpose = true; break;                   // TRANSPOSE
        case 6: m.transpose = m.flip_y = true; break;        // ROTATE_270 (clockwise)
        case 7: m.transpose = m.flip_y = m.flip_x = true; break;  // TRANSVERSE
        case 8: m.transpose = m.flip_x = true; break;        // ROTATE_90
        default: break;
    }
    // The turned image's x runs along the stored rows (x) unless transposed, then down them (y).
    if (mirror) (m.transpose ? m.flip_y : m.flip_x) ^= true;
    return m;
}

CropBox stored_crop(const CropBox &c, int stored_height, int stored_width, int orientation) {
    const Moves m = moves_of(orientation);
    if ((c.height == 0 && c.width == 0) || (!m.transpose && !m.flip_y && !m.flip_x)) return c;
    if (!m.transpose)
        return CropBox{m.flip_y ? stored_height - c.top - c.height : c.top,
                       m.flip_x ? stored_width - c.left - c.width : c.left, c.height, c.width};
    return CropBox{m.flip_y ? stored_height - c.left - c.width : c.left,
                   m.flip_x ? stored_width - c.top - c.height : c.top, c.width, c.height};
}

CropBox oriented_crop(const CropBox &c, int stored_height, int stored_width, int orientation) {
    const Moves m = moves_of(orientation);
    if ((c.height == 0 && c.width == 0) || !m.transpose)
        return stored_crop(c, stored_height, stored_width, orientation);  // its own inverse
    return CropBox{m.flip_x ? stored_width - c.left - c.width : c.left,
                   m.flip_y ? stored_height - c.top - c.height : c.top, c.width, c.height};
}

OutputSlot stored_target(const OutputSlot &out, uint8_t *turned) {
    const Moves m = moves_of(out.orientation, out.flip);
    OutputSlot target = out;
    target.orientation = 1;
    if (m.transpose) {  // decoded at the transposed size, mirrors left to write_turned
        return OutputSlot{turned, out.width, out.height, static_cast<std::ptrdiff_t>(out.height) * 3, false, 1};
    }
    target.flip = m.flip_x;
    if (m.flip_y) {  // the resizer writes row y at data + y * stride: bottom row first
        target.data = out.data + static_cast<std::ptrdiff_t>(out.height - 1) * out.row_stride;
        target.row_stride = -out.row_stride;
    }
    return target;
}

void write_turned(const uint8_t *turned, const OutputSlot &out) {
    const Moves m = moves_of(out.orientation, out.flip);
    const int rows = out.width, cols = out.height;  // the transposed decode's size
    const std::ptrdiff_t stride = static_cast<std::ptrdiff_t>(cols) * 3;
    for (int y = 0; y < out.height; ++y) {
        // O[y][x] = R[fy ? rows-1-x : x][fx ? cols-1-y : y]: one column of R per output row.
        const int column = m.flip_x ? cols - 1 - y : y;
        const uint8_t *src = turned + static_cast<std::ptrdiff_t>(column) * 3;
        std::ptrdiff_t step = stride;
        if (m.flip_y) {
            src += static_cast<std::ptrdiff_t>(rows - 1) * stride;
            step = -stride;
        }
        uint8_t *dst = out.data + static_cast<std::ptrdiff_t>(y) * out.row_stride;
        for (int x = 0; x < out.width; ++x, src += step, dst += 3) std::memcpy(dst, src, 3);
    }
}

}  // namespace fl
