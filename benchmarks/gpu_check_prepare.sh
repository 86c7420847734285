#!/usr/bin/env bash
# Run HERE (a machine with internet and apt), before a device run of benchmarks/gpu_check.sh.
# Fills .gpu_check/ (git-ignored; carry it to the device machine, 64 MiB at most) with what
# the GPU machine lacks: cp312 wheels (lmdb) and libjpeg-turbo's headers and shared library,
# unpacked from the Debian .debs with dpkg -x (benchmarks/gpu_check_env.sh points CMake at
# them and sets an rpath to them). Nothing here is committed.
#
#   bash benchmarks/gpu_check_prepare.sh            # download + unpack (seconds)
#   bash benchmarks/gpu_check_prepare.sh --build    # and build a cp-native wheel against them
#                                                   # here, to prove the flags work (minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
DEPS=.gpu_check
PY="${PYTHON:-python3}"
rm -rf "$DEPS"
mkdir -p "$DEPS/whl" "$DEPS/debs" "$DEPS/jpeg"

echo "== wheels for CPython 3.12 manylinux x86_64 (what the GPU image lacks)"
# The image has numpy, torch, pillow, h5py, psutil, tqdm, pytest, cmake, ninja, nanobind and
# scikit-build-core (.library/device/KINDS.md); lmdb is missing.
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$DEPS/whl" "lmdb>=1.4"

echo "== libjpeg-turbo headers + static library (Debian .debs, unpacked)"
(cd "$DEPS/debs" && apt-get download libjpeg62-turbo-dev libjpeg62-turbo 2>&1 | grep -v "^W:" || true)
ls "$DEPS"/debs/*.deb >/dev/null
for deb in "$DEPS"/debs/*.deb; do dpkg -x "$deb" "$DEPS/jpeg"; done
rm -rf "$DEPS/debs"
test -n "$(find "$DEPS/jpeg" -name 'libjpeg.so.62*' | head -n1)"
test -f "$DEPS/jpeg/usr/include/jpeglib.h"
du -sh "$DEPS"

if [ "${1:-}" = "--build" ]; then
    echo "== test build against .gpu_check (the flags gpu_check.sh uses on the device)"
    source benchmarks/gpu_check_env.sh
    rm -rf /tmp/fastloader-gpu-check-wheel
    SKBUILD_BUILD_DIR=/tmp/fastloader-gpu-check-build "$PY" -m pip wheel -q \
        --no-build-isolation --no-deps -w /tmp/fastloader-gpu-check-wheel .
    unzip -p /tmp/fastloader-gpu-check-wheel/*.whl 'fastloader/_core*' > /tmp/fastloader-core.so
    env -u LD_LIBRARY_PATH ldd /tmp/fastloader-core.so | grep libjpeg
    if ! env -u LD_LIBRARY_PATH ldd /tmp/fastloader-core.so | grep libjpeg | grep -q "$PWD/.gpu_check"; then
        echo "error: the extension does not load libjpeg from .gpu_check (rpath missing)" >&2
        exit 1
    fi
    echo "built; the extension loads libjpeg-turbo from .gpu_check through its rpath"
fi
echo "ready: carry .gpu_check (and nothing else ignored) to the device machine"
