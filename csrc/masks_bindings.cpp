// Python bridge for the mask kernels (a third file that sees Python, beside bindings.cpp and
// tiles_bindings.cpp): checks shapes, releases the GIL, returns "" or the kernel's message,
// which fastloader/decode/masks.py turns into an error naming the sample and field.
#include "masks_bindings.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "masks.h"

namespace nb = nanobind;

namespace {

using Values = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Lengths = nb::ndarray<const uint32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Crop = nb::ndarray<const int64_t, nb::shape<4>, nb::c_contig, nb::device::cpu>;
using Out = nb::ndarray<uint8_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

std::string mask_from_runs(Values values, Lengths lengths, int64_t height, int64_t width,
                           Crop crop, bool flip, Out out) {
    if (values.shape(0) != lengths.shape(0)) {
        throw std::invalid_argument("mask_from_runs: values and lengths differ in length");
    }
    if (height <= 0 || width <= 0) {
        throw std::invalid_argument("mask_from_runs: height and width must be positive");
    }
    const int64_t box[4] = {crop.data()[0], crop.data()[1], crop.data()[2], crop.data()[3]};
    nb::gil_scoped_release release;
    return fl::mask_from_runs(values.data(), lengths.data(), values.shape(0), height, width, box,
                              flip, out.data(), static_cast<int64_t>(out.shape(0)),
                              static_cast<int64_t>(out.shape(1)));
}

}  // namespace

void register_masks(nb::module_ &m) {
    m.def("mask_from_runs", &mask_from_runs, nb::arg("values"), nb::arg("lengths"),
          nb::arg("height"), nb::arg("width"), nb::arg("crop"), nb::arg("flip"), nb::arg("out"),
          "Write the mask given as row-major runs (values uint8, lengths uint32) of height x "
          "width, cropped to crop (top, left, height, width), resized to out's (H, W) with "
          "nearest neighbour and mirrored if flip, into out; returns \"\" or why the runs are "
          "bad.");
}
