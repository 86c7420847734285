// libjpeg-turbo decoding that never exits the process: header, and the fused crop/scale/resize/flip.
#include "jpeg.h"
#include "jpeg_errors.h"
#include "orientation.h"

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>

// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>
#include <jerror.h>

namespace fl {
namespace {

using jpeg_errors::ErrorManager;

constexpr int kColumnPad = 2;

// Limits against hostile headers (jpeg_errors.h): Pillow's decompression-bomb threshold and a
// progressive scan limit.
using jpeg_errors::fail;
using jpeg_errors::install_error_manager;
using jpeg_errors::kMaxPixels;
using jpeg_errors::limit_scans;

// Pillow's JpegImageFile._open walks the markers before libjpeg sees the file and refuses some
// that libjpeg reads: a marker byte it does not know (0x01..0xBF: TEM included), and a JFIF
// APP0 or an Adobe APP14 shorter than 7 bytes (it reads a 16-bit field at offset 5). Walked
// the way it walks them (junk bytes, FF00 and FFFF padding skipped); "" when Pillow accepts.
const char *pillow_marker_problem(const uint8_t *d, size_t n) {
    size_t at = 2;
    while (at + 1 < n) {
        if (d[at] != 0xFF) { ++at; continue; }           // non-0xFF junk
        const uint8_t marker = d[at + 1];
        if (marker == 0xFF) { ++at; continue; }           // padding: the next FF starts over
        if (marker == 0x00) { at += 2; continue; }        // an escaped FF: skipped
        if (marker < 0xC0)
            return "no marker found where Pillow expects one (a JPEG marker byte below 0xC0)";
        const bool bare = marker == 0xC8 || (marker >= 0xD0 && marker <= 0xD9) ||
                          (marker >= 0xF0 && marker <= 0xFD);  // Pillow reads no length for these
        if (bare) { at += 2; continue; }
        if (at + 4 > n) return "";                       // libjpeg reports the truncation
        const size_t length = (static_cast<size_t>(d[at + 2]) << 8) | d[at + 3];
        const uint8_t *s = d + at + 4;
        const size_t avail = std::min(n - (at + 4), length >= 2 ? length - 2 : 0);
        const bool short_field = length >= 2 && length - 2 < 7;
        if (marker == 0xE0 && avail >= 4 && std::memcmp(s, "JFIF", 4) == 0 && short_field)
            return "JFIF APP0 segment is shorter than its version field";
        if (marker == 0xEE && avail >= 5 && std::memcmp(s, "Adobe", 5) == 0 && short_field)
            return "Adobe APP14 segment is shorter than its version field";
        if (marker == 0xDA || length < 2) return "";      // start of scan (or libjpeg's error)
        at += 2 + length;
    }
    return "";
}

const char *color_space_name(J_COLOR_SPACE space) {
    switch (space) {
        case JCS_GRAYSCALE: return "gray";
        case JCS_YCbCr: return "ycbcr";
        case JCS_RGB: return "rgb";
        case JCS_CMYK: return "cmyk";
        case JCS_YCCK: return "ycck";
        default: return "unknown";
    }
}

const char *subsampling_name(const jpeg_decompress_struct &cinfo) {
    if (cinfo.num_components == 1) return "gray";
    if (cinfo.num_components != 3) return "other";
    const jpeg_component_info *c = cinfo.comp_info;
    if (c[1].h_samp_factor != 1 || c[1].v_samp_factor != 1 || c[2].h_samp_factor != 1 ||
        c[2].v_samp_factor != 1)
        return "other";
    const int h = c[0].h_samp_factor, v = c[0].v_samp_factor;
    if (h == 1 && v == 1) return "4:4:4";
    if (h == 2 && v == 1) return "4:2:2";
    if (h == 2 && v == 2) return "4:2:0";
    if (h == 1 && v == 2) return "4:4:0";
    if (h == 4 && v == 1) return "4:1:1";
    return "other";
}

// Pillow reads JPEG CMYK as Adobe-inverted ("CMYK;I") and converts with cmyk2rgb; raw is
// what libjpeg returns, so Pillow's C = 255 - raw_c and its 255 - K is raw_k.
void cmyk_to_rgb(const uint8_t *raw, uint8_t *rgb, int width) {
    for (int x = 0; x < width; ++x, raw += 4, rgb += 3) {
        const int nk = raw[3];
        for (int c = 0; c < 3; ++c) {
            const int tmp = (255 - raw[c]) * nk + 128;
            const int v = nk - (((tmp >> 8) + tmp) >> 8);
            rgb[c] = static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
        }
    }
}

// The largest SIMD-friendly DCT scale denominator (8, 4, 2, else 1) that keeps the scaled crop
// at least kDctMargin times the output (DESIGN.md measured that the other M/8 scales do not
// pay). A scaled IDCT is not Pillow's filter: scaled right down to the output, textured photos
// came out up to MAE 7.4 (0-255) from the Pillow backend; stopping at twice the output still
// gave 2.25 on some crops, at three times 1.3, the antialiased bilinear passes doing the rest.
// tests/test_backend_pixels.py holds a varied corpus to MAE 2.
constexpr long kDctMargin = 3;

int choose_denominator(const CropBox &crop, const OutputSlot &out, const DecodeOptions &options) {
    if (!options.dct_scaling) return 1;
    for (int denom : {8, 4, 2}) {
        if (crop.width >= static_cast<long>(out.width) * denom * kDctMargin &&
            crop.height >= static_cast<long>(out.height) * denom * kDctMargin)
            return denom;
    }
    return 1;
}

// The asked box (of the image as `orientation` shows it) checked, as a box of the stored pixels.
CropBox resolve_crop(j_decompress_ptr cinfo, const CropBox &crop, int orientation) {
    const long stored_w = cinfo->image_width, stored_h = cinfo->image_height;
    const bool swap = transposes(orientation);
    const long w = swap ? stored_h : stored_w, h = swap ? stored_w : stored_h;
    if (static_cast<double>(w) * h > kMaxPixels) {
        char message[JMSG_LENGTH_MAX];
        std::snprintf(message, sizeof(message),
                      "image of %ldx%ld (HxW) pixels exceeds the decompression-bomb limit of %.0f", h, w,
                      kMaxPixels);
        fail(cinfo, message);
    }
    CropBox stored;
    char message[JMSG_LENGTH_MAX];
    if (!stored_crop_box(crop, static_cast<int>(stored_h), static_cast<int>(stored_w), orientation, stored, message,
                         sizeof(message)))
        fail(cinfo, message);
    return stored;
}

void set_output_color_space(j_decompress_ptr cinfo) {
    switch (cinfo->jpeg_color_space) {
        case JCS_GRAYSCALE:  // libjpeg-turbo replicates gray into RGB
        case JCS_YCbCr:
        case JCS_RGB: cinfo->out_color_space = JCS_RGB; break;
        case JCS_CMYK:
        case JCS_YCCK: cinfo->out_color_space = JCS_CMYK; break;
        default: fail(cinfo, "unsupported JPEG colour space (not gray, YCbCr, RGB, CMYK or YCCK)");
    }
}

// Reads rows [row_begin, row_end) of the started decompressor into the resizer, which writes
// out; RGB rows land in the resizer's own buffer, so nothing is copied before the first pass.
void read_and_resample(j_decompress_ptr cinfo, int col0, int row_begin, int row_end, DecodeScratch &s) {
    const int comps = cinfo->output_components;
    const int in_w = s.resizer.horizontal.in_size;
    if (comps == 4) {
        s.scanlines.resize(static_cast<size_t>(cinfo->output_width) * comps);
        s.resizer.start(static_cast<size_t>(in_w) * 3, 0);
    } else {
        s.resizer.start(static_cast<size_t>(cinfo->output_width) * comps, static_cast<size_t>(col0) * comps);
    }
    for (int r = row_begin; r < row_end; ++r) {
        JSAMPROW row = comps == 4 ? s.scanlines.data() : s.resizer.row_buffer();
        if (jpeg_read_scanlines(cinfo, &row, 1) != 1) fail(cinfo, "libjpeg returned no scanline");
        if (comps == 4) cmyk_to_rgb(s.scanlines.data() + static_cast<size_t>(col0) * 4, s.resizer.row_buffer(), in_w);
        s.resizer.push_row();
    }
}

// True when libjpeg will smooth blocks (a progressive file whose scans left low AC bits
// unsent: libjpeg's smoothing_ok): each block then reads its neighbours two blocks away, and
// a cropped window's edge would stand in for them.
bool block_smoothing(j_decompress_ptr cinfo) {
    if (!cinfo->progressive_mode || cinfo->coef_bits == nullptr || !cinfo->do_block_smoothing)
        return false;
    for (int ci = 0; ci < cinfo->num_components; ++ci)
        for (int k = 1; k <= 9; ++k)
            if (cinfo->coef_bits[ci][k] != 0) return true;
    return false;
}

// Spare columns each side of the crop, in scaled pixels: two for fancy upsampling, and with
// block smoothing two more iMCUs (the widest component's neighbour blocks) as well.
// libjpeg-turbo before 3.0.0 sets a component's width after jpeg_crop_scanline as if its IDCT
// had the luma's scaled size (fixed upstream in 3.0.0, "Fix calc w/sclg + 2x4,4x2 samp"). A
// scaled decode can give chroma a larger IDCT than luma to save upsampling (4:1:0 at 1/2 or
// 1/4); where such a component is still upsampled, its cropped columns come out wrong (MAE
// 1.8 on 4:1:0, measured on 2.1.5). Those decodes keep the whole width; others crop.
bool crops_columns_right(j_decompress_ptr cinfo) {
#if LIBJPEG_TURBO_VERSION_NUMBER >= 3000000
    (void)cinfo;
    return true;
#else
#if JPEG_LIB_VERSION >= 70
    const int min_size = cinfo->min_DCT_h_scaled_size;
#else
    const int min_size = cinfo->min_DCT_scaled_size;
#endif
    for (int ci = 0; ci < cinfo->num_components; ++ci) {
        const jpeg_component_info &c = cinfo->comp_info[ci];
#if JPEG_LIB_VERSION >= 70
        const int size = c.DCT_h_scaled_size;
#else
        const int size = c.DCT_scaled_size;
#endif
        const bool upsampled = c.h_samp_factor * size != cinfo->max_h_samp_factor * min_size ||
                               c.v_samp_factor * size != cinfo->max_v_samp_factor * min_size;
        if (size != min_size && upsampled) return false;
    }
    return true;
#endif
}

int column_pad(j_decompress_ptr cinfo, int denom) {
    if (!block_smoothing(cinfo)) return kColumnPad;
    return kColumnPad + 2 * cinfo->max_h_samp_factor * (DCTSIZE / denom);
}

// Decodes only the scaled columns [first, end) of the started decompressor (and a pad): libjpeg
// widens the window to iMCU boundaries; returns its first column. Two spare columns each side:
// fancy upsampling treats the window's edges as image edges, so without them the crop's
// first/last column would differ from a full decode.
int crop_columns(j_decompress_ptr cinfo, int first, int end, int denom) {
    const int pad = column_pad(cinfo, denom);
    const int pad_first = std::max(0, first - pad);
    const int pad_end = std::min(static_cast<int>(cinfo->output_width), end + pad);
    JDIMENSION xoffset = static_cast<JDIMENSION>(pad_first);
    JDIMENSION width = static_cast<JDIMENSION>(pad_end - pad_first);
    if (width >= cinfo->output_width || !crops_columns_right(cinfo)) return 0;
    jpeg_crop_scanline(cinfo, &xoffset, &width);
    return static_cast<int>(xoffset);
}

// Must not own C++ objects with destructors: libjpeg errors longjmp straight out of it.
// out is the stored-orientation target (orientation.h's stored_target); asked is a box of the
// image as `orientation` shows it.
void decode_body(j_decompress_ptr cinfo, const uint8_t *data, size_t size, const CropBox &asked,
                 int orientation, const OutputSlot &out, DecodeScratch &s, const DecodeOptions &options) {
    jpeg_progress_mgr progress{};
    progress.progress_monitor = limit_scans;
    cinfo->progress = &progress;
    if (const char *problem = pillow_marker_problem(data, size); *problem) fail(cinfo, problem);
    jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
    jpeg_read_header(cinfo, TRUE);
    const CropBox crop = resolve_crop(cinfo, asked, orientation);
    const int denom = choose_denominator(crop, out, options);
    cinfo->scale_num = 1;
    cinfo->scale_denom = static_cast<unsigned int>(denom);
    set_output_color_space(cinfo);
    jpeg_start_decompress(cinfo);

    const AxisWindow xs = scaled_window(crop.left, crop.width, denom, static_cast<int>(cinfo->output_width));
    const AxisWindow ys = scaled_window(crop.top, crop.height, denom, static_cast<int>(cinfo->output_height));
    s.resizer.plan(xs.end - xs.first, xs.lo - xs.first, xs.hi - xs.first, ys.end - ys.first,
                   ys.lo - ys.first, ys.hi - ys.first,
                   ResizeTarget{out.data, out.height, out.width, out.row_stride, out.flip});

    const int col0 = xs.first - crop_columns(cinfo, xs.first, xs.end, denom);

    // Rows above the crop are entropy-decoded but not IDCT'd, colour-converted or upsampled.
    const int row_begin = ys.first + s.resizer.first_row();
    if (row_begin > 0 &&
        jpeg_skip_scanlines(cinfo, static_cast<JDIMENSION>(row_begin)) != static_cast<JDIMENSION>(row_begin))
        fail(cinfo, "libjpeg could not skip to the crop's first row");
    read_and_resample(cinfo, col0, row_begin, ys.first + s.resizer.end_row(), s);
    jpeg_abort_decompress(cinfo);  // stop after the crop's last row
}

// decode_body for a planner's region (jpeg.h): the scale and window are the planner's, and the
// window's scaled pixels go through an identity resize (a copy) into region.pixels.
void region_body(j_decompress_ptr cinfo, const uint8_t *data, size_t size, RegionPlanner &planner,
                 ScaledRegion &region, DecodeScratch &s) {
    jpeg_progress_mgr progress{};
    progress.progress_monitor = limit_scans;
    cinfo->progress = &progress;
    if (const char *problem = pillow_marker_problem(data, size); *problem) fail(cinfo, problem);
    jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
    jpeg_read_header(cinfo, TRUE);
    resolve_crop(cinfo, CropBox{}, 1);  // the decompression-bomb check
    char why[JMSG_LENGTH_MAX];
    if (!planner.plan(static_cast<int>(cinfo->image_height), static_cast<int>(cinfo->image_width), region, why,
                      sizeof(why)))
        fail(cinfo, why);
    cinfo->scale_num = 1;
    cinfo->scale_denom = static_cast<unsigned int>(region.denom);
    set_output_color_space(cinfo);
    jpeg_start_decompress(cinfo);
    if (static_cast<int>(cinfo->output_width) != region.scaled_width ||
        static_cast<int>(cinfo->output_height) != region.scaled_height)
        fail(cinfo, "libjpeg's scaled size is not the planned one");
    s.resizer.plan(region.width, 0.0f, static_cast<float>(region.width), region.height, 0.0f,
                   static_cast<float>(region.height),
                   ResizeTarget{region.pixels.data(), region.height, region.width,
                                static_cast<std::ptrdiff_t>(region.width) * 3, false});
    const int col0 = region.x0 - crop_columns(cinfo, region.x0, region.x0 + region.width, region.denom);
    if (region.y0 > 0 &&
        jpeg_skip_scanlines(cinfo, static_cast<JDIMENSION>(region.y0)) != static_cast<JDIMENSION>(region.y0))
        fail(cinfo, "libjpeg could not skip to the region's first row");
    read_and_resample(cinfo, col0, region.y0, region.y0 + region.height, s);
    jpeg_abort_decompress(cinfo);
}

// Runs body(cinfo) on a fresh decompressor and destroys it: "" when body finished, libjpeg's
// message when it failed (its error manager longjmps back to this frame, which outlives body).
// A C++ exception from body (bad_alloc from a resizer's or a planner's buffers) frees libjpeg's
// pools and goes on to the caller. Body must hold nothing with a destructor across libjpeg
// calls: a longjmp skips destructors.
template <class Body>
std::string with_decompressor(Body &&body) {
    jpeg_decompress_struct cinfo;
    ErrorManager err;
    install_error_manager(cinfo, err);
    if (setjmp(err.jump)) {
        jpeg_destroy_decompress(&cinfo);
        return error_text(err);
    }
    jpeg_create_decompress(&cinfo);
    try {
        body(&cinfo);
    } catch (...) {
        jpeg_destroy_decompress(&cinfo);
        throw;
    }
    jpeg_destroy_decompress(&cinfo);
    return {};
}

}  // namespace

bool stored_crop_box(const CropBox &crop, int stored_height, int stored_width, int orientation, CropBox &stored,
                     char *why, size_t why_size) {
    if (crop.height == 0 && crop.width == 0) {
        stored = CropBox{0, 0, stored_height, stored_width};
        return true;
    }
    const bool swap = transposes(orientation);
    const long h = swap ? stored_width : stored_height, w = swap ? stored_height : stored_width;
    if (crop.top < 0 || crop.left < 0 || crop.height < 1 || crop.width < 1 ||
        crop.top + static_cast<long>(crop.height) > h || crop.left + static_cast<long>(crop.width) > w) {
        std::snprintf(why, why_size,
                      "crop (top=%d, left=%d, height=%d, width=%d) does not fit in the %ldx%ld "
                      "(HxW) image%s",
                      crop.top, crop.left, crop.height, crop.width, h, w,
                      orientation >= 2 && orientation <= 8 ? " (turned by its EXIF orientation)" : "");
        return false;
    }
    stored = stored_crop(crop, stored_height, stored_width, orientation);
    return true;
}

std::string decode_jpeg_region(const uint8_t *data, size_t size, RegionPlanner &planner, ScaledRegion &region,
                               DecodeScratch &scratch) {
    return with_decompressor(
        [&](j_decompress_ptr cinfo) { region_body(cinfo, data, size, planner, region, scratch); });
}

AxisWindow scaled_window(int start, int length, int denom, int scaled_size) {
    AxisWindow w;
    w.lo = static_cast<float>(static_cast<double>(start) / denom);
    w.hi = static_cast<float>(static_cast<double>(start + length) / denom);
    w.first = static_cast<int>(std::floor(w.lo));
    w.end = std::min(static_cast<int>(std::ceil(w.hi)), scaled_size);
    if (w.end <= w.first) w.end = w.first + 1;
    return w;
}

int dct_denominator(const CropBox &crop, const OutputSlot &out, const DecodeOptions &options) {
    if (!transposes(out.orientation)) return choose_denominator(crop, out, options);
    OutputSlot stored = out;  // the decode scales to the transposed size
    stored.height = out.width;
    stored.width = out.height;
    return choose_denominator(crop, stored, options);
}

bool looks_like_jpeg(const uint8_t *data, size_t size) {
    return size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF;
}

std::string read_jpeg_header(const uint8_t *data, size_t size, JpegHeader &header) {
    return with_decompressor([&](j_decompress_ptr cinfo) {
        if (const char *problem = pillow_marker_problem(data, size); *problem) fail(cinfo, problem);
        jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
        jpeg_read_header(cinfo, TRUE);
        header.width = static_cast<int>(cinfo->image_width);
        header.height = static_cast<int>(cinfo->image_height);
        header.components = cinfo->num_components;
        header.color_space = color_space_name(cinfo->jpeg_color_space);
        header.subsampling = subsampling_name(*cinfo);
        header.progressive = cinfo->progressive_mode != 0;
    });
}

std::string decode_jpeg_into(const uint8_t *data, size_t size, const CropBox &crop,
                             const OutputSlot &out, DecodeScratch &scratch,
                             const DecodeOptions &options) {
    if (out.height < 1 || out.width < 1) return "output size must be at least 1x1";
    const bool turned = transposes(out.orientation);
    if (turned) scratch.turned.resize(static_cast<size_t>(out.height) * out.width * 3);  // may throw: no libjpeg state yet
    const OutputSlot target = stored_target(out, scratch.turned.data());
    std::string why = with_decompressor([&](j_decompress_ptr cinfo) {
        decode_body(cinfo, data, size, crop, out.orientation, target, scratch, options);
    });
    if (why.empty() && turned) write_turned(scratch.turned.data(), out);
    return why;
}

}  // namespace fl
