"""Pixels: the native extension's importer, JPEG header/decode/BatchDecoder, the Pillow
reference path, restart tiles, and the crop planner (augment) every backend draws from.

`fastloader.decode` names both this subpackage and the decode() function. Importing any
fastloader.decode.* module makes Python bind the subpackage to that attribute, which would hide
the function; so the subpackage itself is callable and forwards to fastloader.decode.decode.decode
(as fastloader.pack does for pack()).
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


class _CallablePackage(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> np.ndarray:  # decode()'s, forwarded
        from fastloader.decode.decode import decode

        return decode(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
