// Python bridge of the coeffs record codec (a file that sees Python, beside bindings.cpp): takes
// bytes-like objects, releases the GIL, returns messages that fastloader/decode/coeffs.py maps
// to its errors.
#include "coeffs_bindings.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "coeffs.h"
#include "bytes_view.h"

#include <jconfig.h>  // LIBJPEG_TURBO_VERSION_NUMBER: the library whose pixels the codec matches
#ifndef LIBJPEG_TURBO_VERSION_NUMBER
#define LIBJPEG_TURBO_VERSION_NUMBER 0
#endif

namespace nb = nanobind;
namespace coeffs = fl::coeffs;

namespace {

constexpr const char *kBytesRefusal = "data must be a contiguous bytes-like object (bytes, bytearray, memoryview)";

using Slot = nb::ndarray<uint8_t, nb::ndim<3>, nb::c_contig, nb::device::cpu>;

nb::bytes encode(nb::handle data, int seg_mcus, int nibble_from) {
    fl::BytesView in(data, kBytesRefusal);
    std::vector<uint8_t> out;
    std::string error;
    {
        nb::gil_scoped_release release;
        error = coeffs::encode_jpeg(in.data(), in.size(), out, seg_mcus, nibble_from);
    }
    if (!error.empty()) throw nb::value_error(error.c_str());
    return nb::bytes(reinterpret_cast<const char *>(out.data()), out.size());
}

nb::bytes to_jpeg(nb::handle data) {
    fl::BytesView in(data, kBytesRefusal);
    std::vector<uint8_t> out;
    std::string error;
    {
        nb::gil_scoped_release release;
        try {
            error = coeffs::record_to_jpeg(in.data(), in.size(), out);
        } catch (const std::bad_alloc &) {
            error = "out of memory";
        }
    }
    if (!error.empty()) throw nb::value_error(error.c_str());
    return nb::bytes(reinterpret_cast<const char *>(out.data()), out.size());
}

// (width, height, components, colour, subsampling, segments, EXIF orientation) of a record;
// ValueError if damaged.
std::tuple<int, int, int, std::string, std::string, int, int> info(nb::handle data) {
    fl::BytesView in(data, kBytesRefusal);
    coeffs::View view;
    if (std::string why = coeffs::open_record(in.data(), in.size(), view); !why.empty())
        throw nb::value_error(why.c_str());
    const coeffs::Geometry &g = view.geo;
    static const char *const colors[] = {"gray", "ycbcr", "rgb", "cmyk", "ycck"};
    std::string sub = "gray";
    if (g.ncomp == 3) {
        const int rh = g.comps[1].rh, rv = g.comps[1].rv;
        const bool same = g.comps[2].rh == rh && g.comps[2].rv == rv && g.comps[0].rh == 1 && g.comps[0].rv == 1;
        sub = !same ? "other" : rh == 1 && rv == 1 ? "4:4:4" : rh == 2 && rv == 1 ? "4:2:2"
              : rh == 2 && rv == 2 ? "4:2:0" : rh == 1 && rv == 2 ? "4:4:0"
              : rh == 4 && rv == 1 ? "4:1:1" : "other";
    }
    if (g.ncomp == 4) sub = "other";  // as the JPEG header reader names four components
    return {g.width, g.height, g.ncomp, colors[int(g.color)], sub, g.mcu_rows * g.segs_per_row, g.orientation};
}

std::optional<std::string> decode_into(nb::handle data, std::tuple<int, int, int, int> crop, bool flip, Slot out,
                                       bool dct_scaling) {
    if (out.shape(2) != 3) throw nb::value_error("out must have shape (H, W, 3)");
    fl::BytesView in(data, kBytesRefusal);
    const fl::CropBox box{std::get<0>(crop), std::get<1>(crop), std::get<2>(crop), std::get<3>(crop)};
    const fl::OutputSlot slot{out.data(), static_cast<int>(out.shape(0)), static_cast<int>(out.shape(1)),
                              static_cast<std::ptrdiff_t>(out.shape(1)) * 3, flip};
    std::string error;
    {
        nb::gil_scoped_release release;
        fl::RowResizer resizer;
        try {
            fl::DecodeOptions options;
            options.dct_scaling = dct_scaling;
            error = coeffs::decode_into(in.data(), in.size(), box, slot, resizer, options);
        } catch (const std::bad_alloc &) {
            error = "out of memory";
        }
    }
    if (error.empty()) return std::nullopt;
    return error;
}

std::optional<std::string> decode_scaled(nb::handle data, int denom, Slot out) {
    if (out.shape(2) != 3) throw nb::value_error("out must have shape (H, W, 3)");
    fl::BytesView in(data, kBytesRefusal);
    const fl::OutputSlot slot{out.data(), static_cast<int>(out.shape(0)), static_cast<int>(out.shape(1)),
                              static_cast<std::ptrdiff_t>(out.shape(1)) * 3, false};
    std::string error;
    {
        nb::gil_scoped_release release;
        fl::RowResizer resizer;
        try {
            error = coeffs::decode_scaled(in.data(), in.size(), denom, slot, resizer);
        } catch (const std::bad_alloc &) {
            error = "out of memory";
        }
    }
    if (error.empty()) return std::nullopt;
    return error;
}

// The DCT scale denominator both paths take for a stored crop and an (H, W) output.
int denominator(std::tuple<int, int, int, int> crop, std::tuple<int, int> size, bool dct_scaling) {
    const fl::CropBox box{std::get<0>(crop), std::get<1>(crop), std::get<2>(crop), std::get<3>(crop)};
    if (box.height < 1 || box.width < 1 || std::get<0>(size) < 1 || std::get<1>(size) < 1)
        throw nb::value_error("crop and size must be at least 1x1");
    const fl::OutputSlot slot{nullptr, std::get<0>(size), std::get<1>(size), 0, false, 1};
    fl::DecodeOptions options;
    options.dct_scaling = dct_scaling;
    return fl::dct_denominator(box, slot, options);
}

}  // namespace

