// Several views of one record from one decode (BatchDecoder::decode_views): the record is read
// and entropy-decoded once, over the union of its views' boxes at the DCT scale the most
// demanding view allows, and each view is resized from that decode as decode_jpeg_into resizes a
// crop: where a view's own scale is the shared one, it gets decode_jpeg_into's very bytes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "batch.h"
#include "jpeg.h"

namespace fl {

// One view of a sample: its box (of the image as out.orientation shows it; 0 x 0: the whole
// image) and its slot (size, flip, orientation). Every view of a sample has its orientation.
struct ViewTarget {
    CropBox crop;
    OutputSlot out;
};

// Plans a sample's shared decode once the stored image's size is known: each view's box checked
// and mapped to the stored pixels (into stored[v]), the largest DCT scale every view allows (the
// smallest of their dct_denominator), and the union of their scaled windows, region.pixels sized.
class ViewPlanner : public RegionPlanner {
public:
    ViewPlanner(const ViewTarget *views, int count, const DecodeOptions &options, CropBox *stored)
        : views_(views), count_(count), options_(options), stored_(stored) {}
    bool plan(int stored_height, int stored_width, ScaledRegion &region, char *why, size_t why_size) override;

private:
    const ViewTarget *views_;
    int count_;
    DecodeOptions options_;
    CropBox *stored_;
};

// Per-thread buffers of decode_views: the views of the sample at hand, their stored boxes and
// the shared decode (a tiled record's splice goes to the thread's BatchDecoder splice buffer).
struct ViewsScratch {
    std::vector<ViewTarget> views;
    std::vector<CropBox> stored;
    ScaledRegion region;
};

// Writes the stored box (of region's image) resized into out, turned and mirrored as
// decode_jpeg_into writes a crop (Pillow's bilinear taps over the box's fractional window).
void resize_view(const ScaledRegion &region, const CropBox &stored, const OutputSlot &out, DecodeScratch &scratch);

// Decodes record once, the union of views.views[0..count) (views.region; views.stored gets their
// boxes in its stored pixels): "" or why not. Each view is then resize_view(views.region,
// views.stored[v], views.views[v].out, scratch). tile: the record's restart-tile table, or
// nullptr; splice: the thread's buffer for a tiled record's splice (grown as needed).
// ++scratch.decodes for the one decode it runs.
std::string decode_views_union(const Record &record, int count, const TileRef *tile, const DecodeOptions &options,
                               DecodeScratch &scratch, ViewsScratch &views, std::vector<uint8_t> &splice);

// Frees a rare large region after its sample, rather than keeping it in every pool thread.
void release_large_region(ViewsScratch &views);

}  // namespace fl
