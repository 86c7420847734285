"""FastLoader's arguments read from the options classes (loader/factory/options.py, and each
output's of loader/factory/paths.py), where each path's options are declared once: each loader's
options built from what it was given, and the signatures (FastLoader's and each loader's) derived
from those classes' fields."""

from __future__ import annotations

import functools
import inspect
from typing import Any, TypeVar

from fastloader.loader.factory.option_paths import (
    factory_defaults,
    option_defaults,
    paths,
    refuse_unknown,
    take_foreign,
)
from fastloader.loader.factory.options import DecodeOptions, LoaderOptions

Options = TypeVar("Options", bound=LoaderOptions)
Parameter = inspect.Parameter

POSITIONAL = ("batch_size", "shuffle")  # after `data`, as DataLoader orders them
REST = "dataloader_kwargs"  # the drop-in loader's DataLoader arguments; refused elsewhere
# What `data` is on each path, and on FastLoader (None only so copy and pickle may call
# __new__ bare).
PACKED_DATA = "PackedData"
DATA = {"drop-in loader": "torch.utils.data.Dataset[Any]"}
FACTORY_DATA = ("PackedData | list[PackedData] | tuple[PackedData, ...] | "
                "Mapping[str, PackedData] | torch.utils.data.Dataset[Any] | None")


def _parameters(names: dict[str, object], annotations: dict[str, str]) -> list[Parameter]:
    """batch_size and shuffle positional, every other option keyword-only."""
    return [Parameter(name, Parameter.POSITIONAL_OR_KEYWORD if name in POSITIONAL
                      else Parameter.KEYWORD_ONLY, default=default,
                      annotation=annotations[name])
            for name, default in sorted(names.items(), key=lambda i: i[0] not in POSITIONAL)]


def _annotations(options: type[LoaderOptions]) -> dict[str, str]:
    """Each option's type as the options class (or the base that declares it) spells it."""
    merged: dict[str, str] = {}
    for owner in reversed(options.__mro__):
        merged.update(inspect.get_annotations(owner))
    return merged


@functools.cache
def loader_signature(path: str) -> inspect.Signature:
    """The signature of `path`'s loader: data, its options, and the **dataloader_kwargs it
    takes (drop-in) or refuses by name (the others)."""
    options = paths()[path]
    data = Parameter("data", Parameter.POSITIONAL_OR_KEYWORD,
                     annotation=DATA.get(path, PACKED_DATA))
    rest = Parameter(REST, Parameter.VAR_KEYWORD, annotation="Any")
    return inspect.Signature(
        [data, *_parameters(option_defaults(options), _annotations(options)), rest])


def factory_signature() -> inspect.Signature:
    """FastLoader.__new__'s signature: every path's options together, each at FastLoader's default
    (options.factory_defaults) and typed as the widest class declaring it spells it (the base
    of every path, then the packed and DALI loaders' shared base, then the paths in turn)."""
    annotations: dict[str, str] = {}
    every = paths()
    for owner in (*every.values(), DecodeOptions, LoaderOptions):  # the widest last: it wins
        annotations.update(_annotations(owner))
    defaults = factory_defaults()
    order = {name: None for options in every.values() for name in option_defaults(options)}
    data = Parameter("data", Parameter.POSITIONAL_OR_KEYWORD, default=None,
                     annotation=FACTORY_DATA)
    rest = Parameter(REST, Parameter.VAR_KEYWORD, annotation="Any")
    cls = Parameter("cls", Parameter.POSITIONAL_OR_KEYWORD)  # FastLoader.__new__'s
    return inspect.Signature(
        [cls, data, *_parameters({n: defaults[n] for n in order}, annotations), rest],
        return_annotation="FastLoader")


def options_from(options: type[Options], path: str, args: tuple[object, ...],
                 kwargs: dict[str, object]) -> tuple[Options, dict[str, Any]]:
    """`path`'s checked options from its loader's arguments after `data`, and what is left.

    Bound as the loader's signature binds them (Python's own TypeError for a surplus
    positional argument); an option of another path is dropped at FastLoader's default and
    refused at any other value; any other name is refused on the packed paths and left, for
    DataLoader, on the drop-in path.
    """
    bound = loader_signature(path).bind(None, *args, **kwargs).arguments
    given: dict[str, Any] = {name: value for name, value in bound.items()
                             if name not in ("data", REST)}
    rest: dict[str, Any] = dict(bound.get(REST, {}))  # DataLoader's: anything it takes
    take_foreign(rest, path)
    if path != "drop-in loader":
        refuse_unknown(rest, path)
    return options(**given), rest
