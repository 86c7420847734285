// The Python bridge of the decode core, fastloader._core: checks shapes and dtypes, releases the
// GIL, maps status to errors. It and tiles_bindings.cpp (restart tiles) are the only files that
// see Python; everything else in csrc/ is plain C++ in namespace fl.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdio>
#include <jpeglib.h>

#include <optional>
#include <string>
#include <vector>

#include "batch.h"
#include "batch_bindings.h"
#include "jpeg.h"
#include "tiles.h"
#include "masks_bindings.h"
#include "tiles_bindings.h"
#include "views_bindings.h"
#include "coeffs_bindings.h"
#include "audio_bindings.h"
#include "pixel_ops_bindings.h"

namespace nb = nanobind;

namespace {

using namespace fl::bindings;  // NOLINT: the shared helpers and array types of the batch bindings

fl::JpegHeader header(nb::handle data) {
    BufferView view = require_buffer(data, "data");
    fl::JpegHeader h;
    std::string error;
    {
        nb::gil_scoped_release release;
        error = fl::read_jpeg_header(view.data(), view.size(), h);
    }
    if (!error.empty()) throw nb::value_error(error.c_str());
    return h;
}

std::optional<std::string> decode_into(nb::handle data, std::tuple<int, int, int, int> crop, bool flip,
                                       Slot out, bool dct_scaling, int orientation) {
    if (out.shape(2) != 3) throw nb::value_error("out must have shape (H, W, 3)");
    check_orientation(orientation);
    BufferView view = require_buffer(data, "data");
    const fl::CropBox box{std::get<0>(crop), std::get<1>(crop), std::get<2>(crop), std::get<3>(crop)};
    const fl::OutputSlot slot{out.data(), static_cast<int>(out.shape(0)), static_cast<int>(out.shape(1)),
                              static_cast<std::ptrdiff_t>(out.shape(1)) * 3, flip, orientation};
    fl::DecodeOptions options;
    options.dct_scaling = dct_scaling;
    std::string error;
    {
        nb::gil_scoped_release release;
        fl::DecodeScratch scratch;
        error = fl::decode_jpeg_into(view.data(), view.size(), box, slot, scratch, options);
    }
    if (error.empty()) return std::nullopt;
    return error;
}

// The letterbox rectangles (N, 4) top, left, height, width, each checked to lie inside the
// (H, W) slot with a positive size, and the fill byte; no places: every crop fills its slot.
fl::Placement placement(const std::optional<Crops> &places, int fill, const Batch &out) {
    fl::Placement result;
    if (fill < 0 || fill > 255) throw nb::value_error("fill must be an int in [0, 255]");
    result.fill = static_cast<uint8_t>(fill);
    if (!places) return result;
    const size_t n = out.shape(0);
    const int64_t height = out.shape(1), width = out.shape(2);
    if (places->shape(0) != n) throw nb::value_error("places must have shape (N, 4), one row per record");
    for (size_t k = 0; k < n; ++k) {
        const int64_t top = (*places)(k, 0), left = (*places)(k, 1), h = (*places)(k, 2), w = (*places)(k, 3);
        if (top < 0 || left < 0 || h < 1 || w < 1 || top + h > height || left + w > width)
            throw nb::value_error(("places row " + std::to_string(k) +
                                   " must be a rectangle (top, left, height, width) of positive size inside the "
                                   "output's (H, W)")
                                      .c_str());
    }
    result.rows = places->data();
    return result;
}

BatchResult batch_decode_into(fl::BatchDecoder &self, nb::sequence records, Crops crops, Flips flips,
                            Batch out, bool dct_scaling, std::optional<TileHeaders> tile_headers,
                            std::optional<TileOffsets> tile_offsets, std::optional<TileSpans> tile_spans,
                            std::optional<Planar> planar, std::optional<Affine> scale,
                            std::optional<Affine> shift, std::optional<Crops> places, int fill,
                            std::optional<Orientations> orientations, std::optional<ProgramCodes> program_codes,
                            std::optional<ProgramParams> program_params) {
    const size_t n = nb::len(records);
    if (crops.shape(0) != n || flips.shape(0) != n || out.shape(0) != n || out.shape(3) != 3 ||
        (orientations && orientations->shape(0) != n))
        throw nb::value_error("records, crops (N, 4), flips (N,), orientations (N,) and out (N, H, W, 3) "
                              "disagree on N");
    if (orientations)
        for (size_t k = 0; k < n; ++k) check_orientation((*orientations)(k));
    const std::vector<fl::TileRef> tiles = tile_refs(tile_headers, tile_offsets, tile_spans, n);
    const fl::PlanarOutput planar_out = planar_output(planar, out, scale, shift);
    const fl::Placement place = placement(places, fill, out);
    const fl::PixelProgramRef program = program_ref(program_codes, program_params, n);
    std::vector<BufferView> views;
    std::vector<fl::Record> recs = record_views(records, views);
    std::vector<std::string> errors;
    std::vector<size_t> skipped;
    fl::DecodeOptions options;
    options.dct_scaling = dct_scaling;
    {
        nb::gil_scoped_release release;
        self.decode(recs, crops.data(), flips.data(), out.data(), static_cast<int>(out.shape(1)),
                    static_cast<int>(out.shape(2)), options, errors, skipped,
                    tiles.empty() ? nullptr : tiles.data(), &planar_out, &place,
                    orientations ? orientations->data() : nullptr, &program);
    }
    return batch_result(views, errors, skipped);
}

using PlanarU8 = nb::ndarray<const uint8_t, nb::ndim<4>, nb::c_contig, nb::device::cpu>;
using PlanarF32 = nb::ndarray<float, nb::ndim<4>, nb::c_contig, nb::device::cpu>;

// A batch_transform's planar uint8 result into the float32 output, on the decoder's threads.
void batch_normalize_planar(fl::BatchDecoder &self, PlanarU8 src, PlanarF32 out, std::optional<Affine> scale,
                            std::optional<Affine> shift) {
    for (size_t d = 0; d < 4; ++d)
        if (src.shape(d) != out.shape(d)) throw nb::value_error("src and out must have the same shape (N, 3, H, W)");
    if (src.shape(1) != 3) throw nb::value_error("src and out must have shape (N, 3, H, W)");
    fl::PlanarOutput target;
    set_affine(target, scale, shift);
    target.data = out.data();
    nb::gil_scoped_release release;
    self.normalize_planar(src.data(), src.shape(0), src.shape(2) * src.shape(3), target);
}

void register_header(nb::module_ &m) {
    nb::class_<fl::JpegHeader>(m, "JpegHeader", "What a JPEG's headers say, read without decoding pixels.")
        .def_ro("width", &fl::JpegHeader::width, "Image width in pixels.")
        .def_ro("height", &fl::JpegHeader::height, "Image height in pixels.")
        .def_ro("components", &fl::JpegHeader::components, "Colour components (1, 3 or 4).")
        .def_ro("color_space", &fl::JpegHeader::color_space,
                "gray | ycbcr | rgb | cmyk | ycck | unknown, as libjpeg reads the markers.")
        .def_ro("subsampling", &fl::JpegHeader::subsampling,
                "4:4:4 | 4:2:2 | 4:2:0 | 4:4:0 | 4:1:1 | gray | other.")
        .def_ro("progressive", &fl::JpegHeader::progressive, "True for a progressive JPEG.")
        .def("__repr__", [](const fl::JpegHeader &h) {
            return "JpegHeader(width=" + std::to_string(h.width) + ", height=" + std::to_string(h.height) +
                   ", components=" + std::to_string(h.components) + ", color_space='" + h.color_space +
                   "', subsampling='" + h.subsampling + "', progressive=" + (h.progressive ? "True" : "False") +
                   ")";
        });
}

void register_batch_decoder(nb::module_ &m) {
    nb::class_<fl::BatchDecoder> cls(m, "BatchDecoder", "A persistent thread pool that decodes batches of records.");
    fl::bindings::add_views(cls);
    cls.def(nb::init<int>(), nb::arg("num_threads") = 1)
        // Both wait for a running batch to end: wait without the GIL, so Python threads go on.
        .def_prop_rw(
            "num_threads", &fl::BatchDecoder::num_threads,
            [](fl::BatchDecoder &self, int n) {
                nb::gil_scoped_release release;
                self.set_num_threads(n);
            },
            "Decode threads of the pool; setting it waits for a running batch.")
        .def("close", &fl::BatchDecoder::close, nb::call_guard<nb::gil_scoped_release>(),
             "Stop the pool's threads (waits for a running batch).")
        .def("decode_into", &batch_decode_into, nb::arg("records"), nb::arg("crops"), nb::arg("flips"),
             nb::arg("out"), nb::kw_only(), nb::arg("dct_scaling") = true,
             nb::arg("tile_headers").none() = nb::none(), nb::arg("tile_offsets").none() = nb::none(),
             nb::arg("tile_spans").none() = nb::none(), nb::arg("planar").none() = nb::none(),
             nb::arg("scale").none() = nb::none(), nb::arg("shift").none() = nb::none(),
             nb::arg("places").none() = nb::none(), nb::arg("fill") = 0,
             nb::arg("orientations").none() = nb::none(), nb::arg("program_codes").none() = nb::none(),
             nb::arg("program_params").none() = nb::none(),
             "Decode a batch with the GIL released; returns (errors, non_jpeg_indices). "
             "tile_headers (N, len(TileGeometry.fields)) int64, tile_offsets uint32 and tile_spans "
             "(N, 2) uint64 give restart-tile tables (all-zero header row: untiled). planar "
             "(N, 3, H, W) float32 also receives each decoded JPEG sample as x * scale[c] + shift[c] "
             "(uint8: as is); places (N, 4) int32 puts each resized crop at (top, left, height, width) "
             "of its slot and sets the rest to fill (a letterbox); orientations (N,) uint8 (EXIF, 1-8) "
             "turns each sample as PIL.ImageOps.exif_transpose does, its crop a box of the turned image; "
             "program_codes (N, K) int32 and program_params (N, K, 8) float32 (a PixelProgram) run on "
             "each decoded sample's slot in its decoding thread, before the planar copy; "
             "non-JPEG samples are left to the caller.")
        .def("normalize_planar", &batch_normalize_planar, nb::arg("src"), nb::arg("out"), nb::kw_only(),
             nb::arg("scale").none() = nb::none(), nb::arg("shift").none() = nb::none(),
             "out (N, 3, H, W) float32 = src (N, 3, H, W) uint8 * scale[c] + shift[c] on the pool's "
             "threads, GIL released (the same bits as decode_into's planar output).");
}

}  // namespace

