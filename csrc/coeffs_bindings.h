// Registers the coeffs record codec's functions on the extension module.
#pragma once
#include <nanobind/nanobind.h>

void register_coeffs(nanobind::module_ &m);
