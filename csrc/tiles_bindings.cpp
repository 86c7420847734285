// Python bridge for restart-tile repacking and splicing (the second of the two files that see
// Python, beside bindings.cpp): checks shapes, releases the GIL and returns (status, message,
// ...) tuples that fastloader/decode/tiles.py maps to exceptions. A table's geometry crosses
// the boundary as the TileGeometry class, its fields named.
#include "tiles_bindings.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <tuple>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tiles.h"

namespace nb = nanobind;
namespace tiles = fl::tiles;

namespace {

using Bytes = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Offsets = nb::ndarray<const uint32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Scratch = nb::ndarray<uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using OffsetsOut = nb::ndarray<nb::numpy, uint32_t, nb::ndim<1>>;

OffsetsOut offsets_array(std::vector<uint32_t>&& offsets) {
    auto* owned = new std::vector<uint32_t>(std::move(offsets));
    nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<uint32_t>*>(p); });
    return OffsetsOut(owned->data(), {owned->size()}, owner);
}

// Typed tuples, so the generated stub (and mypy) know each element: (status, message, ...).
using RepackResult = std::tuple<int, std::string, nb::bytes, tiles::Geometry, OffsetsOut>;
using ScanResult = std::tuple<int, std::string, tiles::Geometry, OffsetsOut>;
using SpliceResult = std::tuple<int, std::string, size_t, uint32_t, uint32_t, uint32_t, uint32_t>;

RepackResult repack(Bytes data, uint32_t max_restart_mcus, bool keep_all_markers) {
    tiles::TiledRecord record;
    {
        nb::gil_scoped_release release;
        record = tiles::repack(data.data(), data.shape(0), max_restart_mcus,
                               keep_all_markers ? tiles::Markers::kAll : tiles::Markers::kPixels);
    }
    nb::bytes out(reinterpret_cast<const char*>(record.data.data()), record.data.size());
    return {static_cast<int>(record.status), record.message, out, record.geometry,
            offsets_array(std::move(record.offsets))};
}

ScanResult scan(Bytes data) {
    tiles::Geometry geometry;
    std::vector<uint32_t> offsets;
    std::string message;
    tiles::Status status;
    {
        nb::gil_scoped_release release;
        status = tiles::scan_table(data.data(), data.shape(0), &geometry, &offsets, &message);
    }
    return {static_cast<int>(status), message, geometry, offsets_array(std::move(offsets))};
}

SpliceResult splice_into(Bytes data, const tiles::Geometry& geometry, Offsets offsets, int64_t top,
                      int64_t left, int64_t height, int64_t width, uint32_t context, Scratch out) {
    tiles::Spliced result;
    {
        nb::gil_scoped_release release;
        tiles::Crop crop{top, left, height, width};
        result = tiles::splice(data.data(), data.shape(0), geometry, offsets.data(),
                               offsets.shape(0), crop, context, out.data(), out.shape(0));
    }
    return {static_cast<int>(result.status), result.message, result.size,
            result.y0, result.x0, result.height, result.width};
}

// Field names in the order of tiles::Geometry (and of an index row of tile headers).
constexpr const char* kFieldNames[tiles::kGeometryFields] = {
    "width", "height", "sof_offset", "scan_offset", "mcu_width",
    "mcu_height", "mcus_per_row", "mcu_rows", "restart_mcus"};

void register_geometry(nanobind::module_& m) {
    using G = tiles::Geometry;
    nb::class_<G> cls(m, "TileGeometry",
                      "A tiled record's MCU geometry: everything in its table but the segment offsets.");
    cls.def(
        "__init__",
        [](G* g, uint32_t width, uint32_t height, uint32_t sof_offset, uint32_t scan_offset,
           uint32_t mcu_width, uint32_t mcu_height, uint32_t mcus_per_row, uint32_t mcu_rows,
           uint32_t restart_mcus) {
            new (g) G{width,      height,       sof_offset, scan_offset, mcu_width,
                      mcu_height, mcus_per_row, mcu_rows,   restart_mcus};
        },
        nb::kw_only(), nb::arg("width"), nb::arg("height"), nb::arg("sof_offset"),
        nb::arg("scan_offset"), nb::arg("mcu_width"), nb::arg("mcu_height"),
        nb::arg("mcus_per_row"), nb::arg("mcu_rows"), nb::arg("restart_mcus"));
    cls.def_ro("width", &G::width, "Image width in pixels (as in SOF).")
        .def_ro("height", &G::height, "Image height in pixels (as in SOF).")
        .def_ro("sof_offset", &G::sof_offset, "Offset of the 0xFF of the SOF marker.")
        .def_ro("scan_offset", &G::scan_offset, "Offset of the first entropy-coded byte (after SOS).")
        .def_ro("mcu_width", &G::mcu_width, "MCU width in image pixels (8 or 8 x max sampling).")
        .def_ro("mcu_height", &G::mcu_height, "MCU height in image pixels.")
        .def_ro("mcus_per_row", &G::mcus_per_row, "MCU columns in the scan.")
        .def_ro("mcu_rows", &G::mcu_rows, "MCU rows in the scan.")
        .def_ro("restart_mcus", &G::restart_mcus, "MCUs per restart segment (divides mcus_per_row).");
    nb::list names;
    for (const char* name : kFieldNames) names.append(nb::str(name));
    cls.attr("fields") = nb::steal<nb::tuple>(PyList_AsTuple(names.ptr()));
}

}  // namespace

void register_tiles(nanobind::module_ &m) {
    register_geometry(m);
    m.def("tiles_repack", &repack, nb::arg("data"), nb::arg("max_restart_mcus"),
          nb::arg("keep_all_markers"),
          "Lossless restart-tile repack: (status, message, bytes, geometry, offsets).");
    m.def("tiles_scan", &scan, nb::arg("data"),
          "Scan a tiled record for its table: (status, message, geometry, offsets).");
    m.def("tiles_splice_into", &splice_into, nb::arg("data"), nb::arg("geometry"),
          nb::arg("offsets"), nb::arg("top"), nb::arg("left"), nb::arg("height"),
          nb::arg("width"), nb::arg("context"), nb::arg("out"),
          "Splice the segments covering a crop into out: "
          "(status, message, size, y0, x0, height, width).");
}
