// Python bridge of BatchDecoder.decode_views_into and records_decoded (views_bindings.cpp).
#pragma once
#include <nanobind/nanobind.h>

#include "batch.h"

namespace fl::bindings {

// Adds decode_views_into and records_decoded to the BatchDecoder class bindings.cpp defines.
void add_views(nanobind::class_<fl::BatchDecoder> &cls);

}  // namespace fl::bindings
