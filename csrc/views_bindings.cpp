// Python bridge of the views decode (a file that sees Python, beside bindings.cpp): checks the
// views' shapes, releases the GIL, maps each sample's status to None or its message.
#include "views_bindings.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>
#include <vector>

#include "batch_bindings.h"

namespace nb = nanobind;

namespace fl::bindings {
namespace {

using ViewCrops = nb::ndarray<const int32_t, nb::ndim<3>, nb::c_contig, nb::device::cpu>;
using ViewFlips = nb::ndarray<const bool, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using Planars = std::optional<std::vector<std::optional<Planar>>>;
using Codes = std::optional<std::vector<std::optional<ProgramCodes>>>;
using Params = std::optional<std::vector<std::optional<ProgramParams>>>;

// View v's program from the per-view lists (None, or V entries each None or an array).
fl::PixelProgramRef view_program(const Codes &codes, const Params &params, size_t v, size_t count, size_t n) {
    if ((codes && codes->size() != count) || (params && params->size() != count))
        throw nb::value_error("program_codes and program_params must hold one entry a view");
    static const std::optional<ProgramCodes> kNoCodes;
    static const std::optional<ProgramParams> kNoParams;
    return program_ref(codes ? (*codes)[v] : kNoCodes, params ? (*params)[v] : kNoParams, n);
}

// The views' outputs and planar targets, checked against N records and crops (N, V, 4).
fl::ViewOutputs view_outputs(size_t n, const ViewCrops &crops, const ViewFlips &flips, std::vector<Batch> &outs,
                             const Planars &planars, const std::optional<Affine> &scale,
                             const std::optional<Affine> &shift, const Codes &codes, const Params &params) {
    const size_t count = outs.size();
    if (count == 0) throw nb::value_error("outs must hold at least one view");
    if (crops.shape(0) != n || crops.shape(1) != count || crops.shape(2) != 4 || flips.shape(0) != n ||
        flips.shape(1) != count)
        throw nb::value_error("records, crops (N, V, 4), flips (N, V) and outs (V arrays) disagree on N or V");
    if (planars && planars->size() != count) throw nb::value_error("planars must hold one entry a view");
    bool any_planar = false;
    fl::ViewOutputs views;
    views.count = static_cast<int>(count);
    views.crops = crops.data();
    views.flips = flips.data();
    for (size_t v = 0; v < count; ++v) {
        Batch &out = outs[v];
        if (out.shape(0) != n || out.shape(3) != 3 || out.shape(1) < 1 || out.shape(2) < 1)
            throw nb::value_error("every view's out must have shape (N, H, W, 3)");
        static const std::optional<Planar> kNone;
        const std::optional<Planar> &planar = planars ? (*planars)[v] : kNone;
        // scale and shift are the float32 targets'; a uint8 one takes the pixels as they are
        const bool as_float = planar && planar->dtype() == nb::dtype<float>();
        any_planar = any_planar || as_float;
        views.outs.push_back(out.data());
        views.heights.push_back(static_cast<int>(out.shape(1)));
        views.programs.push_back(view_program(codes, params, v, count, n));
        views.widths.push_back(static_cast<int>(out.shape(2)));
        views.planars.push_back(planar_output(planar, out, as_float ? scale : std::nullopt,
                                              as_float ? shift : std::nullopt));
    }
    if (!any_planar && (scale || shift)) throw nb::value_error("scale and shift need a float32 planar output");
    return views;
}

BatchResult decode_views_into(fl::BatchDecoder &self, nb::sequence records, ViewCrops crops, ViewFlips flips,
                              std::vector<Batch> outs, bool dct_scaling, std::optional<TileHeaders> tile_headers,
                              std::optional<TileOffsets> tile_offsets, std::optional<TileSpans> tile_spans,
                              Planars planars, std::optional<Affine> scale, std::optional<Affine> shift,
                              std::optional<Orientations> orientations, Codes program_codes, Params program_params) {
    const size_t n = nb::len(records);
    const fl::ViewOutputs views =
        view_outputs(n, crops, flips, outs, planars, scale, shift, program_codes, program_params);
    if (orientations) {
        if (orientations->shape(0) != n) throw nb::value_error("orientations must have shape (N,)");
        for (size_t k = 0; k < n; ++k) check_orientation((*orientations)(k));
    }
    const std::vector<fl::TileRef> tiles = tile_refs(tile_headers, tile_offsets, tile_spans, n);
    std::vector<BufferView> buffers;
    const std::vector<fl::Record> recs = record_views(records, buffers);
    std::vector<std::string> errors;
    std::vector<size_t> skipped;
    fl::DecodeOptions options;
    options.dct_scaling = dct_scaling;
    {
        nb::gil_scoped_release release;
        self.decode_views(recs, views, options, errors, skipped, tiles.empty() ? nullptr : tiles.data(),
                          orientations ? orientations->data() : nullptr);
    }
    return batch_result(buffers, errors, skipped);
}

}  // namespace

void add_views(nb::class_<fl::BatchDecoder> &cls) {
    cls.def("decode_views_into", &decode_views_into, nb::arg("records"), nb::arg("crops"), nb::arg("flips"),
            nb::arg("outs"), nb::kw_only(), nb::arg("dct_scaling") = true,
            nb::arg("tile_headers").none() = nb::none(), nb::arg("tile_offsets").none() = nb::none(),
            nb::arg("tile_spans").none() = nb::none(), nb::arg("planars").none() = nb::none(),
            nb::arg("scale").none() = nb::none(), nb::arg("shift").none() = nb::none(),
            nb::arg("orientations").none() = nb::none(), nb::arg("program_codes").none() = nb::none(),
            nb::arg("program_params").none() = nb::none(),
            "Decode each record once into V views, GIL released; returns (errors, non_jpeg_indices). "
            "crops (N, V, 4) int32 and flips (N, V) bool give view v of record k; outs is V uint8 "
            "arrays (N, H_v, W_v, 3); planars None or V entries (None or (N, 3, H_v, W_v) float32 or "
            "uint8); program_codes and program_params None or V entries (None or a PixelProgram's arrays), "
            "view v's pixel ops; tiles, scale, shift and orientations as decode_into's. Non-JPEG samples are "
            "left to the caller.");
    cls.def_prop_ro(
        "records_decoded",
        [](fl::BatchDecoder &self) {
            nb::gil_scoped_release release;  // waits for a running batch
            return self.records_decoded();
        },
        "Records read and entropy-decoded so far: one a sample of decode_into or decode_views_into.");
}

}  // namespace fl::bindings
