// BatchDecoder::decode_views: a batch of records, each decoded once into all of its views on the
// pool (views.h), one status a sample, never an exception.
#include <cstring>
#include <functional>

#include "batch.h"
#include "views.h"

namespace fl {
namespace {

// Zero-fills sample k's slot in every view (a failed sample).
void zero_views(const ViewOutputs &views, size_t k) {
    for (int v = 0; v < views.count; ++v) {
        const size_t bytes = static_cast<size_t>(views.heights[v]) * views.widths[v] * 3;
        std::memset(views.outs[v] + k * bytes, 0, bytes);
    }
}

// View v of sample k into its planar output, if it has one.
void write_view_planar(const ViewOutputs &views, int v, size_t k) {
    if (views.planars[v].data == nullptr) return;
    const size_t pixels = static_cast<size_t>(views.heights[v]) * views.widths[v];
    write_planar(views.outs[v] + k * pixels * 3, pixels, k, views.planars[v]);
}

}  // namespace

std::string BatchDecoder::decode_sample_views(const Record &record, size_t k, const ViewOutputs &views,
                                              int orientation, const TileRef *tile, int slot,
                                              const DecodeOptions &options) {
    ViewsScratch &vs = *views_[slot];
    vs.views.resize(static_cast<size_t>(views.count));
    for (int v = 0; v < views.count; ++v) {
        const size_t at = k * views.count + v;
        const int32_t *c = views.crops + 4 * at;
        const int height = views.heights[v], width = views.widths[v];
        const std::ptrdiff_t stride = static_cast<std::ptrdiff_t>(width) * 3;
        uint8_t *dst = views.outs[v] + k * static_cast<size_t>(height) * stride;
        vs.views[v] = ViewTarget{CropBox{c[0], c[1], c[2], c[3]},
                                 OutputSlot{dst, height, width, stride, views.flips[at], orientation}};
    }
    std::string why = decode_views_union(record, views.count, tile, options, *scratch_[slot], vs, splice_[slot]);
    if (why.empty())  // each view resized, given its ops and made planar while it is in cache
        for (int v = 0; v < views.count; ++v) {
            const OutputSlot &out = vs.views[v].out;
            resize_view(vs.region, vs.stored[v], out, *scratch_[slot]);
            views.programs[v].apply(k, out.data, out.height, out.width, *pixels_[slot]);
            write_view_planar(views, v, k);
        }
    release_large_region(vs);
    return why;
}

void BatchDecoder::decode_views(const std::vector<Record> &records, const ViewOutputs &views,
                                const DecodeOptions &options, std::vector<std::string> &errors,
                                std::vector<size_t> &skipped, const TileRef *tiles, const uint8_t *orientations) {
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t n = records.size();
    errors.assign(n, std::string());
    std::vector<char> is_jpeg;
    prepare(records, is_jpeg, skipped);
    const std::function<void(size_t, int)> task = [&](size_t k, int slot) {
        if (!is_jpeg[k]) return;
        const int orientation = orientations != nullptr ? orientations[k] : 1;
        try {  // the whole body: nothing may escape a pool task (bad_alloc included)
            errors[k] = decode_sample_views(records[k], k, views, orientation, tiles ? &tiles[k] : nullptr, slot,
                                            options);
            if (!errors[k].empty()) {  // every view zero, and its planar the zeros converted
                zero_views(views, k);
                for (int v = 0; v < views.count; ++v) write_view_planar(views, v, k);
            }
        } catch (...) {
            zero_views(views, k);
            // 14 characters fit std::string's inline buffer: this assignment cannot throw.
            errors[k] = "out of memory";
        }
    };
    pool_.run(n, task);
}

}  // namespace fl
