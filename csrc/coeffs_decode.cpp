// Coeffs record -> pixels: entropy-decodes only the segments a crop touches, reconstructs only
// its blocks (plus the chroma context fancy upsampling reads), at the DCT scale the JPEG path
// takes for the crop and output, and streams its RGB rows into the resizer, as decode_jpeg_into
// does for a JPEG.
#include <algorithm>
#include <memory>
#include <new>

#include "coeffs_internal.h"

namespace fl::coeffs {

namespace {

// The part of one component a rectangle needs: samples [sx0, sx1] x [sy0, sy1] (inclusive),
// reconstructed into a plane holding its blocks [bx0, bx1] x [by0, by1] of bs x bs samples.
struct Region {
    int sx0, sx1, sy0, sy1, bx0, bx1, by0, by1, bs;
    ptrdiff_t stride;
    uint8_t *plane;
    const uint8_t *row(int sy) const { return plane + (sy - by0 * bs) * stride; }
    int col0() const { return bx0 * bs; }
};

// Planes up to this size stay allocated between decodes (a 4k x 4k luma plane is 16 MiB).
constexpr size_t kKeptPlaneBytes = size_t(32) << 20;

// Per-thread buffers, reused across decodes (the loader's threads are persistent).
struct Scratch {
    std::vector<int16_t> blocks;
    std::unique_ptr<uint8_t[]> planes[kMaxComponents];
    size_t capacity[kMaxComponents] = {0, 0, 0, 0};
    std::vector<uint8_t> rows[kMaxComponents];
    std::vector<int16_t> cs;
};

Scratch &scratch() {
    static thread_local Scratch s;
    return s;
}

// Samples [lo, hi] of an axis a component at ratio r needs for output pixels [a, b): fancy
// upsampling (r = 2) reads one sample beyond each side, replication (r > 2, or unfancy) none.
void axis_need(int a, int b, int r, bool fancy, int real, int &lo, int &hi) {
    if (r == 1) {
        lo = a;
        hi = std::min(b - 1, real - 1);
        return;
    }
    const int pad = r == 2 && fancy ? 1 : 0;
    lo = std::max(0, a / r - pad);
    hi = std::min(real - 1, (b - 1) / r + pad);
}

void plan_regions(const Scaled &sc, int ncomp, int xa, int xb, int ya, int yb, Region *regions, Scratch &s) {
    for (int i = 0; i < ncomp; ++i) {
        const Sampling &k = sc.comps[i];
        Region &r = regions[i];
        axis_need(xa, xb, k.rh, k.fancy, k.dw, r.sx0, r.sx1);
        axis_need(ya, yb, k.rv, k.fancy, k.dh, r.sy0, r.sy1);
        r.bs = k.bs;
        r.bx0 = r.sx0 / k.bs;
        r.bx1 = r.sx1 / k.bs;
        r.by0 = r.sy0 / k.bs;
        r.by1 = r.sy1 / k.bs;
        r.stride = ptrdiff_t(r.bx1 - r.bx0 + 1) * k.bs;
        const size_t bytes = size_t(r.stride) * size_t(r.by1 - r.by0 + 1) * k.bs + 64;  // SIMD slack
        if (s.capacity[i] < bytes) {
            s.planes[i].reset();
            s.capacity[i] = 0;
            s.planes[i].reset(new uint8_t[bytes]);
            s.capacity[i] = bytes;
        }
        r.plane = s.planes[i].get();
    }
}

// The MCU rows and columns whose blocks the regions hold.
struct Span {
    int mr0, mr1, mc0, mc1;
};

Span span_of(const Geometry &g, const Region *regions) {
    Span sp{g.mcu_rows, -1, g.mcu_cols, -1};
    for (int i = 0; i < g.ncomp; ++i) {
        const Component &k = g.comps[i];
        sp.mr0 = std::min(sp.mr0, regions[i].by0 / k.v);
        sp.mr1 = std::max(sp.mr1, regions[i].by1 / k.v);
        sp.mc0 = std::min(sp.mc0, regions[i].bx0 / k.h);
        sp.mc1 = std::max(sp.mc1, regions[i].bx1 / k.h);
    }
    return sp;
}

// Entropy-decodes MCU row `row`'s segments the regions touch and IDCTs their blocks inside them.
std::string reconstruct_row(const View &view, const Span &sp, int row, Region *regions, Scratch &s) {
    const Geometry &g = view.geo;
    const Kernels &kern = kernels();
    Idct idct[kMaxComponents];
    for (int ci = 0; ci < g.ncomp; ++ci) idct[ci] = idct_for(kern, regions[ci].bs);
    for (int seg = sp.mc0 / g.seg_mcus; seg <= sp.mc1 / g.seg_mcus; ++seg) {
        if (!decode_segment(view, row, seg, s.blocks.data()))
            return "coeffs record is damaged: segment " + std::to_string(seg) + " of MCU row " +
                   std::to_string(row) + " does not decode";
        const int16_t *blk = s.blocks.data();
        const int m1 = std::min(g.mcu_cols, (seg + 1) * g.seg_mcus);
        for (int m = seg * g.seg_mcus; m < m1; ++m)
            for (int ci = 0; ci < g.ncomp; ++ci) {
                const Component &k = g.comps[ci];
                const Region &r = regions[ci];
                for (int yy = 0; yy < k.v; ++yy)
                    for (int xx = 0; xx < k.h; ++xx, blk += 64) {
                        const int by = row * k.v + yy, bx = m * k.h + xx;
                        if (by < r.by0 || by > r.by1 || bx < r.bx0 || bx > r.bx1) continue;
                        idct[ci](blk, k.quant, r.plane + (by - r.by0) * r.bs * r.stride + (bx - r.bx0) * r.bs,
                                 r.stride);
                    }
            }
    }
    return {};
}

// The last output row every component has its samples for once MCU rows up to `row` are
// reconstructed (fancy upsampling halved vertically reads one chroma row further down).
int ready_until(const Geometry &g, const Scaled &sc, const Region *regions, int row) {
    int ready = 1 << 30;
    for (int i = 0; i < g.ncomp; ++i) {
        const int rv = sc.comps[i].rv;
        const int last = (row + 1) * g.comps[i].v * regions[i].bs - 1;
        if (last >= regions[i].sy1) continue;  // all the rows this component needs are in
        ready = std::min(ready, rv == 1 ? last : rv == 2 ? 2 * last - 1 : (last + 1) * rv - 1);
    }
    return ready;
}

// Component i's samples at full resolution for output row y, columns [xa, xb): a pointer into
// its plane, or its upsampled row in s.rows[i]. libjpeg's choices: fancy (triangle) filters for
// h2v1, h1v2 and h2v2; plain replication for those 2 samples wide or less when halved
// horizontally, for every other integer ratio (int_upsample: 4:1:1 and the like), and for all
// of them at 1/8 scale (no fancy upsampling of 1x1 blocks).
const uint8_t *full_row(const Sampling &k, const Region &r, int y, int xa, int xb, Scratch &s, int i) {
    const int n = xb - xa, col0 = r.col0();
    if (k.rh == 1 && k.rv == 1) return r.row(y) + (xa - col0);
    uint8_t *out = s.rows[i].data();
    const int c = y / k.rv;
    const uint8_t *a = r.row(c);
    if (k.rv == 2 && k.rh == 1 && k.fancy) {  // h1v2: 3:1 with the nearer neighbour row, +1 / +2 rounding
        const int other = (y & 1) ? std::min(c + 1, k.dh - 1) : std::max(c - 1, 0);
        kernels().h1v2(a + (xa - col0), r.row(other) + (xa - col0), n, (y & 1) ? 2 : 1, out);
        return out;
    }
    if (k.rh != 2 || k.rv > 2 || k.dw <= 2 || !k.fancy) {  // replication
        for (int x = 0; x < n; ++x) out[x] = a[(xa + x) / k.rh - col0];
        return out;
    }
    if (k.rv == 2) {
        const int other = (y & 1) ? std::min(c + 1, k.dh - 1) : std::max(c - 1, 0);
        kernels().h2v2(a, r.row(other), col0, k.dw, xa, xb, out, s.cs.data());
        return out;
    }
    kernels().h2v1(a, col0, k.dw, xa, xb, out, reinterpret_cast<uint8_t *>(s.cs.data()));
    return out;
}

// What the JPEG path does with libjpeg's CMYK output (jpeg.cpp's cmyk_to_rgb: Pillow's
// "CMYK;I" cmyk2rgb): rgb = nk - ((t >> 8) + t) >> 8 with t = (255 - raw) nk + 128, nk the raw K.
// YCCK is first turned into that raw CMYK as libjpeg's ycck_cmyk_convert does (255 minus the
// YCbCr->RGB of the first three), so 255 - raw is that RGB value.
void cmyk_row(bool ycck, const uint8_t *const *c, uint8_t *out, int n) {
    uint8_t inv[3][64];  // 255 - raw C, M, Y for up to 64 pixels at a time
    for (int x0 = 0; x0 < n; x0 += 64) {
        const int m = std::min(64, n - x0);
        if (ycck) {
            uint8_t rgb[3 * 64];
            scalar_kernels().ycc_rgb(c[0] + x0, c[1] + x0, c[2] + x0, rgb, m);
            for (int x = 0; x < m; ++x)
                for (int k = 0; k < 3; ++k) inv[k][x] = rgb[3 * x + k];
        } else {
            for (int k = 0; k < 3; ++k)
                for (int x = 0; x < m; ++x) inv[k][x] = uint8_t(255 - c[k][x0 + x]);
        }
        for (int x = 0; x < m; ++x) {
            const int nk = c[3][x0 + x];
            for (int k = 0; k < 3; ++k) {
                const int t = inv[k][x] * nk + 128;
                out[3 * (x0 + x) + k] = uint8_t(std::clamp(nk - (((t >> 8) + t) >> 8), 0, 255));
            }
        }
    }
}

void color_row(const Geometry &g, const uint8_t *const *c, uint8_t *out, int n) {
    if (g.color == Color::kYCbCr) {
        kernels().ycc_rgb(c[0], c[1], c[2], out, n);
    } else if (g.color == Color::kCmyk || g.color == Color::kYcck) {
        cmyk_row(g.color == Color::kYcck, c, out, n);
    } else if (g.color == Color::kGrey) {  // libjpeg-turbo replicates grey into RGB
        for (int x = 0; x < n; ++x) out[3 * x] = out[3 * x + 1] = out[3 * x + 2] = c[0][x];
    } else {
        for (int x = 0; x < n; ++x) {
            out[3 * x] = c[0][x];
            out[3 * x + 1] = c[1][x];
            out[3 * x + 2] = c[2][x];
        }
    }
}

std::string check_crop(const Geometry &g, const CropBox &asked, CropBox &crop) {
    if (asked.height == 0 && asked.width == 0) {
        crop = CropBox{0, 0, g.height, g.width};
        return {};
    }
    crop = asked;
    if (crop.top < 0 || crop.left < 0 || crop.height < 1 || crop.width < 1 ||
        crop.top + long(crop.height) > g.height || crop.left + long(crop.width) > g.width)
        return "crop (top=" + std::to_string(crop.top) + ", left=" + std::to_string(crop.left) +
               ", height=" + std::to_string(crop.height) + ", width=" + std::to_string(crop.width) +
               ") does not fit in the " + std::to_string(g.height) + "x" + std::to_string(g.width) +
               " (HxW) image";
    return {};
}

// Reconstructs the scaled pixels [xa, xb) x [ya, yb) MCU row by MCU row, each output row
// coloured and pushed to the resizer as soon as its samples are in: the planes' rows are still
// in cache when read again.
std::string stream_rows(const View &view, const Scaled &sc, int xa, int xb, int ya, int yb,
                        RowResizer &resizer, Scratch &s) {
    const Geometry &g = view.geo;
    Region regions[kMaxComponents];
    plan_regions(sc, g.ncomp, xa, xb, ya, yb, regions, s);
    for (int i = 0; i < g.ncomp; ++i) s.rows[i].resize(size_t(xb - xa) + 64);
    s.cs.resize(size_t(g.width) + 64);  // at least every component's dw at any scale
    s.blocks.resize(size_t(g.seg_mcus) * g.blocks_per_mcu * 64);
    resizer.start(size_t(xb - xa) * 3, 0);
    const Span sp = span_of(g, regions);
    int y = ya;
    for (int row = sp.mr0; row <= sp.mr1; ++row) {
        if (std::string why = reconstruct_row(view, sp, row, regions, s); !why.empty()) return why;
        const int until = row == sp.mr1 ? yb - 1 : std::min(yb - 1, ready_until(g, sc, regions, row));
        for (; y <= until; ++y) {
            const uint8_t *c[kMaxComponents] = {};
            for (int i = 0; i < g.ncomp; ++i) c[i] = full_row(sc.comps[i], regions[i], y, xa, xb, s, i);
            color_row(g, c, resizer.row_buffer(), xb - xa);
            resizer.push_row();
        }
    }
    return {};
}

void release_large_planes(const Geometry &g, Scratch &s) {
    for (int i = 0; i < g.ncomp; ++i)  // a rare huge image's planes are not kept per thread
        if (s.capacity[i] > kKeptPlaneBytes) {
            s.planes[i].reset();
            s.capacity[i] = 0;
        }
}

}  // namespace

std::string decode_into(const uint8_t *data, size_t size, const CropBox &asked, const OutputSlot &out,
                        RowResizer &resizer, const DecodeOptions &options) {
    if (out.height < 1 || out.width < 1) return "output size must be at least 1x1";
    if (std::string why = refuse_orientation(out.orientation); !why.empty()) return why;
    View view;
    if (std::string why = open_record(data, size, view); !why.empty()) return why;
    const Geometry &g = view.geo;
    CropBox crop;
    if (std::string why = check_crop(g, asked, crop); !why.empty()) return why;
    // The JPEG path's scale, window and resample (jpeg.cpp's decode_body), so both give one image.
    const int denom = dct_denominator(crop, out, options);
    const Scaled sc = scale_geometry(g, denom);
    const AxisWindow xs = scaled_window(crop.left, crop.width, denom, sc.width);
    const AxisWindow ys = scaled_window(crop.top, crop.height, denom, sc.height);
    resizer.plan(xs.end - xs.first, xs.lo - xs.first, xs.hi - xs.first, ys.end - ys.first, ys.lo - ys.first,
                 ys.hi - ys.first, ResizeTarget{out.data, out.height, out.width, out.row_stride, out.flip});
    Scratch &s = scratch();
    std::string why = stream_rows(view, sc, xs.first, xs.end, ys.first + resizer.first_row(),
                                  ys.first + resizer.end_row(), resizer, s);
    release_large_planes(g, s);
    return why;
}

std::string decode_region(const View &view, ScaledRegion &region, RowResizer &resizer) {
    const Scaled sc = scale_geometry(view.geo, region.denom);
    if (sc.width != region.scaled_width || sc.height != region.scaled_height)
        return "coeffs record: the scaled size is not the planned one";
    const int w = region.width, h = region.height;  // an identity resize: the window copied
    resizer.plan(w, 0.0f, float(w), h, 0.0f, float(h), ResizeTarget{region.pixels.data(), h, w, ptrdiff_t(w) * 3, false});
    Scratch &s = scratch();
    std::string why = stream_rows(view, sc, region.x0, region.x0 + w, region.y0, region.y0 + h, resizer, s);
    release_large_planes(view.geo, s);
    return why;
}

std::string decode_scaled(const uint8_t *data, size_t size, int denom, const OutputSlot &out, RowResizer &resizer) {
    if (denom != 1 && denom != 2 && denom != 4 && denom != 8) return "denom must be 1, 2, 4 or 8";
    View view;
    if (std::string why = open_record(data, size, view); !why.empty()) return why;
    const Scaled sc = scale_geometry(view.geo, denom);
    if (out.height != sc.height || out.width != sc.width)
        return "out must be " + std::to_string(sc.height) + "x" + std::to_string(sc.width) + " (HxW) at 1/" +
               std::to_string(denom);
    resizer.plan(sc.width, 0.0f, float(sc.width), sc.height, 0.0f, float(sc.height),
                 ResizeTarget{out.data, out.height, out.width, out.row_stride, out.flip});  // identity
    return stream_rows(view, sc, 0, sc.width, resizer.first_row(), resizer.end_row(), resizer, scratch());
}

}  // namespace fl::coeffs
