// The only file that sees Python: exposes the C++ core as fastloader._core.
#include <nanobind/nanobind.h>
#include <jpeglib.h>

#include "tiles_bindings.h"

namespace nb = nanobind;

NB_MODULE(_core, m) {
    m.doc() = "fastloader native core (libjpeg-turbo decode, resize, batch)";
    m.attr("__version__") = FASTLOADER_VERSION;
    m.attr("jpeg_lib_version") = JPEG_LIB_VERSION;
    register_tiles(m);
}
