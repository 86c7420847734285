#!/usr/bin/env bash
# The device check, end to end, on the GPU machine (see BENCHMARKS.md, "The device check"):
#
#   here, first:   bash benchmarks/gpu_check_prepare.sh     # fills .gpu_check/ (git-ignored)
#   on the device: bash benchmarks/gpu_check.sh             # carry .gpu_check; ~5 minutes
#   rehearsal:     bash benchmarks/gpu_check.sh --dry-run   # here, on the CPU, < 1 minute
#
# On the device it installs the carried wheels (lmdb) into /tmp/fastloader-site, builds the
# extension against the carried libjpeg-turbo (found through an rpath), refuses to go on if the extension did
# not build (no silent Pillow fallback labelled native), then runs benchmarks/gpu_check.py.
# PYTHON (default python3) is the interpreter that has CUDA torch.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1

if [ "${1:-}" = "--dry-run" ]; then
    # The rehearsal uses this checkout's environment as it is (make install here).
    exec "$PY" benchmarks/gpu_check.py --dry-run "${@:2}"
fi

SITE=/tmp/fastloader-site
test -d .gpu_check/whl && test -d .gpu_check/jpeg || {
    echo "FAILED: .gpu_check/ is missing: run benchmarks/gpu_check_prepare.sh here and carry it"
    exit 1
}
echo "== install carried wheels"
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" .gpu_check/whl/*.whl || { echo "FAILED: wheel install"; exit 1; }
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"

echo "== build the extension (libjpeg-turbo from .gpu_check/jpeg)"
source benchmarks/gpu_check_env.sh
started=$SECONDS
CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" SKBUILD_BUILD_DIR=/tmp/fastloader-build \
    "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --target "$SITE" . \
    || { echo "FAILED: the extension did not build (see above)"; exit 1; }
echo "built in $((SECONDS - started)) s"
"$PY" -c "import fastloader, sys; sys.exit(0 if fastloader.native_available() else 1)" \
    || { echo "FAILED: fastloader._core does not load; not measuring the Pillow fallback"; exit 1; }

exec "$PY" benchmarks/gpu_check.py "$@"
