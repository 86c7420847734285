// Python bridge of the mask kernels (masks_bindings.cpp), registered by bindings.cpp.
#pragma once

#include <nanobind/nanobind.h>

void register_masks(nanobind::module_ &m);
