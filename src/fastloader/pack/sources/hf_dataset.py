"""Python samples as pack() reads them: a Hugging Face `datasets` Dataset (or IterableDataset)
with its fields from its features (pack/sources/hf_features.py) and its Image columns' stored
bytes read as they are (cast to Image(decode=False): never decoded, never re-encoded), and PIL
images in any samples stored in the format pack(pil_format=...) chose.

`datasets` is never imported here: a dataset is recognised by its class's module.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, cast

from fastloader.errors import PackError
from fastloader.format.fields import FieldSpec, check_specs, make_spec
from fastloader.format.kinds import Clips
from fastloader.pack.sources.hf_features import Mapped, fields_of, image_path, kind_of, one_label
from fastloader.pack.sources.types import FieldKinds, Indexed, Sample
from fastloader.pack.sources.values import (
    ERROR_KEY,
    PATH_KEY,
    PIL_FORMATS,
    WHERE_KEY,
    EncodeAs,
    is_pil,
)

log = logging.getLogger(__name__)


def _is_datasets(value: object, names: tuple[str, ...]) -> bool:
    return any(c.__module__.split(".")[0] == "datasets" and c.__name__ in names
               for c in type(value).__mro__)


def is_hf_dataset(src: object) -> bool:
    """Whether src is a datasets Dataset, IterableDataset or DatasetDict."""
    return _is_datasets(src, ("Dataset", "IterableDataset", "DatasetDict",
                              "IterableDatasetDict"))


class DatasetSamples(Sequence[Sample]):
    """A Dataset's rows as samples (read by index in the forked workers), each column's value
    converted to its field's (hf_features), an image struct's path kept as the sample's."""

    def __init__(self, dataset: Any, fields: dict[str, Mapped], image: str) -> None:
        self.dataset, self.fields, self.image = dataset, fields, image  # a datasets Dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> Sample:  # type: ignore[override]  # no slices
        return converted(self.dataset[i], self.fields, self.image, f"dataset row {i}")


def converted(row: Mapping[str, object], fields: dict[str, Mapped], image: str,
              where: str) -> Sample:
    """A row as a sample of these fields; a value that does not fit: the row's error."""
    sample: Sample = {WHERE_KEY: where}
    path = image_path(row.get(image))
    if path is not None:
        sample[PATH_KEY] = path
    for name, field in fields.items():
        try:
            sample[name] = field.convert(row[name])
        except ValueError as exc:
            return {WHERE_KEY: where, ERROR_KEY: f"column {name!r}: {exc}"}
    return sample


class _Stream:
    """An IterableDataset's rows as samples, in its order."""

    def __init__(self, dataset: Any, fields: dict[str, Mapped], image: str) -> None:
        self.dataset, self.fields, self.image = dataset, fields, image

    def __iter__(self) -> Iterator[Sample]:
        for k, row in enumerate(self.dataset):
            yield converted(row, self.fields, self.image, f"dataset row {k}")


def dataset_samples(dataset: Any, fields: FieldKinds | None, image: str | None,
                    label: str | None, root: str | os.PathLike[str] | None
                    ) -> tuple[Iterable[Sample], list[FieldSpec]]:
    """(samples, field specs) of a datasets Dataset or IterableDataset: fields from its
    features (`fields` overrides kinds by column), `image` naming the records' column (else
    the first Image feature)."""
    name = type(dataset).__name__
    if _is_datasets(dataset, ("DatasetDict", "IterableDatasetDict")):
        raise PackError(f"pack() packs one split, and this {name} holds "
                        f"{', '.join(map(repr, dataset))}: pass one, e.g. "
                        f"pack(dataset[{next(iter(dataset), 'train')!r}], dst).")
    if label is not None or root is not None:
        raise PackError("label and root are table options; a datasets Dataset's label is its "
                        "ClassLabel column (turn a column of names into one with "
                        "dataset.class_encode_column(COLUMN)), and its images are its Image "
                        "columns.")
    if dataset.features is None:
        raise PackError(f"this {name} does not know its features (a streamed dataset loaded "
                        "without them); load it with features=..., or pass "
                        "list(dataset) with fields=... .")
    where = f"the {name}"
    overrides = dict(fields or {})
    unknown = set(overrides) - set(dataset.features)
    if unknown:
        raise PackError(f"{where}: fields names {sorted(unknown)}, not columns of "
                        f"{list(dataset.features)}.")
    mapped = fields_of(dataset.features.to_dict(), where, overrides)
    images = [c for c, m in mapped.items() if m.image]
    if image is not None and image not in images:
        raise PackError(f"{where}: image={image!r} is not one of its Image columns "
                        f"({images or 'none'}).")
    clips = [c for c, m in mapped.items()  # Audio and Video columns: records kinds too
             if not m.image and isinstance(kind_of(m.spec), Clips)]
    first = image or (images[0] if images else None) or (clips[0] if clips else None)
    if first is None:
        raise PackError(f"{where} has no Image, Audio or Video column among {list(mapped)}; "
                        "a packed dataset stores one image (or clip) per sample: cast the "
                        "column that holds them (dataset.cast_column(COLUMN, datasets.Image())).")
    dataset = _undecoded(dataset, images + clips)
    ordered = {first: mapped[first]} | mapped  # the records' field first
    specs = [make_spec(c, m.spec, PackError, f"{where} column {c!r}") for c, m in ordered.items()]
    one_label(where, [s.name for s in specs if s.classes is not None])
    check_specs(specs, PackError, where)
    if hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__"):
        return DatasetSamples(dataset.with_format(None), ordered, first), specs
    return _Stream(dataset, ordered, first), specs


