// Registers the pixel augmentation kernels (fl::apply_pixel_program) on the extension module.
#pragma once
#include <nanobind/nanobind.h>

void register_pixel_ops(nanobind::module_ &m);
