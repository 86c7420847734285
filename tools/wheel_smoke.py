"""Check an installed fastloader wheel: the extension loads and decodes without the system libjpeg.

tools/wheel.sh runs it in a fresh venv, inside a mount namespace where every copy of the
system's libjpeg is masked (bind-mounted over by /dev/null), and passes --masked so the script
first proves the mask works. Exits non-zero with a line saying what failed.
"""

from __future__ import annotations

import argparse
import ctypes
import io
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image


def fail(message: str) -> None:
    raise SystemExit(f"wheel check FAILED: {message}")


def check_mask(system_libs: list[str]) -> None:
    """Each masked system libjpeg must refuse to load, or the later checks prove nothing."""
    if not system_libs:
        print("mask: this machine has no system libjpeg to mask")
        return
    for path in system_libs:
        try:
            ctypes.CDLL(path)
        except OSError:
            continue
        fail(f"{path} still loads: the system libjpeg is not masked")
    print(f"mask: {len(system_libs)} system libjpeg file(s) refuse to load")


def check_module(prefix: Path) -> Path:
    """fastloader._core comes from the venv, and every libjpeg it needs resolves inside it."""
    import fastloader
    from fastloader.decode import _native

    if prefix not in Path(fastloader.__file__).resolve().parents:
        fail(f"fastloader was imported from {fastloader.__file__}, not from the venv {prefix}")
    core = _native.native_module()
    if core is None:
        fail(f"the extension did not load: {_native.unavailable_reason()}")
    so = Path(core.__file__)
    ldd = subprocess.run(["ldd", str(so)], capture_output=True, text=True, check=False).stdout
    print(f"ldd {so.name}:\n{ldd.rstrip()}")
    carriers = [so]  # the files that may hold libjpeg-turbo's code: the module, its libjpeg
    for line in ldd.splitlines():
        if "jpeg" not in line:
            continue
        if "not found" in line or str(prefix) not in line:
            fail(f"the module needs a libjpeg from outside the wheel: {line.strip()}")
        carriers.append(Path(line.split("=>")[1].split("(")[0].strip()))
    for path in carriers:
        version = path.read_bytes().partition(b"libjpeg-turbo version ")[2].split(b" ")[0]
        if version:
            print(f"libjpeg-turbo {version.decode()} in {path}")
    return so


def check_decode() -> None:
    """A JPEG Pillow writes decodes through the extension to (nearly) Pillow's pixels."""
    from fastloader.decode.decode import decode

    yy, xx = np.mgrid[0:192, 0:256]
    pixels = np.stack([xx % 256, yy * 255 // 191, (xx + yy) % 256], axis=-1).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=90)
    data = buf.getvalue()
    ours = decode(data)
    theirs = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    if ours.shape != theirs.shape:
        fail(f"decoded shape {ours.shape}, Pillow gives {theirs.shape}")
    diff = np.abs(ours.astype(np.int16) - theirs.astype(np.int16))
    if diff.max() > 2:
        fail(f"decoded pixels differ from Pillow's by up to {diff.max()}")
    print(f"decode: {ours.shape} from {len(data)} bytes, max |diff| vs Pillow {diff.max()}")


def check_maps(prefix: Path) -> None:
    """After the decode, no libjpeg from outside the venv is mapped into this process."""
    mapped = {line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()
              if "jpeg" in line.rsplit("/", 1)[-1]}  # fmt: skip
    outside = sorted(p for p in mapped if not p.startswith(str(prefix)))
    if outside:
        fail(f"a libjpeg from outside the venv is loaded: {outside}")
    print(f"mapped libjpeg copies, all inside the venv: {sorted(mapped) or 'none'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--masked", nargs="*", default=None, metavar="LIB",
                        help="system libjpeg paths the caller masked; each must fail to load")
    args = parser.parse_args(argv)
    prefix = Path(sys.prefix).resolve()
    if args.masked is not None:
        check_mask(args.masked)
    check_module(prefix)
    check_decode()
    if sys.platform.startswith("linux"):
        check_maps(prefix)
    print("wheel check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
