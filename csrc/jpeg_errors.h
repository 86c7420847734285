// libjpeg's error callbacks and limits, shared by every libjpeg call of the extension (the
// decode path, the coeffs encoder and its JPEG writer): errors jump back to the call instead of
// exit(), the one rule of which warnings damage pixels (issue 28), the bomb and scan limits.
#pragma once

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <string>
// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>
#include <jerror.h>

namespace fl::jpeg_errors {

// libjpeg reports through these callbacks; we jump back to the decode call instead of exit().
struct ErrorManager {
    jpeg_error_mgr pub;
    std::jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
};

[[noreturn]] inline void on_error_exit(j_common_ptr cinfo) {
    auto *err = reinterpret_cast<ErrorManager *>(cinfo->err);
    (*cinfo->err->format_message)(cinfo, err->message);
    std::longjmp(err->jump, 1);
}

// Level -1 is a warning. Pillow (the reference backend) ignores every libjpeg warning and
// refuses a file whose data runs out ("image file is truncated"); jpeg_mem_src says that as
// JWRN_JPEG_EOF at the very read where Pillow's suspending source would wait for more bytes.
// Warnings about the header's framing (extraneous bytes before a marker, an unknown JFIF
// revision, an odd Adobe transform) leave every pixel as Pillow decodes it: they decode. A
// warning that damages pixels stays an error, as issue 28 rules: the file ran out, or its
// entropy data did (a marker where data should be: "premature end of data segment"), or is
// corrupt (a bad Huffman code, a lost restart marker). Pillow shows those as grey blocks and
// cannot say so; the native check is what finds them (pack, verify --decode, the loader), and
// a coeffs record must hold what the JPEG path would decode, or not be made.
inline bool damages_pixels(int code) {
    return code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER || code == JWRN_HUFF_BAD_CODE ||
           code == JWRN_MUST_RESYNC;
}

// What libjpeg said when it failed (its formatted message), for the caller's error string.
inline std::string error_text(const ErrorManager &err) {
    return err.message[0] ? std::string(err.message) : std::string("unknown libjpeg error");
}

inline void on_emit_message(j_common_ptr cinfo, int level) {
    if (level < 0 && damages_pixels(cinfo->err->msg_code)) on_error_exit(cinfo);
}

inline void on_output_message(j_common_ptr) {}

// A decompressor's error manager set up with these callbacks (cinfo zeroed first).
inline void install_error_manager(jpeg_decompress_struct &cinfo, ErrorManager &err) {
    std::memset(&cinfo, 0, sizeof(cinfo));
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_error_exit;
    err.pub.emit_message = on_emit_message;
    err.pub.output_message = on_output_message;
    err.message[0] = '\0';
}

// The decompression-bomb limit (Pillow's: twice its MAX_IMAGE_PIXELS warning) and the scan
// limit (thousands of tiny progressive scans are a DoS), the same for every libjpeg read.
constexpr double kMaxPixels = 2.0 * 89478485;
constexpr int kMaxScans = 500;

[[noreturn]] inline void fail(j_decompress_ptr cinfo, const char *message) {
    auto *err = reinterpret_cast<ErrorManager *>(cinfo->err);
    std::snprintf(err->message, sizeof(err->message), "%s", message);
    std::longjmp(err->jump, 1);
}

// A progress monitor refusing a progressive file past kMaxScans scans.
inline void limit_scans(j_common_ptr cinfo) {
    auto *d = reinterpret_cast<j_decompress_ptr>(cinfo);
    if (d->is_decompressor && d->input_scan_number > kMaxScans) {
        char message[JMSG_LENGTH_MAX];
        std::snprintf(message, sizeof(message), "progressive JPEG has more than %d scans", kMaxScans);
        fail(d, message);
    }
}

}  // namespace fl::jpeg_errors
