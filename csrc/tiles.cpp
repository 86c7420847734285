// Restart-tile repack (libjpeg transcoding) and segment-table scan; splice is in tiles_splice.cpp.
#include "tiles.h"

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <new>

#include <jpeglib.h>
#include <jerror.h>

namespace fl::tiles {
namespace {

// ---- libjpeg plumbing: errors longjmp back, warnings are remembered, output goes to a vector.

struct ErrorManager {
    jpeg_error_mgr pub;
    std::jmp_buf jump;
    char error[JMSG_LENGTH_MAX];
    char warning[JMSG_LENGTH_MAX];
    bool warned;
};

void on_error(j_common_ptr cinfo) {
    auto* manager = reinterpret_cast<ErrorManager*>(cinfo->err);
    (*cinfo->err->format_message)(cinfo, manager->error);
    std::longjmp(manager->jump, 1);
}

// A warning means the source has damaged data that libjpeg papered over; repacking it would
// bake the repair into the record, so repack refuses it (the caller keeps the original bytes).
void on_message(j_common_ptr cinfo, int level) {
    auto* manager = reinterpret_cast<ErrorManager*>(cinfo->err);
    if (level < 0 && !manager->warned) {
        (*cinfo->err->format_message)(cinfo, manager->warning);
        manager->warned = true;
    }
}

void init_errors(ErrorManager* manager) {
    jpeg_std_error(&manager->pub);
    manager->pub.error_exit = on_error;
    manager->pub.emit_message = on_message;
    manager->error[0] = '\0';
    manager->warning[0] = '\0';
    manager->warned = false;
}

struct VectorDestination {
    jpeg_destination_mgr pub;
    std::vector<uint8_t>* out;
};

void grow(j_compress_ptr cinfo, size_t used) {
    auto* dest = reinterpret_cast<VectorDestination*>(cinfo->dest);
    try {
        dest->out->resize(dest->out->size() * 2 + 4096);
    } catch (const std::bad_alloc&) {
        cinfo->err->msg_code = JERR_OUT_OF_MEMORY;
        (*cinfo->err->error_exit)(reinterpret_cast<j_common_ptr>(cinfo));
    }
    dest->pub.next_output_byte = dest->out->data() + used;
    dest->pub.free_in_buffer = dest->out->size() - used;
}

void dest_init(j_compress_ptr cinfo) { grow(cinfo, 0); }

boolean dest_empty(j_compress_ptr cinfo) {
    auto* dest = reinterpret_cast<VectorDestination*>(cinfo->dest);
    grow(cinfo, dest->out->size());  // libjpeg only calls this when the buffer is full
    return TRUE;
}

void dest_term(j_compress_ptr cinfo) {
    auto* dest = reinterpret_cast<VectorDestination*>(cinfo->dest);
    dest->out->resize(dest->out->size() - dest->pub.free_in_buffer);
}

// ---- geometry shared by repack (choosing R) and scan_table (checking it).

struct Layout {
    uint32_t mcu_width, mcu_height, mcus_per_row, mcu_rows;
};

// A single-component scan is non-interleaved: its MCU is one 8x8 block of that component,
// which is 8x8 image pixels because the only component is also the largest. An interleaved
// scan's MCU covers max_h x max_v blocks of 8 pixels.
Layout layout_of(uint32_t width, uint32_t height, int components, int max_h, int max_v) {
    Layout layout{};
    layout.mcu_width = components == 1 ? 8u : 8u * static_cast<uint32_t>(max_h);
    layout.mcu_height = components == 1 ? 8u : 8u * static_cast<uint32_t>(max_v);
    layout.mcus_per_row = (width + layout.mcu_width - 1) / layout.mcu_width;
    layout.mcu_rows = (height + layout.mcu_height - 1) / layout.mcu_height;
    return layout;
}

uint32_t choose_restart(uint32_t mcus_per_row, uint32_t max_restart) {
    for (uint32_t r = max_restart < mcus_per_row ? max_restart : mcus_per_row; r > 1; --r) {
        if (mcus_per_row % r == 0) return r;
    }
    return 1;
}

uint32_t read_u16(const uint8_t* p) { return (static_cast<uint32_t>(p[0]) << 8) | p[1]; }

// ---- repack.

// One error manager serves both codecs so a single setjmp covers every libjpeg call.
struct Codecs {
    jpeg_decompress_struct src;
    jpeg_compress_struct dst;
    ErrorManager errors;
    VectorDestination dest;
};

void save_markers(j_decompress_ptr src, Markers markers) {
    if (markers == Markers::kAll) {
        for (int m = 0; m < 16; ++m) jpeg_save_markers(src, JPEG_APP0 + m, 0xFFFF);
        jpeg_save_markers(src, JPEG_COM, 0xFFFF);
    } else {
        jpeg_save_markers(src, JPEG_APP0, 0xFFFF);
        jpeg_save_markers(src, JPEG_APP0 + 14, 0xFFFF);
    }
}

// Why the source cannot be tiled, or nullptr. Called after jpeg_read_header.
const char* untileable_reason(const jpeg_decompress_struct& src) {
    if (src.arith_code) return "arithmetic-coded JPEG (tiles need Huffman coding)";
    if (src.data_precision != 8) return "not an 8-bit JPEG";
    if (src.num_components < 1 || src.num_components > MAX_COMPS_IN_SCAN)
        return "unsupported number of components";
    if (src.image_width > 65535 || src.image_height > 65535) return "image too large";
    return nullptr;
}

// The part of repack that runs under setjmp: only libjpeg calls and plain data, so a longjmp
// skips no C++ destructor. Returns false after an error (message in the error managers).
bool transcode(Codecs* c, const uint8_t* data, size_t size, uint32_t max_restart,
               Markers markers, const char** reason) {
    if (setjmp(c->errors.jump)) return false;
    jpeg_mem_src(&c->src, data, static_cast<unsigned long>(size));
    save_markers(&c->src, markers);
    jpeg_read_header(&c->src, TRUE);
    *reason = untileable_reason(c->src);
    if (*reason != nullptr) return false;
    jvirt_barray_ptr* coefficients = jpeg_read_coefficients(&c->src);
    jpeg_copy_critical_parameters(&c->src, &c->dst);
    Layout layout = layout_of(c->src.image_width, c->src.image_height, c->src.num_components,
                              c->src.max_h_samp_factor, c->src.max_v_samp_factor);
    c->dst.optimize_coding = TRUE;
    c->dst.restart_interval = choose_restart(layout.mcus_per_row, max_restart);
    c->dst.write_JFIF_header = FALSE;  // copied verbatim below instead, like every APPn kept
    c->dst.write_Adobe_marker = FALSE;
    jpeg_write_coefficients(&c->dst, coefficients);
    for (jpeg_saved_marker_ptr m = c->src.marker_list; m != nullptr; m = m->next) {
        jpeg_write_marker(&c->dst, m->marker, m->data, m->data_length);
    }
    jpeg_finish_compress(&c->dst);
    jpeg_finish_decompress(&c->src);
    return true;
}

}  // namespace

TiledRecord repack(const uint8_t* data, size_t size, uint32_t max_restart_mcus, Markers markers) {
    TiledRecord result;
    if (max_restart_mcus < 1 || max_restart_mcus > 65535) {
        result.status = Status::kInvalidArgument;
        result.message = "restart_mcus must be in 1..65535";
        return result;
    }
    Codecs c;
    std::memset(static_cast<void*>(&c), 0, sizeof(c));
    init_errors(&c.errors);
    c.src.err = &c.errors.pub;
    c.dst.err = &c.errors.pub;
    jpeg_create_decompress(&c.src);
    jpeg_create_compress(&c.dst);
    c.dest.pub.init_destination = dest_init;
    c.dest.pub.empty_output_buffer = dest_empty;
    c.dest.pub.term_destination = dest_term;
    c.dest.out = &result.data;
    c.dst.dest = &c.dest.pub;
    const char* reason = nullptr;
    bool ok = transcode(&c, data, size, max_restart_mcus, markers, &reason);
    jpeg_destroy_compress(&c.dst);
    jpeg_destroy_decompress(&c.src);
    if (!ok || c.errors.warned) {
        result.status = Status::kNotTileable;
        result.message = reason != nullptr ? std::string(reason)
                         : !ok ? std::string("libjpeg: ") + c.errors.error
                               : std::string("source has damaged data: ") + c.errors.warning;
        result.data.clear();
        return result;
    }
    std::string message;
    Status status = scan_table(result.data.data(), result.data.size(), &result.geometry,
                               &result.offsets, &message);
    if (status != Status::kOk) {
        result.status = Status::kCorrupt;
        result.message = "repacked record failed its own check: " + message;
        result.data.clear();
    }
    return result;
}

// ---- scan_table: walk the header markers, then the entropy data for RST/EOI.

namespace {

struct HeaderInfo {
    uint32_t sof = 0, scan = 0, restart = 0;
    bool have_sof = false;
};

Status fail(std::string* message, Status status, const std::string& text) {
    *message = text;
    return status;
}

// Reads the SOF at data[at] (marker already known to be SOF0/SOF1) into geometry.
Status read_sof(const uint8_t* data, size_t size, size_t at, Geometry* g, Layout* layout,
                int* components, std::string* message) {
    if (at + 10 > size) return fail(message, Status::kCorrupt, "SOF marker is truncated");
    if (data[at + 4] != 8) return fail(message, Status::kNotTileable, "not an 8-bit JPEG");
    g->sof_offset = static_cast<uint32_t>(at);
    g->height = read_u16(data + at + 5);
    g->width = read_u16(data + at + 7);
    *components = data[at + 9];
    if (*components < 1 || *components > 4 || at + 10 + 3 * size_t(*components) > size)
        return fail(message, Status::kCorrupt, "SOF has a bad component count");
    int max_h = 1, max_v = 1;
    for (int i = 0; i < *components; ++i) {
        int hv = data[at + 11 + 3 * i];
        max_h = (hv >> 4) > max_h ? (hv >> 4) : max_h;
        max_v = (hv & 15) > max_v ? (hv & 15) : max_v;
    }
    if (g->width == 0 || g->height == 0) return fail(message, Status::kCorrupt, "SOF size is 0");
    *layout = layout_of(g->width, g->height, *components, max_h, max_v);
    return Status::kOk;
}

// Walks SOI .. SOS, filling the header facts and the geometry's SOF part.
Status read_header(const uint8_t* data, size_t size, HeaderInfo* info, Geometry* g,
                   Layout* layout, std::string* message) {
    if (size < 4 || data[0] != 0xFF || data[1] != 0xD8)
        return fail(message, Status::kNotTileable, "not a JPEG (no SOI marker)");
    int components = 0;
    for (size_t at = 2; at + 4 <= size;) {
        if (data[at] != 0xFF) return fail(message, Status::kCorrupt, "header marker expected");
        uint8_t marker = data[at + 1];
        size_t length = read_u16(data + at + 2);
        if (length < 2 || at + 2 + length > size)
            return fail(message, Status::kCorrupt, "header segment runs past the record");
        if (marker == 0xC0 || marker == 0xC1) {
            Status s = read_sof(data, size, at, g, layout, &components, message);
            if (s != Status::kOk) return s;
            info->have_sof = true;
        } else if (marker >= 0xC2 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 &&
                   marker != 0xCC) {
            return fail(message, Status::kNotTileable, "not a sequential Huffman JPEG");
        } else if (marker == 0xDD && length == 4) {
            info->restart = read_u16(data + at + 4);
        } else if (marker == 0xDA) {
            // An SOS segment holds at least its component count and 3 more bytes per component.
            if (length < 6 + 2 * static_cast<size_t>(components))
                return fail(message, Status::kCorrupt, "SOS segment too short");
            if (!info->have_sof || data[at + 4] != components)
                return fail(message, Status::kNotTileable, "scan does not hold every component");
            info->scan = static_cast<uint32_t>(at + 2 + length);
            return Status::kOk;
        }
        at += 2 + length;
    }
    return fail(message, Status::kCorrupt, "no SOS marker in the header");
}

// Records the offset after every RSTn and after EOI; checks RST numbering.
Status read_segments(const uint8_t* data, size_t size, size_t at,
                     std::vector<uint32_t>* offsets, std::string* message) {
    offsets->push_back(static_cast<uint32_t>(at));
    while (true) {
        const void* hit = std::memchr(data + at, 0xFF, size - at);
        if (hit == nullptr || static_cast<const uint8_t*>(hit) + 1 >= data + size)
            return fail(message, Status::kCorrupt, "entropy data ends without EOI");
        at = static_cast<size_t>(static_cast<const uint8_t*>(hit) - data);
        uint8_t marker = data[at + 1];
        at += 2;
        if (marker == 0x00) continue;  // stuffed 0xFF data byte
        if (marker == 0xD9) {
            offsets->push_back(static_cast<uint32_t>(at));
            return Status::kOk;
        }
        if (marker != 0xD0 + ((offsets->size() - 1) & 7))
            return fail(message, Status::kCorrupt, "unexpected marker inside entropy data");
        offsets->push_back(static_cast<uint32_t>(at));
    }
}

}  // namespace

Status scan_table(const uint8_t* data, size_t size, Geometry* g, std::vector<uint32_t>* offsets,
                  std::string* message) {
    if (size > 0xFFFFFFF0u) return fail(message, Status::kNotTileable, "record over 4 GiB");
    HeaderInfo info;
    Layout layout{};
    Status s = read_header(data, size, &info, g, &layout, message);
    if (s != Status::kOk) return s;
    if (info.restart == 0 || layout.mcus_per_row % info.restart != 0)
        return fail(message, Status::kNotTileable, "restart interval does not divide MCU rows");
    g->scan_offset = info.scan;
    g->mcu_width = layout.mcu_width;
    g->mcu_height = layout.mcu_height;
    g->mcus_per_row = layout.mcus_per_row;
    g->mcu_rows = layout.mcu_rows;
    g->restart_mcus = info.restart;
    offsets->clear();
    s = read_segments(data, size, info.scan, offsets, message);
    if (s != Status::kOk) return s;
    size_t expected = size_t(layout.mcu_rows) * (layout.mcus_per_row / info.restart) + 1;
    if (offsets->size() != expected)
        return fail(message, Status::kCorrupt, "segment count does not match the MCU grid");
    if (offsets->back() != size)
        return fail(message, Status::kCorrupt, "bytes after EOI");
    return Status::kOk;
}

}  // namespace fl::tiles
