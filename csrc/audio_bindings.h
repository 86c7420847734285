// Python bridge of the FLAC/WAV decoders (audio_bindings.cpp), registered by bindings.cpp.
#pragma once

#include <nanobind/nanobind.h>

void register_audio(nanobind::module_ &m);