NB_MODULE(_core, m) {
    m.doc() = "fastloader native core (libjpeg-turbo decode, resize, batch, restart tiles, masks)";
    m.attr("__version__") = FASTLOADER_VERSION;
    m.attr("jpeg_lib_version") = JPEG_LIB_VERSION;
    // A decoder still referenced at exit (a module global, a daemon thread's frame) is not a
    // reference-counting bug; nanobind's leak report would tell users it is.
    nb::set_leak_warnings(false);

    register_header(m);
    m.def("header", &header, nb::arg("data"),
          "The JpegHeader of JPEG bytes; ValueError with libjpeg's message on bad bytes.");
    m.def("decode_into", &decode_into, nb::arg("data"), nb::arg("crop"), nb::arg("flip"), nb::arg("out"),
          nb::kw_only(), nb::arg("dct_scaling") = true, nb::arg("orientation") = 1,
          "Decode JPEG bytes cropped to (top, left, height, width) ((0,0,0,0): whole image), "
          "resized to out's (H, W) and mirrored if flip; returns None or the error message. "
          "orientation (EXIF, 1-8) turns the image as PIL.ImageOps.exif_transpose does, the crop "
          "a box of the turned image.");
    register_batch_decoder(m);
    register_tiles(m);
    register_masks(m);
    register_coeffs(m);
    register_audio(m);
    register_pixel_ops(m);
}
