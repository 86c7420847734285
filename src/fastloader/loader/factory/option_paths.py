"""Which loader path takes which of FastLoader's arguments, read from each path's options class,
and the refusals of an argument given to a path that does not take it (another path's, a
DataLoader argument, a typo), in FastLoader's words."""

from __future__ import annotations

import difflib
import inspect
from dataclasses import MISSING, fields

import torch

from fastloader.errors import invalid_argument
from fastloader.loader.factory.options import LoaderOptions, PackedOptions
from fastloader.loader.factory.paths import PATHS


def paths() -> dict[str, type[LoaderOptions]]:
    """Each path's options class, in loader/factory/paths.py's order."""
    return {name: path.options for name, path in PATHS.items()}


def option_defaults(options: type[LoaderOptions]) -> dict[str, object]:
    """A path's options and their defaults, in field order."""
    return {f.name: f.default for f in fields(options) if f.init and f.default is not MISSING}


def factory_defaults() -> dict[str, object]:
    """Every FastLoader option with FastLoader's default: the packed loader's where it has the
    option, else the first other path's that does."""
    merged: dict[str, object] = {}
    for options in reversed(list(paths().values())):
        merged.update(option_defaults(options))
    packed = option_defaults(PackedOptions)
    return {name: packed.get(name, default) for name, default in merged.items()}


def paths_taking(name: str) -> list[str]:
    """The paths whose options include `name`."""
    return [path for path, options in paths().items() if name in option_defaults(options)]


# torch DataLoader's keyword arguments, read from its signature; those that are not FastLoader
# options too (batch_size, shuffle, drop_last) have no meaning on the packed paths.
DATALOADER_ARGS = tuple(name for name in inspect.signature(torch.utils.data.DataLoader).parameters
                        if name != "dataset")
DATALOADER_ONLY = tuple(n for n in DATALOADER_ARGS if n not in option_defaults(LoaderOptions))


def _fix(path: str, takers: list[str]) -> str:
    """The fix of an argument that only `takers` take, given to `path`: a path's own fix when
    it alone takes it (audio's speak of clips), else the fix of the path it was given to."""
    only = PATHS[takers[0]] if len(takers) == 1 else None
    if only is not None and only.own_fix is not None:
        return only.own_fixes.get(path, only.own_fix)
    return PATHS[path].fix


def take_foreign(kwargs: dict[str, object], path: str) -> None:
    """Take out of kwargs the FastLoader options `path` does not take: at FastLoader's default
    they are dropped (so one set of keyword arguments serves every path), any other value is
    refused naming the path(s) that take it. The drop-in path's DataLoader arguments stay."""
    own = option_defaults(paths()[path])
    keep = DATALOADER_ARGS if path == "drop-in loader" else ()
    defaults = factory_defaults()
    for name in [n for n in kwargs if n in defaults and n not in own and n not in keep]:
        value, default = kwargs.pop(name), defaults[name]
        if value is default or _equal(value, default):
            continue
        takers = paths_taking(name)
        named = [f"the {taker}" for taker in takers]
        where = " and ".join([", ".join(named[:-1]), named[-1]] if len(named) > 1 else named)
        raise invalid_argument(name, value, f"applies to {where} only, not to the "
                               f"{PATHS[path].words}", _fix(path, takers))


def _equal(value: object, default: object) -> bool:
    try:
        return bool(value == default)
    except Exception:  # an array or tensor compared to a default: not equal
        return False


def refuse_unknown(kwargs: dict[str, object], path: str) -> None:
    """The packed paths take no other keyword: name the first one given.

    A DataLoader argument says so; a name that is no DataLoader argument either is a typo:
    say so, and name the closest argument this path does take.
    """
    if not kwargs:
        return
    name = sorted(kwargs)[0]
    words = PATHS[path].words
    if name in DATALOADER_ONLY:
        raise invalid_argument(
            name, kwargs[name], f"is a DataLoader argument the {words} does not take",
            "Drop it; use num_threads= for parallelism and prefetch= for depth.")
    accepted = list(option_defaults(paths()[path]))
    close = difflib.get_close_matches(name, accepted, n=1)
    hint = f"Did you mean {close[0]}=?" if close else (
        f"The arguments it takes are: {', '.join(sorted(accepted))}.")
    raise invalid_argument(name, kwargs[name], f"is not an argument of FastLoader's {words}",
                           hint)
