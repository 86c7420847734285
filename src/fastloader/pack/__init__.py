"""Packing datasets (image trees, tables, file groups, Python samples; scan, validate, write,
verify, CLI); callable as fastloader.pack().

`fastloader.pack` names both this subpackage and the pack() function. Importing any
fastloader.pack.* module makes Python bind the subpackage to that attribute, which would hide
the function; so the subpackage itself is callable and forwards to fastloader.pack.api.pack.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _CallablePackage(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from fastloader.pack.api import pack

        return pack(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
