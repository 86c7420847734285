// A contiguous read-only view of a Python bytes-like object (bytes, bytearray, memoryview),
// released on scope exit: the bindings that read a record or a clip in place, without a copy.
#pragma once

#include <nanobind/nanobind.h>

#include <cstddef>
#include <cstdint>

namespace fl {

class BytesView {
public:
    // `refusal`: the TypeError's text when obj exposes no contiguous buffer.
    BytesView(nanobind::handle obj, const char *refusal) {
        if (PyObject_GetBuffer(obj.ptr(), &view_, PyBUF_SIMPLE) != 0) {
            PyErr_Clear();
            throw nanobind::type_error(refusal);
        }
    }
    ~BytesView() { PyBuffer_Release(&view_); }
    BytesView(const BytesView &) = delete;
    BytesView &operator=(const BytesView &) = delete;
    const uint8_t *data() const { return static_cast<const uint8_t *>(view_.buf); }
    size_t size() const { return static_cast<size_t>(view_.len); }

private:
    Py_buffer view_{};
};

}  // namespace fl