void register_coeffs(nb::module_ &m) {
    m.attr("coeffs_version") = coeffs::kVersion;
    m.def("coeffs_encode", &encode, nb::arg("data"), nb::kw_only(), nb::arg("seg_mcus") = coeffs::kDefaultSegMcus,
          nb::arg("nibble_from") = coeffs::kDefaultNibbleFrom,
          "A JPEG's coefficients as a coeffs record (bytes); ValueError saying why a JPEG cannot be one.");
    m.def("coeffs_to_jpeg", &to_jpeg, nb::arg("data"),
          "The JPEG of a coeffs record's coefficients (same pixels); ValueError if the record is damaged.");
    m.def("coeffs_info", &info, nb::arg("data"),
          "(width, height, components, colour, subsampling, segments, EXIF orientation: 0 none) of a coeffs "
          "record; ValueError if its header or segment table is damaged.");
    m.def("coeffs_decode_into", &decode_into, nb::arg("data"), nb::arg("crop"), nb::arg("flip"), nb::arg("out"),
          nb::kw_only(), nb::arg("dct_scaling") = true,
          "Decode a coeffs record cropped to (top, left, height, width) ((0,0,0,0): whole image), resized to "
          "out's (H, W) and mirrored if flip, at the DCT scale the JPEG path takes (dct_scaling=False: none); "
          "returns None or the error message.");
    m.def("coeffs_decode_scaled", &decode_scaled, nb::arg("data"), nb::arg("denom"), nb::arg("out"),
          "Test seam: the whole coeffs record at 1/denom (1, 2, 4, 8), as libjpeg's scaled decode outputs it, into "
          "out (ceil(H / denom), ceil(W / denom), 3); returns None or the error message.");
    m.def("dct_denominator", &denominator, nb::arg("crop"), nb::arg("size"), nb::arg("dct_scaling") = true,
          "The DCT scale denominator (1, 2, 4 or 8) JPEG and coeffs decodes take for a (top, left, height, width) "
          "crop of the stored image resized to size (H, W).");
    m.attr("libjpeg_turbo_version") = LIBJPEG_TURBO_VERSION_NUMBER;
    m.def("coeffs_simd", &coeffs::simd_enabled, "True when the AVX2 reconstruction kernels are in use.");
    m.def("coeffs_set_simd", &coeffs::set_simd, nb::arg("enabled"),
          "Test seam: use the AVX2 kernels (when the CPU has them) or the scalar ones; returns the old choice.");
}
