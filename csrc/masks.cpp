// Nearest-neighbour crop/resize/flip of run-length label masks (see masks.h). The index maps
// use the same float64 arithmetic as fastloader/decode/masks.py's numpy path, so both pick the
// same source pixels; each run of a sampled source row becomes one memset of the output
// columns that sample it, and a source row sampled twice is a memcpy of the previous row.
#include "masks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace fl {
namespace {

// Source indices sampled by `out` output pixels over [start, start + length), clipped to
// [max(start, 0), min(start + length, limit) - 1]: index_map() of decode/masks.py.
std::vector<int64_t> index_map(int64_t start, int64_t length, int64_t out, int64_t limit) {
    std::vector<int64_t> index(static_cast<size_t>(out));
    const double scale = static_cast<double>(length) / static_cast<double>(out);
    const int64_t low = std::max<int64_t>(start, 0);
    const int64_t high = std::min(start + length, limit) - 1;
    for (int64_t i = 0; i < out; ++i) {
        const double centre = static_cast<double>(start) + (static_cast<double>(i) + 0.5) * scale;
        index[static_cast<size_t>(i)] =
            std::clamp(static_cast<int64_t>(std::floor(centre)), low, high);
    }
    return index;
}

}  // namespace

std::string mask_from_runs(const uint8_t* values, const uint32_t* lengths, size_t runs,
                           int64_t height, int64_t width, const int64_t crop[4], bool flip,
                           uint8_t* out, int64_t out_h, int64_t out_w) {
    // ends[k]: the flat position one past run k
    std::vector<uint64_t> ends(runs);
    uint64_t total = 0;
    for (size_t k = 0; k < runs; ++k) {
        total += lengths[k];
        ends[k] = total;
    }
    if (total != static_cast<uint64_t>(height) * static_cast<uint64_t>(width)) {
        return "its runs cover " + std::to_string(total) + " pixels, not its " +
               std::to_string(height) + " x " + std::to_string(width);
    }
    if (out_h <= 0 || out_w <= 0 || crop[2] <= 0 || crop[3] <= 0 || crop[0] >= height ||
        crop[1] >= width || crop[0] + crop[2] <= 0 || crop[1] + crop[3] <= 0) {
        return "the crop box lies outside the mask or the output is empty";
    }
    const std::vector<int64_t> rows = index_map(crop[0], crop[2], out_h, height);
    const std::vector<int64_t> cols = index_map(crop[1], crop[3], out_w, width);
    // first[c]: the first output column sampling source column c or one right of it (cols
    // ascend), so a run over source columns [a, b) fills output columns [first[a], first[b])
    std::vector<int64_t> first(static_cast<size_t>(width) + 1);
    for (int64_t c = 0, j = 0; c <= width; ++c) {
        while (j < out_w && cols[static_cast<size_t>(j)] < c) ++j;
        first[static_cast<size_t>(c)] = j;
    }
    for (int64_t i = 0; i < out_h; ++i) {
        uint8_t* row = out + i * out_w;
        if (i > 0 && rows[static_cast<size_t>(i)] == rows[static_cast<size_t>(i - 1)]) {
            std::memcpy(row, row - out_w, static_cast<size_t>(out_w));  // upscaled: same row
            continue;
        }
        const uint64_t base = static_cast<uint64_t>(rows[static_cast<size_t>(i)]) *
                              static_cast<uint64_t>(width);
        const uint64_t stop = base + static_cast<uint64_t>(width);
        // each run over this source row fills its output columns at once
        size_t k = static_cast<size_t>(std::upper_bound(ends.begin(), ends.end(), base) -
                                       ends.begin());
        for (uint64_t start = k ? ends[k - 1] : 0; k < runs && start < stop;
             start = ends[k], ++k) {
            const int64_t j0 = first[static_cast<size_t>(std::max(start, base) - base)];
            const int64_t j1 = first[static_cast<size_t>(std::min(ends[k], stop) - base)];
            if (j1 > j0) {
                std::memset(row + (flip ? out_w - j1 : j0), values[k], static_cast<size_t>(j1 - j0));
            }
        }
    }
    return "";
}

}  // namespace fl
