// Coeffs record -> JPEG: the coefficients written back with jpeg_write_coefficients, so a coeffs
// dataset converts to JPEG (for DALI, or to share) without a pixel changing.
#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>

#include "coeffs_internal.h"
#include "jpeg_errors.h"

namespace fl::coeffs {

namespace {

using jpeg_errors::ErrorManager;
using jpeg_errors::on_error_exit;
using jpeg_errors::on_output_message;

// Every segment decoded into whole-grid block arrays; false when one is damaged.
bool decode_all(const View &view, Coefficients &c) {
    const Geometry &g = view.geo;
    c.geo = g;
    for (int ci = 0; ci < g.ncomp; ++ci) c.blocks[ci].assign(size_t(g.comps[ci].bw) * g.comps[ci].bh * 64, 0);
    std::vector<int16_t> seg(size_t(g.seg_mcus) * g.blocks_per_mcu * 64);
    for (int row = 0; row < g.mcu_rows; ++row)
        for (int s = 0; s < g.segs_per_row; ++s) {
            if (!decode_segment(view, row, s, seg.data())) return false;
            const int16_t *blk = seg.data();
            for (int m = s * g.seg_mcus; m < std::min(g.mcu_cols, (s + 1) * g.seg_mcus); ++m)
                for (int ci = 0; ci < g.ncomp; ++ci) {
                    const Component &k = g.comps[ci];
                    for (int yy = 0; yy < k.v; ++yy)
                        for (int xx = 0; xx < k.h; ++xx, blk += 64)
                            std::memcpy(&c.blocks[ci][(size_t(row * k.v + yy) * k.bw + size_t(m * k.h + xx)) * 64],
                                        blk, 128);
                }
        }
    return true;
}

// Must not own C++ objects with destructors: libjpeg errors longjmp straight out of it.
void write_body(j_compress_ptr cinfo, const Coefficients &c) {
    const Geometry &g = c.geo;
    static const J_COLOR_SPACE spaces[] = {JCS_GRAYSCALE, JCS_YCbCr, JCS_RGB, JCS_CMYK, JCS_YCCK};
    const J_COLOR_SPACE space = spaces[int(g.color)];
    cinfo->image_width = JDIMENSION(g.width);
    cinfo->image_height = JDIMENSION(g.height);
    cinfo->input_components = g.ncomp;
    cinfo->in_color_space = space == JCS_YCCK ? JCS_CMYK : space;  // only what we write matters
    jpeg_set_defaults(cinfo);
    jpeg_set_colorspace(cinfo, space);  // RGB: an Adobe marker with transform 0, as the source had
    cinfo->optimize_coding = TRUE;
    jvirt_barray_ptr arrays[kMaxComponents];
    for (int ci = 0; ci < g.ncomp; ++ci) {
        const Component &k = g.comps[ci];
        jpeg_component_info *comp = &cinfo->comp_info[ci];
        comp->h_samp_factor = k.h;
        comp->v_samp_factor = k.v;
        comp->quant_tbl_no = ci;
        JQUANT_TBL *table = jpeg_alloc_quant_table(reinterpret_cast<j_common_ptr>(cinfo));
        for (int i = 0; i < 64; ++i) table->quantval[i] = k.quant[i];
        table->sent_table = FALSE;
        cinfo->quant_tbl_ptrs[ci] = table;
        arrays[ci] = cinfo->mem->request_virt_barray(reinterpret_cast<j_common_ptr>(cinfo), JPOOL_IMAGE, TRUE,
                                                     JDIMENSION(k.bw), JDIMENSION(k.bh), JDIMENSION(k.v));
    }
    jpeg_write_coefficients(cinfo, arrays);  // realizes the arrays; the data is read at finish
    if (g.orientation != 0) {  // the one EXIF value a record keeps, as a minimal big-endian IFD0
        const uint8_t exif[] = {'E', 'x', 'i', 'f', 0, 0, 'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1, 0x01, 0x12,
                                0, 3, 0, 0, 0, 1, 0, uint8_t(g.orientation), 0, 0, 0, 0, 0, 0};
        jpeg_write_marker(cinfo, JPEG_APP0 + 1, exif, sizeof(exif));
    }
    for (int ci = 0; ci < g.ncomp; ++ci) {
        const Component &k = g.comps[ci];
        for (int by = 0; by < k.bh; ++by) {
            JBLOCKARRAY row = cinfo->mem->access_virt_barray(reinterpret_cast<j_common_ptr>(cinfo), arrays[ci],
                                                             JDIMENSION(by), 1, TRUE);
            std::memcpy(row[0], &c.blocks[ci][size_t(by) * k.bw * 64], size_t(k.bw) * 64 * sizeof(int16_t));
        }
    }
    jpeg_finish_compress(cinfo);
}

}  // namespace

std::string record_to_jpeg(const uint8_t *data, size_t size, std::vector<uint8_t> &out) {
    View view;
    if (std::string why = open_record(data, size, view); !why.empty()) return why;
    Coefficients c;
    if (!decode_all(view, c)) return "coeffs record is damaged: a segment does not decode";
    jpeg_compress_struct cinfo;
    ErrorManager err;
    std::memset(&cinfo, 0, sizeof(cinfo));
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_error_exit;
    err.pub.output_message = on_output_message;
    err.message[0] = '\0';
    unsigned char *buffer = nullptr;
    unsigned long length = 0;
    if (setjmp(err.jump)) {
        jpeg_destroy_compress(&cinfo);
        std::free(buffer);
        return error_text(err);
    }
    jpeg_create_compress(&cinfo);
    jpeg_mem_dest(&cinfo, &buffer, &length);
    write_body(&cinfo, c);
    jpeg_destroy_compress(&cinfo);
    out.assign(buffer, buffer + length);
    std::free(buffer);
    return {};
}

}  // namespace fl::coeffs
