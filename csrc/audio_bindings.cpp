// Python bridge of the FLAC/WAV decoders (a file that sees Python, beside bindings.cpp): checks
// the output array, holds the clip's buffer, releases the GIL around the decode, and returns
// (status, frames, blocks, modes, message), which fastloader/decode/audio.py maps: 0 decoded, 1 left
// to libsndfile, 2 damaged (a DecodeError naming the clip).
#include "audio_bindings.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <stdexcept>
#include <string>
#include <tuple>

#include "audio.h"
#include "bytes_view.h"

namespace nb = nanobind;

namespace {

using Out = nb::ndarray<float, nb::ndim<2>, nb::device::cpu>;

constexpr const char *kBytesRefusal = "audio: data must be a contiguous bytes-like object";

std::tuple<int, int, int, int64_t, std::string> audio_info(nb::handle data) {
    fl::BytesView bytes(data, kBytesRefusal);
    const fl::AudioResult r = fl::audio_info(bytes.data(), bytes.size());
    return {static_cast<int>(r.status), r.rate, r.channels, r.frames, r.message};
}

std::tuple<int, int64_t, int64_t, int, std::string> audio_decode(nb::handle data, int64_t start,
                                                            int64_t frames, Out out, bool mono) {
    fl::BytesView bytes(data, kBytesRefusal);
    if (frames < 0 || start < 0) throw std::invalid_argument("audio_decode: negative start or frames");
    if (static_cast<int64_t>(out.shape(1)) < frames)
        throw std::invalid_argument("audio_decode: out holds fewer frames than asked");
    if (out.shape(0) < 1 || (mono && out.shape(0) != 1))
        throw std::invalid_argument("audio_decode: out must be [channels, frames] ([1, frames] for mono)");
    fl::AudioOut target;
    target.data = out.data();
    target.channel_stride = out.stride(0);
    target.frame_stride = out.stride(1);
    target.channels = static_cast<int>(out.shape(0));
    target.mono = mono;
    fl::AudioResult r;
    {
        nb::gil_scoped_release release;
        r = fl::audio_decode(bytes.data(), bytes.size(), start, frames, target);
    }
    return {static_cast<int>(r.status), r.frames, r.blocks, r.modes, r.message};
}

}  // namespace

void register_audio(nb::module_ &m) {
    m.def("audio_decode", &audio_decode, nb::arg("data"), nb::arg("start"), nb::arg("frames"),
          nb::arg("out"), nb::arg("mono"),
          "Decode `frames` frames from frame `start` of a FLAC or WAV clip into out [C, T] float32 "
          "(any strides; mono: the channels' mean into [1, T]), GIL released; returns (status, "
          "frames written, FLAC frames decoded, FLAC channel assignments seen as a bit mask, "
          "message): status 0 decoded, 1 a clip or feature left to libsndfile, 2 damaged bytes.");
    m.def("audio_info", &audio_info, nb::arg("data"),
          "(status, sample rate, channels, frames, message) of a FLAC or WAV clip's header; "
          "status as audio_decode's.");
}
