// Python bridge for restart-tile repacking and splicing: checks shapes, releases the GIL and
// returns (status, message, ...) tuples that fastloader/tiles.py maps to exceptions.
#include "tiles_bindings.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tiles.h"

namespace nb = nanobind;
namespace tiles = fastloader::tiles;

namespace {

using Bytes = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Table = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Offsets = nb::ndarray<const uint32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Scratch = nb::ndarray<uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using OffsetsOut = nb::ndarray<nb::numpy, uint32_t, nb::ndim<1>>;

nb::tuple geometry_tuple(const tiles::Geometry& g) {
    return nb::make_tuple(g.width, g.height, g.sof_offset, g.scan_offset, g.mcu_width,
                          g.mcu_height, g.mcus_per_row, g.mcu_rows, g.restart_mcus);
}

// Values outside uint32 cannot come from a real table: report them as corrupt.
bool geometry_from(const Table& table, tiles::Geometry* g) {
    if (table.shape(0) != tiles::kGeometryFields) return false;
    uint32_t* fields[tiles::kGeometryFields] = {
        &g->width, &g->height, &g->sof_offset, &g->scan_offset, &g->mcu_width,
        &g->mcu_height, &g->mcus_per_row, &g->mcu_rows, &g->restart_mcus};
    for (int i = 0; i < tiles::kGeometryFields; ++i) {
        int64_t value = table(i);
        if (value < 0 || value > std::numeric_limits<uint32_t>::max()) return false;
        *fields[i] = static_cast<uint32_t>(value);
    }
    return true;
}

OffsetsOut offsets_array(std::vector<uint32_t>&& offsets) {
    auto* owned = new std::vector<uint32_t>(std::move(offsets));
    nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<uint32_t>*>(p); });
    return OffsetsOut(owned->data(), {owned->size()}, owner);
}

nb::tuple repack(Bytes data, uint32_t max_restart_mcus, bool keep_all_markers) {
    tiles::TiledRecord record;
    {
        nb::gil_scoped_release release;
        record = tiles::repack(data.data(), data.shape(0), max_restart_mcus,
                               keep_all_markers ? tiles::Markers::kAll : tiles::Markers::kPixels);
    }
    nb::bytes out(reinterpret_cast<const char*>(record.data.data()), record.data.size());
    return nb::make_tuple(static_cast<int>(record.status), record.message, out,
                          geometry_tuple(record.geometry), offsets_array(std::move(record.offsets)));
}

nb::tuple scan(Bytes data) {
    tiles::Geometry geometry;
    std::vector<uint32_t> offsets;
    std::string message;
    tiles::Status status;
    {
        nb::gil_scoped_release release;
        status = tiles::scan_table(data.data(), data.shape(0), &geometry, &offsets, &message);
    }
    return nb::make_tuple(static_cast<int>(status), message, geometry_tuple(geometry),
                          offsets_array(std::move(offsets)));
}

nb::tuple splice_into(Bytes data, Table table, Offsets offsets, int64_t top, int64_t left,
                      int64_t height, int64_t width, uint32_t context, Scratch out) {
    tiles::Geometry geometry;
    if (!geometry_from(table, &geometry)) {
        return nb::make_tuple(static_cast<int>(tiles::Status::kCorrupt),
                              std::string("tile table header must hold 9 values in uint32 range"),
                              0, 0, 0, 0, 0);
    }
    tiles::Spliced result;
    {
        nb::gil_scoped_release release;
        tiles::Crop crop{top, left, height, width};
        result = tiles::splice(data.data(), data.shape(0), geometry, offsets.data(),
                               offsets.shape(0), crop, context, out.data(), out.shape(0));
    }
    return nb::make_tuple(static_cast<int>(result.status), result.message, result.size,
                          result.y0, result.x0, result.height, result.width);
}

}  // namespace

void register_tiles(nanobind::module_ &m) {
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
    m.attr("tiles_geometry_fields") = tiles::kGeometryFields;
}
