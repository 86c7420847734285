// Registers the decode-aware packing (restart tiles) functions on the extension module.
#pragma once
#include <nanobind/nanobind.h>

void register_tiles(nanobind::module_ &m);
