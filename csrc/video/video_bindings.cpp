// The Python module fastloader._video: checks the arrays, holds the clip's buffer, releases the
// GIL around the whole window's decode, returns (status, message) for
// fastloader/decode/video_native.py (0 decoded, 1 damaged, 2 left to PyAV).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <stdexcept>
#include <string>
#include <tuple>

#include "../bytes_view.h"
#include "video_decode.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavutil/log.h>
}

namespace nb = nanobind;

namespace {

using Pts = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Frames = nb::ndarray<uint8_t, nb::ndim<4>, nb::c_contig, nb::device::cpu>;
using Found = nb::ndarray<uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

std::tuple<int, std::string> decode_window(nb::handle data, int64_t seek_pts, Pts pts,
                                           std::tuple<int, int, int, int> crop, bool flip,
                                           int threads, int thread_type, Frames out,
                                           Found found) {
    fl::BytesView bytes(data, "video: data must be a contiguous bytes-like object");
    const size_t count = pts.shape(0);
    const auto [top, left, height, width] = crop;
    if (top < 0 || left < 0 || height < 1 || width < 1)
        throw std::invalid_argument("decode_window: the crop must lie in the frame");
    if (out.shape(0) != count || out.shape(1) < 1 || out.shape(2) < 1 || out.shape(3) != 3 ||
        found.shape(0) != count)
        throw std::invalid_argument("decode_window: out must be uint8 [len(pts), h, w, 3] and "
                                    "found uint8 [len(pts)]");
    for (size_t k = 1; k < count; ++k)
        if (pts.data()[k] <= pts.data()[k - 1])
            throw std::invalid_argument("decode_window: pts must ascend without repeats");
    if (threads < 1 || thread_type < 1 || thread_type > 3)
        throw std::invalid_argument("decode_window: threads >= 1, thread_type 1, 2 or 3");
    flv::Result result;
    {
        nb::gil_scoped_release release;
        result = flv::decode_window(bytes.data(), bytes.size(), seek_pts, pts.data(), count,
                                    threads, thread_type, {top, left, height, width},
                                    {out.data(), found.data(), static_cast<int>(out.shape(1)),
                                     static_cast<int>(out.shape(2)), flip});
    }
    return {static_cast<int>(result.status), result.message};
}

}  // namespace

NB_MODULE(_video, m) {
    // What goes wrong reaches the caller as a DecodeError naming the clip; FFmpeg's own lines
    // ("moov atom not found", concealment notes) would otherwise go to stderr from the
    // loader's threads, once per damaged window. The level is that of the FFmpeg this module
    // links (the system's), not of PyAV's bundled copy.
    av_log_set_level(AV_LOG_QUIET);
    m.attr("__version__") = FASTLOADER_VERSION;
    m.attr("libavcodec_version") = LIBAVCODEC_IDENT;
    m.def("decode_window", &decode_window, nb::arg("data"), nb::arg("seek_pts"), nb::arg("pts"),
          nb::arg("crop"), nb::arg("flip"), nb::arg("threads"), nb::arg("thread_type"),
          nb::arg("out"), nb::arg("found"),
          "Decode the frames of ascending, distinct `pts` from the container bytes `data` after "
          "a seek to `seek_pts`, each cut to crop=(top, left, height, width) as RGB24, scaled to "
          "out's [h, w] (Pillow's bilinear, antialiased, within one level) and flipped if asked "
          "into out[k] (uint8 [len(pts), h, w, 3]), found[k] set to 1 for each; the GIL "
          "released throughout. Returns (status, message): 0 decoded (found says which), 1 "
          "damaged bytes, 2 a stream this path leaves to PyAV.");
}