def _undecoded(dataset: Any, columns: list[str]) -> Any:
    """dataset with its Image (and Audio, Video) columns read as their stored {bytes, path} (no
    decode)."""
    for column in columns:
        feature = dataset.features[column]
        if getattr(feature, "decode", False):
            dataset = dataset.cast_column(column, type(feature)(decode=False))
    return dataset


class _PilSamples(Sequence[object]):
    """Samples whose PIL images are stored in another format (EncodeAs, encoded by the
    worker)."""

    def __init__(self, samples: Indexed, format: str, quality: int) -> None:
        self.samples, self.format, self.quality = samples, format, quality

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> object:  # type: ignore[override]  # no slices
        return marked(self.samples[i], self.format, self.quality)


def marked(sample: object, format: str, quality: int) -> object:
    """sample with each PIL image value as EncodeAs(image, format, quality)."""
    if not isinstance(sample, Mapping) or not any(is_pil(v) for v in sample.values()):
        return sample
    return {k: EncodeAs(v, format, quality) if is_pil(v) else v for k, v in sample.items()}


def with_pil_format(samples: object, pil_format: str, quality: int) -> object:
    """Python samples whose PIL images are encoded as pil_format ("png": as they are; the
    workers encode PIL images as PNG); says once that PIL images are encoded."""
    if pil_format not in PIL_FORMATS:
        raise PackError(f"pil_format={pil_format!r}: choose one of {', '.join(PIL_FORMATS)} "
                        "(png: lossless, the default; jpeg: smaller, at quality=).")
    if isinstance(samples, (str, bytes, os.PathLike)):
        return samples
    if isinstance(samples, Mapping) or not hasattr(samples, "__iter__"):
        return samples  # pack_samples says what it takes
    if hasattr(samples, "__getitem__") and hasattr(samples, "__len__"):
        indexed = cast(Indexed, samples)  # as the hasattr above found it
        if _first_has_pil(indexed):
            _say(pil_format, quality)
        return samples if pil_format == "png" else _PilSamples(indexed, pil_format, quality)
    return _pil_stream(cast(Iterable[object], samples), pil_format, quality)  # has __iter__


def _first_has_pil(samples: Indexed) -> bool:
    try:
        first = samples[0] if len(samples) else None
    except Exception:  # the user's __getitem__: its failure is sample 0's, reported there
        return False
    return isinstance(first, Mapping) and any(is_pil(v) for v in first.values())


def _pil_stream(samples: Iterable[object], pil_format: str, quality: int
                ) -> Iterator[object]:
    said = False
    for sample in samples:
        if not said and isinstance(sample, Mapping) and any(is_pil(v) for v in sample.values()):
            _say(pil_format, quality)
            said = True
        yield sample if pil_format == "png" else marked(sample, pil_format, quality)


def _say(pil_format: str, quality: int) -> None:
    log.info("pack: PIL images are encoded once, as %s", "PNG (lossless; pil_format='jpeg' "
             "stores JPEG)" if pil_format == "png" else f"JPEG at quality {quality} (lossy)")
