// JPEG -> coeffs record: the quantized coefficients from jpeg_read_coefficients, never pixels.
#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>
#include <jerror.h>

#include "coeffs_internal.h"
#include "jpeg_errors.h"

namespace fl::coeffs {

namespace {


using jpeg_errors::ErrorManager;

using jpeg_errors::fail;
using jpeg_errors::install_error_manager;
using jpeg_errors::limit_scans;

// The kinds reconstructed exactly: grey, 3-component YCbCr or RGB and 4-component CMYK or
// YCCK, any integer sampling ratios libjpeg decodes.
void check_kind(j_decompress_ptr cinfo, Geometry &g) {
    const int n = cinfo->num_components;
    if (n == 1 && cinfo->jpeg_color_space == JCS_GRAYSCALE) {
        g.color = Color::kGrey;
    } else if (n == 3 && cinfo->jpeg_color_space == JCS_YCbCr) {
        g.color = Color::kYCbCr;
    } else if (n == 3 && cinfo->jpeg_color_space == JCS_RGB) {
        g.color = Color::kRgb;
    } else if (n == 4 && cinfo->jpeg_color_space == JCS_CMYK) {
        g.color = Color::kCmyk;
    } else if (n == 4 && cinfo->jpeg_color_space == JCS_YCCK) {
        g.color = Color::kYcck;
    } else {
        fail(cinfo, "JPEG colour space is not grey, YCbCr, RGB, CMYK or YCCK (keep it JPEG: --codec jpeg)");
    }
    g.ncomp = n;
    g.width = int(cinfo->image_width);
    g.height = int(cinfo->image_height);
    for (int i = 0; i < n; ++i) {
        g.comps[i].h = cinfo->comp_info[i].h_samp_factor;
        g.comps[i].v = cinfo->comp_info[i].v_samp_factor;
        if (n > 1 && (cinfo->max_h_samp_factor % g.comps[i].h || cinfo->max_v_samp_factor % g.comps[i].v))
            fail(cinfo, "JPEG sampling factors are not supported by the coeffs codec (keep it JPEG: --codec jpeg)");
    }
    static thread_local std::string why;
    why = derive_geometry(g);
    if (!why.empty()) {
        why = "JPEG cannot be stored as a coeffs record: " + why + " (keep it JPEG: --codec jpeg)";
        fail(cinfo, why.c_str());
    }
}

// A progressive file whose scans left coefficient bits unsent is smoothed by libjpeg (block
// smoothing); the record would hold the unsmoothed blocks, so such a file stays JPEG.
void check_complete(j_decompress_ptr cinfo) {
    if (!cinfo->progressive_mode || cinfo->coef_bits == nullptr) return;
    for (int ci = 0; ci < cinfo->num_components; ++ci)
        for (int k = 0; k < 10; ++k)
            if (cinfo->coef_bits[ci][k] != 0)
                fail(cinfo, "progressive JPEG with unfinished scans (libjpeg smooths it): keep it JPEG");
}

// The orientation tag (0x0112) of IFD0 in an APP1 "Exif" payload, as Pillow's getexif reads
// it; 0 when absent, damaged or out of 1..8. Every read is bounds-checked.
int exif_orientation(const uint8_t *p, size_t n) {
    if (n < 14 || std::memcmp(p, "Exif\0\0", 6) != 0) return 0;
    const uint8_t *t = p + 6;
    const size_t len = n - 6;
    const bool le = t[0] == 'I' && t[1] == 'I';
    if (!le && !(t[0] == 'M' && t[1] == 'M')) return 0;
    auto u16 = [&](size_t at) { return le ? unsigned(t[at] | (t[at + 1] << 8)) : unsigned((t[at] << 8) | t[at + 1]); };
    auto u32 = [&](size_t at) { return (uint32_t(u16(le ? at + 2 : at)) << 16) | u16(le ? at : at + 2); };
    const uint32_t ifd = u32(4);
    if (ifd > len || len - ifd < 2) return 0;
    const unsigned count = u16(ifd);
    for (unsigned i = 0; i < count; ++i) {
        const size_t at = ifd + 2 + size_t(i) * 12;
        if (at + 12 > len) return 0;
        if (u16(at) != 0x0112) continue;
        // Pillow reads the first value of a SHORT/SSHORT (3, 8) or LONG/SLONG (4, 9) entry
        // that holds at least one; any other type, or a count of 0, is no orientation there.
        const unsigned type = u16(at + 2);
        if (u32(at + 4) == 0) return 0;
        const uint32_t value = type == 3 || type == 8 ? u16(at + 8) : type == 4 || type == 9 ? u32(at + 8) : 0;
        return value >= 1 && value <= 8 ? int(value) : 0;
    }
    return 0;
}

int orientation_of(j_decompress_ptr cinfo) {
    for (jpeg_saved_marker_ptr m = cinfo->marker_list; m != nullptr; m = m->next)
        if (m->marker == JPEG_APP0 + 1 && m->data_length >= 6 && std::memcmp(m->data, "Exif\0\0", 6) == 0)
            return exif_orientation(m->data, m->data_length);  // the first Exif APP1, as Pillow
    return 0;
}

// Must not own C++ objects with destructors: libjpeg errors longjmp straight out of it.
void read_body(j_decompress_ptr cinfo, const uint8_t *data, size_t size, Coefficients &c) {
    jpeg_progress_mgr progress{};
    progress.progress_monitor = limit_scans;
    cinfo->progress = &progress;
    jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
    jpeg_save_markers(cinfo, JPEG_APP0 + 1, 0xFFFF);
    jpeg_read_header(cinfo, TRUE);
    check_kind(cinfo, c.geo);
    c.geo.orientation = orientation_of(cinfo);
    jvirt_barray_ptr *arrays = jpeg_read_coefficients(cinfo);
    check_complete(cinfo);
    for (int ci = 0; ci < c.geo.ncomp; ++ci) {
        Component &k = c.geo.comps[ci];
        const jpeg_component_info *comp = &cinfo->comp_info[ci];
        if (comp->quant_table == nullptr) fail(cinfo, "JPEG component has no quantization table");
        for (int i = 0; i < 64; ++i) k.quant[i] = comp->quant_table->quantval[i];
        // libjpeg's arrays cover the component's blocks rounded up to whole MCUs
        // (height_in_blocks may be less); blocks beyond what it holds stay zero.
        const int rows = std::min<int>(k.bh, int(comp->height_in_blocks + comp->v_samp_factor - 1) /
                                                 comp->v_samp_factor * comp->v_samp_factor);
        const int cols = std::min<int>(k.bw, int(comp->width_in_blocks + comp->h_samp_factor - 1) /
                                                 comp->h_samp_factor * comp->h_samp_factor);
        int16_t *dst = c.blocks[ci].data();
        for (int by = 0; by < rows; ++by) {
            JBLOCKARRAY row = cinfo->mem->access_virt_barray(reinterpret_cast<j_common_ptr>(cinfo), arrays[ci],
                                                             JDIMENSION(by), 1, FALSE);
            std::memcpy(dst + size_t(by) * k.bw * 64, row[0], size_t(cols) * 64 * sizeof(int16_t));
        }
    }
    jpeg_finish_decompress(cinfo);
}

}  // namespace

std::string encode_jpeg(const uint8_t *data, size_t size, std::vector<uint8_t> &out, int seg_mcus,
                        int nibble_from) {
    if (seg_mcus < 1 || seg_mcus > 255) return "seg_mcus must be in [1, 255]";
    if (nibble_from < 1 || nibble_from > 64) return "nibble_from must be in [1, 64]";
    Coefficients c;
    c.geo.seg_mcus = seg_mcus;
    c.geo.nibble_from = nibble_from;
    jpeg_decompress_struct cinfo;
    ErrorManager err;
    install_error_manager(cinfo, err);
    // The block buffers are sized (and zeroed) between header and coefficients by a hook:
    // simpler to size them after reading the header in a first, header-only pass.
    if (setjmp(err.jump)) {
        jpeg_destroy_decompress(&cinfo);
        return error_text(err);
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
    jpeg_read_header(&cinfo, TRUE);
    check_kind(&cinfo, c.geo);
    jpeg_abort_decompress(&cinfo);
    try {
        for (int ci = 0; ci < c.geo.ncomp; ++ci)
            c.blocks[ci].assign(size_t(c.geo.comps[ci].bw) * c.geo.comps[ci].bh * 64, 0);
    } catch (...) {
        jpeg_destroy_decompress(&cinfo);
        return "out of memory";
    }
    read_body(&cinfo, data, size, c);
    jpeg_destroy_decompress(&cinfo);
    out.clear();
    write_record(c, out);
    return {};
}

}  // namespace fl::coeffs
