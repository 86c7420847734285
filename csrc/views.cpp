// Views from one decode: the shared plan (checked boxes, scale, union window), the per-codec
// decode of the union (JPEG, a tiled JPEG's splice, a coeffs record) and each view's resize.
#include "views.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "coeffs.h"
#include "orientation.h"
#include "tiles.h"

namespace fl {
namespace {

// A region up to this size stays allocated between samples (a 3000 x 2000 image is 18 MB); a
// rare larger one is freed, not kept by every pool thread.
constexpr size_t kKeptRegionBytes = size_t(32) << 20;

// The union of the stored boxes, in stored pixels.
CropBox union_box(const CropBox *stored, int count) {
    int top = stored[0].top, left = stored[0].left;
    int bottom = top + stored[0].height, right = left + stored[0].width;
    for (int v = 1; v < count; ++v) {
        top = std::min(top, stored[v].top);
        left = std::min(left, stored[v].left);
        bottom = std::max(bottom, stored[v].top + stored[v].height);
        right = std::max(right, stored[v].left + stored[v].width);
    }
    return CropBox{top, left, bottom - top, right - left};
}

std::string decode_coeffs_views(const Record &record, int count, const DecodeOptions &options, DecodeScratch &scratch,
                                ViewsScratch &vs) {
    // Records are decoded as stored; a turned view of one is refused rather than given unturned.
    if (std::string why = coeffs::refuse_orientation(vs.views[0].out.orientation); !why.empty()) return why;
    coeffs::View view;
    if (std::string why = coeffs::open_record(record.data, record.size, view); !why.empty()) return why;
    char why[256];
    ViewPlanner planner(vs.views.data(), count, options, vs.stored.data());
    if (!planner.plan(view.geo.height, view.geo.width, vs.region, why, sizeof(why))) return why;
    ++scratch.decodes;
    return coeffs::decode_region(view, vs.region, scratch.resizer);
}

// A tiled record: the union of the views' boxes spliced from only the segments it needs (with
// the upsampling context of the shared scale), then decoded as a JPEG whose views are the
// same boxes moved to the splice's origin (as decode_one moves a crop).
std::string decode_tiled_views(const Record &record, int count, const tiles::Geometry &geometry,
                               const TileRef &tile, const DecodeOptions &options, DecodeScratch &scratch,
                               ViewsScratch &vs, std::vector<uint8_t> &splice) {
    char why[256];
    ViewPlanner whole(vs.views.data(), count, options, vs.stored.data());
    if (!whole.plan(static_cast<int>(geometry.height), static_cast<int>(geometry.width), vs.region, why, sizeof(why)))
        return std::string("crop: ") + why;
    const CropBox u = union_box(vs.stored.data(), count);
    if (covers_image(u, geometry)) {
        ++scratch.decodes;
        return decode_jpeg_region(record.data, record.size, whole, vs.region, scratch);
    }
    std::string failed;
    const tiles::Spliced spliced = splice_box(record, geometry, tile, u, vs.region.denom, splice, failed);
    if (!failed.empty()) return failed;
    const int sh = static_cast<int>(spliced.height), sw = static_cast<int>(spliced.width);
    for (int v = 0; v < count; ++v) {
        const CropBox &s = vs.stored[v];
        const CropBox local{s.top - static_cast<int>(spliced.y0), s.left - static_cast<int>(spliced.x0), s.height,
                            s.width};
        vs.views[v].crop = oriented_crop(local, sh, sw, vs.views[v].out.orientation);
    }
    ViewPlanner local(vs.views.data(), count, options, vs.stored.data());
    ++scratch.decodes;
    return decode_jpeg_region(splice.data(), spliced.size, local, vs.region, scratch);
}

std::string decode_union(const Record &record, int count, const TileRef *tile, const DecodeOptions &options,
                         DecodeScratch &scratch, ViewsScratch &vs, std::vector<uint8_t> &splice) {
    if (coeffs::looks_like_record(record.data, record.size))
        return decode_coeffs_views(record, count, options, scratch, vs);
    tiles::Geometry geometry;
    const int tiled = tile_geometry(tile, geometry);
    if (tiled < 0) return "tile table: header values out of range (damaged index)";
    if (tiled > 0) return decode_tiled_views(record, count, geometry, *tile, options, scratch, vs, splice);
    ViewPlanner planner(vs.views.data(), count, options, vs.stored.data());
    ++scratch.decodes;
    return decode_jpeg_region(record.data, record.size, planner, vs.region, scratch);
}

}  // namespace

bool ViewPlanner::plan(int stored_height, int stored_width, ScaledRegion &region, char *why, size_t why_size) {
    int denom = 8;
    for (int v = 0; v < count_; ++v) {
        if (!stored_crop_box(views_[v].crop, stored_height, stored_width, views_[v].out.orientation, stored_[v], why,
                             why_size))
            return false;
        denom = std::min(denom, dct_denominator(stored_[v], views_[v].out, options_));
    }
    region.denom = denom;
    region.scaled_width = (stored_width + denom - 1) / denom;  // libjpeg's jdiv_round_up
    region.scaled_height = (stored_height + denom - 1) / denom;
    int x0 = region.scaled_width, y0 = region.scaled_height, x1 = 0, y1 = 0;
    for (int v = 0; v < count_; ++v) {  // the union of the windows each view's resize reads
        const AxisWindow xs = scaled_window(stored_[v].left, stored_[v].width, denom, region.scaled_width);
        const AxisWindow ys = scaled_window(stored_[v].top, stored_[v].height, denom, region.scaled_height);
        x0 = std::min(x0, xs.first);
        x1 = std::max(x1, xs.end);
        y0 = std::min(y0, ys.first);
        y1 = std::max(y1, ys.end);
    }
    region.x0 = x0;
    region.y0 = y0;
    region.width = x1 - x0;
    region.height = y1 - y0;
    region.pixels.resize(static_cast<size_t>(region.width) * region.height * 3);  // may throw: caught by the caller
    return true;
}

void resize_view(const ScaledRegion &region, const CropBox &stored, const OutputSlot &out, DecodeScratch &scratch) {
    const bool turned = transposes(out.orientation);
    if (turned) scratch.turned.resize(static_cast<size_t>(out.height) * out.width * 3);
    const OutputSlot target = stored_target(out, scratch.turned.data());
    const AxisWindow xs = scaled_window(stored.left, stored.width, region.denom, region.scaled_width);
    const AxisWindow ys = scaled_window(stored.top, stored.height, region.denom, region.scaled_height);
    RowResizer &resizer = scratch.resizer;
    resizer.plan(xs.end - xs.first, xs.lo - xs.first, xs.hi - xs.first, ys.end - ys.first, ys.lo - ys.first,
                 ys.hi - ys.first,
                 ResizeTarget{target.data, target.height, target.width, target.row_stride, target.flip});
    const size_t bytes = static_cast<size_t>(xs.end - xs.first) * 3;
    resizer.start(bytes, 0);
    const size_t column = static_cast<size_t>(xs.first - region.x0) * 3;
    for (int r = resizer.first_row(); r < resizer.end_row(); ++r) {
        std::memcpy(resizer.row_buffer(), region.row(ys.first + r) + column, bytes);
        resizer.push_row();
    }
    if (turned) write_turned(scratch.turned.data(), out);
}

std::string decode_views_union(const Record &record, int count, const TileRef *tile, const DecodeOptions &options,
                               DecodeScratch &scratch, ViewsScratch &views, std::vector<uint8_t> &splice) {
    for (int v = 0; v < count; ++v)
        if (views.views[v].out.height < 1 || views.views[v].out.width < 1) return "output size must be at least 1x1";
    views.stored.resize(static_cast<size_t>(count));
    return decode_union(record, count, tile, options, scratch, views, splice);
}

void release_large_region(ViewsScratch &views) {
    if (views.region.pixels.capacity() > kKeptRegionBytes) std::vector<uint8_t>().swap(views.region.pixels);
}

}  // namespace fl
