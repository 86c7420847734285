// What the batch decode's bindings share (bindings.cpp's decode_into, views_bindings.cpp's
// decode_views_into): record buffers, the nanobind array types, tile tables, planar outputs.
// Sees Python, as they do.
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "batch.h"
#include "normalize.h"
#include "tiles.h"

namespace fl::bindings {

namespace nb = nanobind;

// A contiguous read-only view of any bytes-like object, released on scope exit.
class BufferView {
public:
    explicit BufferView(nb::handle obj) {
        if (PyObject_GetBuffer(obj.ptr(), &view_, PyBUF_SIMPLE) != 0) {
            PyErr_Clear();
            return;
        }
        ok_ = true;
    }
    ~BufferView() {
        if (ok_) PyBuffer_Release(&view_);
    }
    BufferView(const BufferView &) = delete;
    BufferView &operator=(const BufferView &) = delete;
    BufferView(BufferView &&other) noexcept : view_(other.view_), ok_(other.ok_) { other.ok_ = false; }

    bool ok() const { return ok_; }
    const uint8_t *data() const { return static_cast<const uint8_t *>(view_.buf); }
    size_t size() const { return static_cast<size_t>(view_.len); }

private:
    Py_buffer view_{};
    bool ok_ = false;
};

inline BufferView require_buffer(nb::handle obj, const char *name) {
    BufferView view(obj);
    if (!view.ok())
        throw nb::type_error((std::string(name) + " must be a contiguous bytes-like object (bytes, "
                              "bytearray, memoryview)").c_str());
    return view;
}

using Slot = nb::ndarray<uint8_t, nb::ndim<3>, nb::c_contig, nb::device::cpu>;
using Batch = nb::ndarray<uint8_t, nb::ndim<4>, nb::c_contig, nb::device::cpu>;
using Crops = nb::ndarray<const int32_t, nb::shape<-1, 4>, nb::c_contig, nb::device::cpu>;
using Flips = nb::ndarray<const bool, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Orientations = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using TileHeaders =
    nb::ndarray<const int64_t, nb::shape<-1, fl::tiles::kGeometryFields>, nb::c_contig, nb::device::cpu>;
using TileOffsets = nb::ndarray<const uint32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using TileSpans = nb::ndarray<const uint64_t, nb::shape<-1, 2>, nb::c_contig, nb::device::cpu>;
using Planar = nb::ndarray<nb::ndim<4>, nb::c_contig, nb::device::cpu>;
using Affine = std::tuple<float, float, float>;

// Per-sample views into the batch's tile arrays: header rows (N, 9), one flat offsets array and
// [begin, end) spans into it. A span outside the offsets array gives an empty table, which
// the splice reports as damaged for that sample only.
inline std::vector<fl::TileRef> tile_refs(const std::optional<TileHeaders> &headers,
                                   const std::optional<TileOffsets> &offsets,
                                   const std::optional<TileSpans> &spans, size_t n) {
    if (!headers && !offsets && !spans) return {};
    if (!headers || !offsets || !spans)
        throw nb::value_error("tile_headers, tile_offsets and tile_spans go together: pass all or none");
    if (headers->shape(0) != n || spans->shape(0) != n)
        throw nb::value_error("tile_headers (N, TileGeometry fields) and tile_spans (N, 2) must have one row per "
                              "record");
    std::vector<fl::TileRef> refs(n);
    const uint64_t total = offsets->shape(0);
    for (size_t k = 0; k < n; ++k) {
        refs[k].header = headers->data() + fl::tiles::kGeometryFields * k;
        const uint64_t begin = (*spans)(k, 0), end = (*spans)(k, 1);
        if (begin <= end && end <= total) {
            refs[k].offsets = offsets->data() + begin;
            refs[k].n_offsets = static_cast<size_t>(end - begin);
        }
    }
    return refs;
}

// The per-channel x * scale[c] + shift[c] constants of a planar output (unset: 1 and 0).
inline void set_affine(fl::PlanarOutput &target, const std::optional<Affine> &scale, const std::optional<Affine> &shift) {
    if (scale) {
        target.scale[0] = std::get<0>(*scale);
        target.scale[1] = std::get<1>(*scale);
        target.scale[2] = std::get<2>(*scale);
    }
    if (shift) {
        target.shift[0] = std::get<0>(*shift);
        target.shift[1] = std::get<1>(*shift);
        target.shift[2] = std::get<2>(*shift);
    }
}

// The planar (N, 3, H, W) float32 or uint8 output matching out (N, H, W, 3), with its affine
// constants (float32 only; default x * 1 + 0).
inline fl::PlanarOutput planar_output(const std::optional<Planar> &planar, const Batch &out,
                               const std::optional<Affine> &scale, const std::optional<Affine> &shift) {
    fl::PlanarOutput result;
    if (!planar) {
        if (scale || shift) throw nb::value_error("scale and shift need a planar output");
        return result;
    }
    if (planar->shape(0) != out.shape(0) || planar->shape(1) != 3 || planar->shape(2) != out.shape(1) ||
        planar->shape(3) != out.shape(2))
        throw nb::value_error("planar must have shape (N, 3, H, W) for out of shape (N, H, W, 3)");
    result.is_float = planar->dtype() == nb::dtype<float>();
    if (!result.is_float && planar->dtype() != nb::dtype<uint8_t>())
        throw nb::type_error("planar must be float32 or uint8");
    if (!result.is_float && (scale || shift)) throw nb::value_error("scale and shift apply to float32 planar only");
    set_affine(result, scale, shift);
    result.data = planar->data();
    return result;
}

using ProgramCodes = nb::ndarray<const int32_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using ProgramParams = nb::ndarray<const float, nb::ndim<3>, nb::c_contig, nb::device::cpu>;

// A PixelProgram's arrays (codes (N, K) int32, params (N, K, 8) float32) for n samples, checked;
// neither: no program.
inline fl::PixelProgramRef program_ref(const std::optional<ProgramCodes> &codes,
                                       const std::optional<ProgramParams> &params, size_t n) {
    fl::PixelProgramRef ref;
    if (!codes && !params) return ref;
    if (!codes || !params) throw nb::value_error("a program's codes and params go together: pass both or neither");
    if (codes->shape(0) != n || params->shape(0) != n || params->shape(1) != codes->shape(1) ||
        params->shape(2) != fl::kPixelParams)
        throw nb::value_error("a program must have codes (N, K) and params (N, K, 8), one row per record");
    ref.codes = codes->data();
    ref.params = params->data();
    ref.n_ops = static_cast<int>(codes->shape(1));
    return ref;
}

inline void check_orientation(int orientation) {
    if (orientation < 1 || orientation > 8) throw nb::value_error("an EXIF orientation must be in 1..8");
}

// Each record's buffer (views, kept alive by the caller) as a Record; a record that exposes no
// contiguous buffer stays empty and is reported by batch_result.
inline std::vector<fl::Record> record_views(const nb::sequence &records, std::vector<BufferView> &views) {
    const size_t n = nb::len(records);
    views.reserve(n);
    std::vector<fl::Record> recs(n);
    for (size_t k = 0; k < n; ++k) {
        views.emplace_back(records[k]);
        if (views.back().ok()) recs[k] = fl::Record{views.back().data(), views.back().size()};
    }
    return recs;
}

// (per-sample error or None, indices of the non-JPEG records left to the caller).
using BatchResult = std::tuple<std::vector<std::optional<std::string>>, std::vector<size_t>>;

inline BatchResult batch_result(const std::vector<BufferView> &views, std::vector<std::string> &errors,
                                const std::vector<size_t> &skipped) {
    BatchResult result;
    auto &[error_list, skipped_list] = result;
    const size_t n = views.size();
    error_list.resize(n);
    for (size_t k = 0; k < n; ++k) {
        if (!views[k].ok() && errors[k].empty()) errors[k] = "record is not a contiguous bytes-like object";
        if (!errors[k].empty()) error_list[k] = std::move(errors[k]);
    }
    for (size_t k : skipped)
        if (views[k].ok()) skipped_list.push_back(k);
    return result;
}

}  // namespace fl::bindings
