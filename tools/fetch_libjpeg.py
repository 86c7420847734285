"""Fetch libjpeg-turbo 3.x (headers and a static, SIMD-enabled libjpeg.a) into a build folder.

`make wheel` links it into fastloader._core (CMake's FASTLOADER_JPEG_ROOT), so the wheel carries
its own libjpeg-turbo and builds on a machine without the system's headers.

Where it comes from: the PyPI package comma-deps-libjpeg, a data-only wheel holding
libjpeg-turbo's include/ and lib/libjpeg.a, built position-independent with SIMD (SSE2/AVX2,
NEON) on a manylinux_2_28 image, so its objects need only old glibc symbols. Its metadata says
Requires-Python>=3.12, but it holds no Python code that runs here: pip downloads it for a py3.12
target and this script unpacks it; it is never installed. The version and each file's sha256 are
pinned below, so a changed upload stops the fetch instead of entering a build.

    python tools/fetch_libjpeg.py [--out build/libjpeg-turbo]   # prints the prefix
"""

from __future__ import annotations

import argparse
import hashlib
import platform
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "comma-deps-libjpeg"
VERSION = "3.1.0.post92"
# platform tag of the pinned file -> its sha256 (as PyPI serves it)
PINNED = {
    "manylinux_2_28_x86_64": "b47ff662cabd8a0c564fd12f64de451a8806990d80712193b6cd7c23fba2ce6f",
    "manylinux_2_28_aarch64": "88219351e4b3d550c403a8143613977d55612abcd3d3a047caad1d391c7eae38",
    "macosx_11_0_arm64": "57884fbab82c68240529b0955b08490b1c12f8ae2466605f965a2d0a0a8771c1",
}
INSTALL_DIR = "libjpeg/install/"  # inside the wheel's .data/purelib/
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "build" / "libjpeg-turbo"


def platform_tag() -> str:
    """The pinned file's tag for this machine, or a SystemExit that says what to do instead."""
    machine = platform.machine().lower()
    tag = {
        ("linux", "x86_64"): "manylinux_2_28_x86_64",
        ("linux", "amd64"): "manylinux_2_28_x86_64",
        ("linux", "aarch64"): "manylinux_2_28_aarch64",
        ("linux", "arm64"): "manylinux_2_28_aarch64",
        ("darwin", "arm64"): "macosx_11_0_arm64",
    }.get((sys.platform, machine))
    if tag is None:
        raise SystemExit(
            f"fetch_libjpeg: no pinned libjpeg-turbo build for {sys.platform}/{machine}; "
            "install the system's libjpeg-turbo headers and build without FASTLOADER_JPEG_ROOT."
        )
    return tag


def download(tag: str, into: Path) -> Path:
    """pip-download the pinned wheel for `tag` and check its sha256."""
    cmd = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
        "--only-binary=:all:", "--python-version", "3.12", "--platform", tag,
        f"{PACKAGE}=={VERSION}", "--dest", str(into),
    ]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(
            f"fetch_libjpeg: pip could not download {PACKAGE}=={VERSION} for {tag} "
            f"(no network to PyPI?): {result.stderr.strip().splitlines()[-1:]}"
        )
    wheel = next(into.glob("*.whl"))
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != PINNED[tag]:
        raise SystemExit(
            f"fetch_libjpeg: {wheel.name} has sha256 {digest}, not the pinned {PINNED[tag]}; "
            "the upload changed: check it, then update PINNED in tools/fetch_libjpeg.py."
        )
    return wheel


def unpack(wheel: Path, out: Path) -> None:
    """Copy include/ and lib/ from the wheel's libjpeg/install/ into `out`."""
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            _, found, rest = name.partition(INSTALL_DIR)
            if not found or not rest or name.endswith("/"):
                continue
            target = out / rest
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zf.read(name))


def check(out: Path) -> str:
    """The unpacked libjpeg-turbo's version; SystemExit unless it is 3.x with SIMD."""
    jconfig = (out / "include" / "jconfig.h").read_text()
    version = re.search(r"#define LIBJPEG_TURBO_VERSION\s+(\S+)", jconfig)
    if version is None or not version.group(1).startswith("3."):
        raise SystemExit(f"fetch_libjpeg: {out}/include/jconfig.h is not libjpeg-turbo 3.x")
    if not re.search(r"#define WITH_SIMD 1", jconfig):
        raise SystemExit(f"fetch_libjpeg: {out} was built without SIMD")
    if not (out / "lib" / "libjpeg.a").is_file():
        raise SystemExit(f"fetch_libjpeg: {out}/lib/libjpeg.a is missing")
    return version.group(1)


def fetch(out: Path) -> str:
    """Fill `out` (once per pinned file: a stamp records which) and return the version."""
    tag = platform_tag()
    stamp = out / ".fetched"
    if stamp.is_file() and stamp.read_text().strip() == PINNED[tag]:
        return check(out)
    with tempfile.TemporaryDirectory() as tmp:
        wheel = download(tag, Path(tmp))
        unpack(wheel, out)
    version = check(out)
    stamp.write_text(PINNED[tag] + "\n")
    return version


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="prefix to fill")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    version = fetch(out)
    print(f"fetch_libjpeg: libjpeg-turbo {version} (static, SIMD) in {out}", file=sys.stderr)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
