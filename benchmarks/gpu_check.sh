#!/usr/bin/env bash
# GPU check: build fastloader, run the `gpu` test marker, print images/s of FastLoader (native
# decode -> pinned ring -> CUDA), the DALI backend (nvJPEG "mixed" decode) and the plain
# DataLoader (PIL decode in worker processes), all over the same generated JPEGs.
#
#   bash benchmarks/gpu_check.sh                   # make install (.venv, needs PyPI), then check
#   PYTHON=python3 bash benchmarks/gpu_check.sh    # use an existing Python that has CUDA torch:
#                                                  # pip-installs this repo --no-deps (offline ok)
# Wheels in .whl/ (e.g. lmdb, nvidia-dali-cuda120) are installed first when present.
# Env: GPU_CHECK_COUNT (images, default 1500), GPU_CHECK_BATCH (default 128).
set -uo pipefail
cd "$(dirname "$0")/.."
COUNT="${GPU_CHECK_COUNT:-1500}"
BATCH="${GPU_CHECK_BATCH:-128}"
DATA="${GPU_CHECK_DATA:-bench_data/gpu_check}"
status=0

echo "== install"
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    "${PYTHON:-python3}" -m pip install -q --no-index --no-deps --no-compile --upgrade \
        --target /tmp/fastloader-site .whl/*.whl && export PYTHONPATH="/tmp/fastloader-site${PYTHONPATH:+:$PYTHONPATH}"
fi
if [ -z "${PYTHON:-}" ]; then
    make install || { echo "make install failed"; exit 1; }
    PY=.venv/bin/python
else
    PY="$PYTHON"
    if ! "$PY" -m pip install -q --no-build-isolation --no-deps -e . ; then
        # No compiler or libjpeg headers: the Pillow fallback still runs every path.
        echo "native build failed: running from src/ with FASTLOADER_DISABLE_NATIVE=1"
        export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" FASTLOADER_DISABLE_NATIVE=1
    fi
fi
"$PY" - <<'EOF' || exit 1
import torch, fastloader
from fastloader.loader.dali_pipeline import dali_available
print(f"torch {torch.__version__}, cuda {torch.cuda.is_available()}"
      f" ({torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-'}),"
      f" fastloader native {fastloader.native_available()}, DALI {dali_available()}")
if not torch.cuda.is_available():
    raise SystemExit("no CUDA device: this check needs a GPU")
EOF

echo "== pytest -m gpu"
PYTHONUNBUFFERED=1 "$PY" -m pytest -m gpu -q -rs -s -p no:cacheprovider tests || status=1

echo "== images/s (count=$COUNT, batch=$BATCH, RandomResizedCrop 224 + flip + normalize)"
PYTHONUNBUFFERED=1 "$PY" - "$DATA" "$COUNT" "$BATCH" <<'EOF' || status=1
import sys, time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, "benchmarks")
from baseline import IMAGENET_MEAN, IMAGENET_STD, ImageFolder, train_transform
from make_images import ensure_tree

from fastloader import FastLoader, RandomHorizontalFlip, RandomResizedCrop
from fastloader.loader.dali_pipeline import dali_available
from fastloader.format.dataset import open_dataset
from fastloader.pack.write import pack

data, count, batch = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
tree, packed = data / "images", data / "images.lmdb"
ensure_tree(tree, count)
try:
    with open_dataset(packed) as ds:
        fresh = len(ds) == count
except Exception:
    fresh = False
if not fresh:
    pack(tree, packed, overwrite=True, quiet=True)
cuda = torch.device("cuda")
norm = (IMAGENET_MEAN, IMAGENET_STD)
train = [RandomResizedCrop(224), RandomHorizontalFlip()]


def rate(make, epochs=3):
    """Median images/s over whole passes; the first pass warms caches and is not counted."""
    loader, results = make(), []
    for epoch in range(epochs + 1):
        torch.cuda.synchronize()
        started, seen = time.perf_counter(), 0
        for images, _ in loader:
            seen += images.shape[0]
        torch.cuda.synchronize()
        if epoch:
            results.append(seen / (time.perf_counter() - started))
    if hasattr(loader, "close"):
        loader.close()
    return float(np.median(results)), results


def dataloader():
    mean = torch.tensor(IMAGENET_MEAN, device=cuda).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD, device=cuda).view(1, 3, 1, 1)
    workers = min(16, len(__import__("os").sched_getaffinity(0)))
    inner = torch.utils.data.DataLoader(ImageFolder(tree, train_transform(224)), batch_size=batch,
                                        shuffle=True, num_workers=workers, pin_memory=True,
                                        persistent_workers=True, prefetch_factor=4)

    class OnDevice:  # the usual training-loop copy; train_transform already normalizes on CPU
        def __iter__(self):
            for images, labels in inner:
                yield images.to(cuda, non_blocking=True), labels.to(cuda, non_blocking=True)
    return OnDevice()


rows = {"DataLoader (PIL, workers, pin_memory)": dataloader,
        "FastLoader native -> cuda": lambda: FastLoader(
            str(packed), batch_size=batch, shuffle=True, transforms=train, normalize=norm,
            device="cuda")}
if dali_available():
    from fastloader.loader.dali import DaliLoader
    rows["DaliLoader mixed (nvJPEG) -> cuda"] = lambda: DaliLoader(
        str(packed), batch_size=batch, shuffle=True, transforms=train, normalize=norm,
        device="cuda")
    rows["DaliLoader mixed, full decode + slice"] = lambda: DaliLoader(
        str(packed), batch_size=batch, shuffle=True, transforms=train, normalize=norm,
        device="cuda", roi_decode=False)  # lets the hardware JPEG decoder take part
else:
    print('DaliLoader row skipped: DALI not importable (pip install "fastloader[dali]")')
for name, make in rows.items():
    try:
        median, runs = rate(make)
        print(f"{name:40s} {median:10,.0f} img/s   runs: {', '.join(f'{r:,.0f}' for r in runs)}")
    except Exception as exc:  # one failing row must not hide the others
        print(f"{name:40s} FAILED: {type(exc).__name__}: {exc}")
EOF
exit $status
