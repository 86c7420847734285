"""Hugging Face `datasets` features as fastloader fields: one table from a feature's JSON form
(`features.to_dict()`, or the `huggingface` metadata of a Parquet file that `datasets` wrote)
to the field kind it packs as and the function turning its values (pyarrow's or `datasets`'
Python values) into what that kind stores.

Image -> image (the stored bytes, never decoded; the path only where there are no bytes),
ClassLabel -> int with its class names, Value(string) -> text, Value(int*, uint*, bool) ->
int, Value(float*) -> float (null: NaN), Value(binary) -> bytes, List / LargeList / Sequence
of numbers and ArrayND -> ndarray (a fixed length, or -1), lists of anything else, dicts and
Json -> json, and a registered kind of encoded files by its feature (Audio -> audio, Video ->
video: the stored bytes, never decoded). Another feature type is refused naming the column and
what to do. To map a new feature type, add an entry to FEATURES: its `_type` -> a function of
the feature's JSON giving a Mapped (or None: not packable); a new kind of encoded files names
its feature itself (EncodedKind.feature).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from fastloader.errors import PackError
from fastloader.format.kinds import EncodedImage, Kind, encoded_kinds, find

# one feature's JSON (datasets' to_dict(), or a Parquet file's metadata) as read: unchecked
FeatureJson = Mapping[str, Any]


def kind_of(spec: object) -> Kind | None:
    """The registered kind of a field as fields= writes it ("image", ("int", NAMES), ...);
    None for an unknown one (make_spec says what is wrong with it)."""
    return find(spec[0] if isinstance(spec, (tuple, list)) and spec else spec)


def is_image(spec: object) -> bool:
    """Whether a field written as fields= writes it is of an image kind."""
    return isinstance(kind_of(spec), EncodedImage)


class Mapped(NamedTuple):
    """A feature as a field: its kind as fields= writes it, and its value converter (a
    module-level function, so samples holding it pickle; ValueError: the value does not
    fit, said in words that name no bytes)."""

    spec: object  # as fields= writes it: a kind's name, ("int", NAMES), ...
    convert: Callable[[object], object]

    @property
    def image(self) -> bool:
        """Whether the field is of an image kind."""
        return is_image(self.spec)


def _stored(value: FeatureJson, what: str) -> bytes | str:
    """A media struct ({bytes, path}) as its stored bytes, else its path; ValueError naming
    what it lacks."""
    if value.get("bytes") is not None:
        return bytes(value["bytes"])
    if value.get("path"):
        return str(value["path"])
    raise ValueError(f"has neither bytes nor a path (an empty {what})")


def image_source(value: object) -> object:
    """An Image value ({bytes, path} struct, bytes or a path) as image bytes, or the path
    where the struct has no bytes."""
    if isinstance(value, Mapping):
        return _stored(value, "image")
    if isinstance(value, (bytes, bytearray, memoryview, str)):
        return value
    if value is None:
        raise ValueError("is empty (no image)")
    return value  # a PIL image, an ndarray...: store() says whether it is one


def clip_source(value: object) -> object:
    """An Audio or Video value ({bytes, path} struct, bytes or a path) as the clip's stored bytes
    (never decoded), or the path where the struct has no bytes."""
    if isinstance(value, Mapping):
        return _stored(value, "clip")
    if value is None:
        raise ValueError("is empty (no clip)")
    return value


def image_path(value: object) -> str | None:
    """The source path an Image value names (its struct's path), or None."""
    if isinstance(value, Mapping) and isinstance(value.get("path"), str) and value["path"]:
        return str(value["path"])
    return None


def class_id(value: object) -> object:
    """A ClassLabel value: its id (an int), or a name store() maps to its id."""
    if value is None:
        raise ValueError("is empty (no label)")
    if value == -1:
        raise ValueError("is -1, the datasets library's 'no label'; drop those rows "
                         "(dataset.filter) or pass skip_bad=True")
    return value


def as_int(value: object) -> object:
    if value is None:
        raise ValueError("is empty; an int needs a value (declare the column float to read "
                         "nulls as NaN)")
    return int(value) if isinstance(value, bool) else value


def as_float(value: object) -> object:
    return math.nan if value is None else value


def as_text(value: object) -> object:
    return "" if value is None else value


def as_is(value: object) -> object:
    return value


def as_array(value: object) -> object:
    """A list or array value; null: an empty one."""
    return [] if value is None else value


_INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_FLOATS = ("float16", "float32", "float64", "double", "float")
_VALUES: dict[str, Mapped] = {
    **{name: Mapped("int", as_int) for name in (*_INTS, "bool")},
    **{name: Mapped("float", as_float) for name in _FLOATS},
    "string": Mapped("text", as_text), "large_string": Mapped("text", as_text),
    "binary": Mapped("bytes", as_is), "large_binary": Mapped("bytes", as_is),
}
_NUMPY = {"double": "float64", "float": "float32"}


def _value(feature: FeatureJson) -> Mapped | None:
    return _VALUES.get(str(feature.get("dtype")))


def _numeric(feature: object) -> tuple[str, list[int]] | None:
    """(dtype, shape) of a feature that is a number or a (nested) list of numbers."""
    if isinstance(feature, list) and len(feature) == 1:  # the old JSON form of a list
        feature = {"_type": "List", "feature": feature[0]}
    if not isinstance(feature, Mapping):
        return None
    kind = feature.get("_type")
    if kind == "Value" and (feature.get("dtype") in (*_INTS, *_FLOATS, "bool")):
        dtype = str(feature["dtype"])
        return _NUMPY.get(dtype, dtype), []
    if kind == "ClassLabel":
        return "int64", []
    if kind in ("List", "LargeList", "Sequence"):
        inner = _numeric(feature.get("feature"))
        length = feature.get("length", -1)
        return None if inner is None else (inner[0], [length if length is not None else -1,
                                                      *inner[1]])
    return None


def _list(feature: FeatureJson) -> Mapped | None:
    numeric = _numeric(feature)
    if numeric is not None:
        return Mapped(("ndarray", numeric[0], tuple(numeric[1])), as_array)
    return Mapped("json", as_is) if _has_no_media(feature.get("feature")) else None


def _array(feature: FeatureJson) -> Mapped | None:
    shape = tuple(-1 if n is None else int(n) for n in feature.get("shape", ()))
    dtype = str(feature.get("dtype"))
    return Mapped(("ndarray", _NUMPY.get(dtype, dtype), shape), as_array)


def _has_no_media(feature: object) -> bool:
    """Whether a nested feature holds no image or other bytes-valued media (JSON holds it)."""
    if isinstance(feature, list):
        return all(_has_no_media(f) for f in feature)
    if not isinstance(feature, Mapping):
        return True
    if "_type" not in feature:  # a dict of features
        return all(_has_no_media(f) for f in feature.values())
    if feature["_type"] in ("List", "LargeList", "Sequence"):
        return _has_no_media(feature.get("feature"))
    return feature["_type"] in ("Value", "ClassLabel", "Json", "Translation",
                                "TranslationVariableLanguages") and feature.get("dtype") not in (
        "binary", "large_binary")


# feature `_type` -> its field; extend here to pack another feature type
FEATURES: dict[str, Callable[[FeatureJson], Mapped | None]] = {
    "Image": lambda feature: Mapped("image", image_source),
    "ClassLabel": lambda feature: Mapped(("int", list(feature.get("names") or [])), class_id),
    "Value": _value,
    "List": _list, "LargeList": _list, "Sequence": _list,
    **{f"Array{n}D": _array for n in range(2, 6)},
    "Json": lambda feature: Mapped("json", as_is),
    "Translation": lambda feature: Mapped("json", as_is),
    "TranslationVariableLanguages": lambda feature: Mapped("json", as_is),
}


def _mapper(type_name: str) -> Callable[[FeatureJson], Mapped | None] | None:
    """The mapping of a feature `_type`: FEATURES', else the registered kind of encoded files
    it names (Audio, Video): its cells' stored bytes, never decoded."""
    found = FEATURES.get(type_name)
    if found is not None:
        return found
    kind = next((k for k in encoded_kinds() if k.feature == type_name), None)
    return None if kind is None else (lambda feature: Mapped(kind.name, clip_source))


def describe(feature: object) -> str:
    """A feature's JSON as datasets prints it, short: Value('timestamp[s]'), Audio, ..."""
    if isinstance(feature, Mapping) and "_type" in feature:
        dtype = feature.get("dtype")
        return f"{feature['_type']}({dtype!r})" if dtype else str(feature["_type"])
    return "a dict of features" if isinstance(feature, Mapping) else "a list"


def mapped(column: str, feature: object, where: str) -> Mapped:
    """The field of one column's feature; PackError naming the column and the way out."""
    if isinstance(feature, list):
        feature = {"_type": "List", "feature": feature[0] if feature else None}
    if isinstance(feature, Mapping) and "_type" not in feature:  # a struct of features
        found: Mapped | None = Mapped("json", as_is) if _has_no_media(feature) else None
    else:
        make = _mapper(str(feature.get("_type"))) if isinstance(feature, Mapping) else None
        found = make(feature) if make is not None and isinstance(feature, Mapping) else None
    if found is None:
        raise PackError(
            f"{where}: column {column!r} is a {describe(feature)} feature, which no fastloader "
            f"field kind holds; drop it (dataset.remove_columns({column!r})), cast it "
            f"(dataset.cast_column({column!r}, Value('string'))), or declare its kind "
            f"(fields={{{column!r}: KIND}}).")
    return found


def fields_of(features: Mapping[str, object], where: str,
              overrides: Mapping[str, object]) -> dict[str, Mapped]:
    """column -> Mapped of every feature (the JSON of datasets.Features), in column order; a
    column in `overrides` takes that kind (fields= / --field), its values converted as its
    feature's where that maps, else as they are."""
    out = {}
    for column, feature in features.items():
        name = str(column)
        if name in overrides:
            try:
                convert = mapped(name, feature, where).convert
            except PackError:
                convert = as_is
            out[name] = Mapped(overrides[name], convert)
        else:
            out[name] = mapped(name, feature, where)
    return out


def one_label(where: str, named: list[str]) -> None:
    """At most one column names classes (the label); a second ClassLabel says how to keep its
    ids."""
    if len(named) > 1:
        raise PackError(f"{where}: columns {', '.join(map(repr, named))} all have class names "
                        "(ClassLabel features); a packed dataset names the classes of one "
                        "label: store the others as plain ids, e.g. "
                        f"fields={{{named[1]!r}: 'int'}}.")
