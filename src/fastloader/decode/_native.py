"""The only importer of the compiled extension: availability, version check, fallback switch."""

from __future__ import annotations

import importlib
import logging
import os
import threading
import warnings
from types import ModuleType

from fastloader import __version__
from fastloader.errors import NativeUnavailableError

log = logging.getLogger(__name__)  # a child of the "fastloader" logger

DISABLE_ENV = "FASTLOADER_DISABLE_NATIVE"
_BUILD_HINT = (
    "run `make install` (or `pip install --no-build-isolation -e .` in the source "
    "tree) after installing the libjpeg-turbo headers (Debian/Ubuntu: libjpeg62-turbo-dev). "
    "fastloader falls back to the slower Pillow path meanwhile."
)

# What decode.py calls on the module; a build without these is treated as stale.
_REQUIRED_API = ("header", "decode_into", "BatchDecoder", "JpegHeader", "TileGeometry",
                 "mask_from_runs", "BatchDecoder.normalize_planar", "apply_pixel_program",
                 "BatchDecoder.decode_views_into", "BatchDecoder.records_decoded")

_lock = threading.Lock()
_loaded = False
_module: ModuleType | None = None
_reason = ""


def _disabled_by_env() -> bool:
    return os.environ.get(DISABLE_ENV, "") not in ("", "0")


def _has(module: ModuleType, dotted: str) -> bool:
    """Whether module has the attribute path `dotted` ("BatchDecoder.normalize_planar")."""
    target: object = module
    for part in dotted.split("."):
        if not hasattr(target, part):
            return False
        target = getattr(target, part)
    return True


def _import_core() -> tuple[ModuleType | None, str]:
    """Import fastloader._core and check that it was built from this package version."""
    try:
        module = importlib.import_module("fastloader._core")
    except ImportError as exc:
        reason = f"the extension fastloader._core could not be imported ({exc})"
        return None, f"{reason}. To build it, {_BUILD_HINT}"
    built = getattr(module, "__version__", None)
    if built != __version__:
        where = getattr(module, "__file__", "fastloader._core")
        return None, (
            f"the extension {where} is stale: built for fastloader {built}, but the package "
            f"is {__version__}. To rebuild it, {_BUILD_HINT}"
        )
    missing = [name for name in _REQUIRED_API if not _has(module, name)]
    if missing:  # built from an older source tree with the same version number
        return None, (
            f"the extension {module.__file__} lacks {', '.join(missing)} (stale build). "
            f"To rebuild it, {_BUILD_HINT}"
        )
    return module, ""


def _load() -> tuple[ModuleType | None, str]:
    global _loaded, _module, _reason
    with _lock:
        if not _loaded:
            _module, _reason = _import_core()
            _loaded = True
            if _module is None:  # said once per process; later calls stay quiet
                log.warning("native extension unusable, falling back to Pillow: %s", _reason)
                warnings.warn(f"fastloader: {_reason}", RuntimeWarning, stacklevel=4)
    return _module, _reason


def native_module() -> ModuleType | None:
    """The fastloader._core module, or None when it is disabled, missing or stale."""
    if _disabled_by_env():
        return None
    return _load()[0]


def native_available() -> bool:
    """Say whether the compiled decode core is built, current and not disabled.

    Returns:
        bool: True when fastloader._core imports, matches this package's version and
        FASTLOADER_DISABLE_NATIVE is not set; otherwise decoding falls back to Pillow (the
        reason is logged on the "fastloader" logger).
    """
    return native_module() is not None


def unavailable_reason() -> str:
    """Why native_module() returns None ("" when the extension is usable)."""
    if _disabled_by_env():
        return f"{DISABLE_ENV}=1 is set; unset it to use the compiled extension"
    return _load()[1]


def require_native() -> ModuleType:
    """The extension module, or NativeUnavailableError saying why it cannot be used."""
    module = native_module()
    if module is None:
        raise NativeUnavailableError(
            f"backend='native' needs the compiled extension, but {unavailable_reason()}. "
            "Use backend='auto' or 'pillow' to run without it."
        )
    return module
