// Python bridge for the pixel ops (beside bindings.cpp, tiles_bindings.cpp, masks_bindings.cpp):
// checks the batch and the program's shapes, releases the GIL, runs each sample's row on a
// thread of its own scratch. fastloader/decode/pixels/apply.py is its caller.
#include "pixel_ops_bindings.h"

#include <nanobind/ndarray.h>

#include <cstdint>
#include <stdexcept>
#include <thread>
#include <vector>

#include "pixel_ops.h"
#include "pixel_ops_internal.h"

namespace nb = nanobind;

namespace {

using Images = nb::ndarray<uint8_t, nb::ndim<4>, nb::c_contig, nb::device::cpu>;
using Codes = nb::ndarray<const int32_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using Params = nb::ndarray<const float, nb::ndim<3>, nb::c_contig, nb::device::cpu>;

// Samples first, first + stride, ...: interleaved, so a batch's costly samples spread out.
void run_samples(uint8_t *images, int64_t count, int height, int width, const int32_t *codes,
                 const float *params, int steps, int first, int stride) {
    fl::PixelScratch scratch;
    const size_t image_bytes = static_cast<size_t>(height) * width * 3;
    for (int64_t n = first; n < count; n += stride) {
        fl::apply_pixel_program(images + n * image_bytes, height, width, codes + n * steps,
                                params + n * steps * fl::kPixelParams, steps, scratch);
    }
}

void apply_pixel_program(Images images, Codes codes, Params params, int num_threads) {
    const int64_t count = static_cast<int64_t>(images.shape(0));
    if (images.shape(3) != 3) throw std::invalid_argument("images must be [N, H, W, 3]");
    if (static_cast<int64_t>(codes.shape(0)) != count ||
        static_cast<int64_t>(params.shape(0)) != count)
        throw std::invalid_argument("codes and params must have one row per image");
    if (params.shape(1) != codes.shape(1) || params.shape(2) != fl::kPixelParams)
        throw std::invalid_argument("params must be [N, K, 8] with codes [N, K]");
    if (num_threads < 1) throw std::invalid_argument("num_threads must be >= 1");
    const int height = static_cast<int>(images.shape(1)), width = static_cast<int>(images.shape(2));
    const int steps = static_cast<int>(codes.shape(1));
    const int threads = static_cast<int>(std::min<int64_t>(num_threads, std::max<int64_t>(count, 1)));
    uint8_t *data = images.data();
    const int32_t *code_data = codes.data();
    const float *param_data = params.data();
    nb::gil_scoped_release release;
    if (threads == 1) {
        run_samples(data, count, height, width, code_data, param_data, steps, 0, 1);
        return;
    }
    std::vector<std::thread> workers;
    workers.reserve(threads);
    for (int t = 0; t < threads; ++t) {
        workers.emplace_back(run_samples, data, count, height, width, code_data, param_data,
                             steps, t, threads);
    }
    for (auto &worker : workers) worker.join();
}

}  // namespace

void register_pixel_ops(nb::module_ &m) {
    m.def("apply_pixel_program", &apply_pixel_program, nb::arg("images"), nb::arg("codes"),
          nb::arg("params"), nb::arg("num_threads") = 1,
          "Run a PixelProgram (codes int32 [N, K], params float32 [N, K, 8]) on uint8 "
          "[N, H, W, 3] images in place, the GIL released, on num_threads threads.");
    m.def("pixel_simd", &fl::pixel::simd_enabled, "True when the AVX2 pixel kernels are in use.");
    m.def("pixel_set_simd", &fl::pixel::set_simd, nb::arg("enabled"),
          "Test seam: the AVX2 pixel kernels (where the CPU has them) or the scalar ones, which "
          "give the same bytes; returns the previous setting.");
}
