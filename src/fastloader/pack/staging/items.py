"""The item source (pack/sources/base.ItemSource) every plan's tasks read: declared-field
samples (SampleItems: an importer's, an ImageFolder tree's included, reopened in a task from
the plan's description or read back from the listing the plan keeps; or Python samples handed
over).

items_of is the one place that turns a plan into its items; the part builder (build.py) and
the engines (engines/) then read the ItemSource contract only. A part's rows are the v2
columns (records with labels, paths, every other declared field encoded).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import multiprocessing
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from typing import Any, Protocol, TypeGuard, cast

import numpy as np

from fastloader.errors import PackError
from fastloader.format.columns import encode_column
from fastloader.format.fields import FieldSpec, label_field, primary_image, specs_from_manifest
from fastloader.format.index import ORIENTATION, encode_paths
from fastloader.format.kinds import EncodedImage, Facts, Raster
from fastloader.pack.sources import tiling
from fastloader.pack.sources.base import ItemSource
from fastloader.pack.sources.values import PreparedSample, prepare_sample, read_locality
from fastloader.pack.staging.codec import encode_record
from fastloader.pack.staging.keys import known, sample_key
from fastloader.pack.staging.part import CORE
from fastloader.pack.staging.plan import ShardPlan, TaskSettings

log = logging.getLogger(__name__)
_CORE_DTYPES = ("int64", "int64", "int32", "int32", "uint8", "uint32", "int64")
# every source's bad item stops the pack unless skip_bad: the message says how to go on
BAD_ITEM_FIX = "fix it, or pass skip_bad=True to pack the rest and list what was skipped."


class Indexable(Protocol):
    """Samples read by index: a sequence, a Dataset (len + getitem)."""

    def __len__(self) -> int: ...
    def __getitem__(self, i: int, /) -> object: ...


_SOURCE: Indexable | None = None  # the sequence being packed, inherited by forked workers


def is_sequence(samples: object) -> TypeGuard[Indexable]:
    """Whether samples can be read by index (len + getitem), not a plain iterable."""
    return hasattr(samples, "__len__") and hasattr(samples, "__getitem__") and not isinstance(
        samples, (dict, str, bytes))


def with_orientations(arrays: dict[str, np.ndarray], orientations: list[int] | None
                      ) -> dict[str, np.ndarray]:
    """A part's arrays with its records' EXIF orientations (--apply-exif-orientation only:
    other parts stay as they were)."""
    if orientations is not None:
        arrays[ORIENTATION] = np.asarray(orientations, np.uint8)
    return arrays


def specs_of(fields: Sequence[Mapping[str, object]]) -> list[FieldSpec]:
    """The field specs of a plan's manifest entries."""
    return specs_from_manifest(fields, "the shard plan")


def file_fields(specs: Sequence[FieldSpec]) -> frozenset[str]:
    """The fields whose value may name a file (images and masks): an item's key stamps it."""
    return frozenset(s.name for s in specs if isinstance(s.kind, (EncodedImage, Raster)))


Keyed = tuple[PreparedSample, bytes | None]  # a prepared sample, with its key when keyed
Work = int | tuple[str, object]  # an index into the forked sequence, or a (where, sample) pair


class _SampleRows:
    """What a part collects from its prepared samples, in order (and their keys, when their
    tasks key them)."""

    def __init__(self, specs: Sequence[FieldSpec], tiled: bool, keyed: bool,
                 exif: bool = False) -> None:
        self.records = primary_image(specs).name
        self.orientations: list[int] | None = [] if exif else None  # --apply-exif-orientation
        self.tiles = tiling.TileColumns() if tiled else None
        self.by_name = {s.name: s for s in specs}
        self.label = label_field(specs)
        self.data: list[bytes] = []
        self.core: list[tuple[int, ...]] = []
        self.paths: list[str] = []
        self.columns: dict[str, list[object]] = {  # the records' own column: their meta
            s.name: [] for s in specs if s.name != self.records or isinstance(s.kind, Facts)}
        self.skipped: list[list[str]] = []
        self.reencoded = 0
        self.keys = bytearray() if keyed else None

    def add(self, i: int, prepared: Keyed, skip_bad: bool) -> None:
        sample, key = prepared
        if self.keys is not None:
            assert key is not None
            self.keys += key
        record = sample.record
        if record.data is None:
            if not skip_bad:
                raise PackError(f"{record.error}; {BAD_ITEM_FIX}")
            self.skipped.append([sample.path, record.error or "unknown error"])
            log.warning("pack: skipped %s: %s", sample.path, self.skipped[-1][1])
            return
        label = sample.values.get(self.label.name, 0) if self.label else 0
        self.data.append(record.data)
        self.core.append((len(record.data), record.height, record.width, record.codec,
                          record.crc32, int(label)))
        self.paths.append(sample.path)
        self.reencoded += record.reencoded
        if self.orientations is not None:
            self.orientations.append(record.orientation)
        if self.tiles is not None:
            self.tiles.add(record)
        for name, values in self.columns.items():
            values.append(sample.values[name])

    def arrays(self, offsets: list[int]) -> dict[str, np.ndarray]:
        core: list[Sequence[int]] = (list(zip(*self.core, strict=True)) if self.core
                                     else [[] for _ in range(6)])
        arrays = {name: np.asarray(values, dtype) for name, values, dtype in
                  zip(CORE, [offsets, *core], _CORE_DTYPES, strict=True)}
        arrays["path_offsets"], arrays["path_bytes"] = encode_paths(self.paths)
        for name, values in self.columns.items():
            arrays |= encode_column(self.by_name[name], values, name == self.records)
        return with_orientations(arrays, self.orientations)


def prepare_item(sample: object, specs: Sequence[FieldSpec], where: str, settings: TaskSettings,
                 files: frozenset[str] | None = None) -> Keyed:
    """One sample checked and converted (sources/values), its record then repacked as
    restart tiles when the pack is tiled (in the worker: the repack is the costly part); with
    its key (sample_key) when files is given (the sample is keyed by its task)."""
    prepared = prepare_sample(sample, specs, where, settings)
    key = None if files is None else sample_key(sample, files, known(sample, specs, prepared))
    if settings.codec != "jpeg":  # the records only; keys were taken from the sample's bytes
        return prepared._replace(record=encode_record(prepared.record, settings.codec)), key
    if settings.tiles is None or prepared.record.data is None:
        return prepared, key
    record = tiling.tile_record(prepared.record, settings.tiles["restart_mcus"])
    return prepared._replace(record=record), key


def _read(samples: Indexable, i: int) -> object:
    """Sample i, or the text of its __getitem__'s failure (any failure is this sample's)."""
    try:
        return samples[i]
    except Exception as exc:  # the user's __getitem__
        return f"<{type(exc).__name__}: {exc}>"


def _forked() -> Indexable:
    """The sequence a forked worker inherited (work is an index only when the pool forked,
    after SampleItems.inherited set it)."""
    return cast(Indexable, _SOURCE)


def sample_job(work: Work, specs: Sequence[FieldSpec], settings: TaskSettings,
               files: frozenset[str] | None = None) -> Keyed:
    """work prepared: an index into the forked sequence (its __getitem__ runs here), or a
    (where, sample) pair; keyed when files is given."""
    if isinstance(work, int):
        return prepare_item(_read(_forked(), work), specs, f"sample {work}", settings, files)
    where, sample = work
    return prepare_item(sample, specs, where, settings, files)


def key_job(work: Work, files: frozenset[str]) -> bytes:
    """The key of the sample work names (an index into the forked sequence, or a (where,
    sample) pair), read and not prepared."""
    sample = _read(_forked(), work) if isinstance(work, int) else work[1]
    return sample_key(sample, files)


class SampleItems:
    """Samples of declared fields as items: read by index (in forked workers, which inherit
    the sequence), or handed over as (where, sample) pairs; the v2 columns in its parts.

    Their keys: an importer's from its plan (or its source's fingerprint); a sequence of
    Python samples' computed by their tasks as they prepare them, and by reading them again
    here for a resume's check; a plain iterable's none (it is read once, never resumed). An
    importer's samples given as None are reopened from the plan's description when first
    needed (a commit's check reads only the plan's keys)."""

    window = 1024  # samples in flight per pool window

    def __init__(self, samples: Any, specs: Sequence[FieldSpec], settings: TaskSettings,
                 plan: ShardPlan | None = None) -> None:
        self._samples, self.specs, self.settings, self.plan = samples, specs, settings, plan
        self.reopen = None if plan is None else plan.reopen
        # samples the plan cannot tell (Python samples: no keys, no source to reopen) read by
        # index are keyed by their tasks: the fields a key stamps as files, None when not
        planned = plan is not None and (plan.keys is not None or plan.reopen is not None)
        keyed = not planned and (samples is None or is_sequence(samples))
        self.files = file_fields(specs) if keyed else None

    @property
    def samples(self) -> Any:
        if self._samples is None:
            if self.plan is None or self.reopen is None:
                raise PackError("these shards were planned from Python samples, which only the "
                                "pack that planned them can read; rerun that pack (with "
                                "resume=True to reuse its finished shards).")
            self._samples = reopen(self.plan, self.settings.storage_options)
        return self._samples

    @functools.cached_property
    def forked(self) -> bool:
        """fork, explicitly (whatever the global default): workers inherit the sequence and
        call its __getitem__; without fork, samples travel to the workers pickled, in order."""
        return is_sequence(self.samples) and "fork" in multiprocessing.get_all_start_methods()

    def __len__(self) -> int:
        return len(self.samples)

    def size(self, i: int) -> int:
        return 0 if self.plan is None else int(self.plan.sizes[i])

    def keys(self, lo: int, hi: int) -> bytes:
        if self.files is not None:  # read again, each keyed as its task keyed it
            return b"".join(sample_key(_read(self.samples, i), self.files)
                            for i in range(lo, hi))
        plan = self.plan
        if plan is None:  # a plain iterable: read once, never resumed
            return b""
        if plan.keys is not None:  # an importer's items, planned
            return np.ascontiguousarray(plan.keys[lo:hi]).tobytes()
        return plan.fingerprint.encode()  # an importer that cannot tell its items: the whole

    def key_job(self) -> Callable[[Work], bytes] | None:
        return None if self.files is None else functools.partial(key_job, files=self.files)

    def work(self, i: int) -> Work:
        return i if self.forked else (f"sample {i}", self.samples[i])

    def locality(self) -> Callable[[int], Hashable] | None:
        """An importer's Parquet samples by row group (read_locality); None for others and
        for Python samples (reading one here would run the user's __getitem__ twice)."""
        if self.reopen is None or not len(self) or read_locality(self.samples[0]) is None:
            return None
        samples = self.samples
        return lambda i: read_locality(samples[i])

    def job(self) -> Callable[[Work], Keyed]:
        return functools.partial(sample_job, specs=self.specs, settings=self.settings,
                                 files=self.files)

    def prepare(self, i: int) -> Keyed:
        return prepare_item(_read(self.samples, i), self.specs, f"sample {i}", self.settings,
                            self.files)

    @contextlib.contextmanager
    def inherited(self) -> Iterator[bool]:
        global _SOURCE
        _SOURCE = self.samples
        try:
            yield self.forked
        finally:  # a later pack's sequence is its own
            _SOURCE = None

    def rows(self) -> _SampleRows:
        return _SampleRows(self.specs, self.settings.tiles is not None, self.files is not None,
                           self.settings.apply_exif_orientation)

    def handed(self) -> object:
        return self.samples if self.reopen is None else None


@functools.lru_cache(maxsize=2)
def _reopened(description: str, options: str) -> tuple[Indexable, str]:
    """An importer's samples opened again from the plan's description (one per process);
    options: the fsspec storage options of a source at a URL (JSON; never in the plan)."""
    from fastloader.pack.sources.importers import reopened

    samples, specs, source = reopened(json.loads(description), json.loads(options) or None)
    if not is_sequence(samples):
        samples = list(samples)  # a streamed importer (tars): its samples, by index
    fields = json.dumps([s.to_json() for s in specs], sort_keys=True)
    return samples, fields + source["fingerprint"]


def reopen(plan: ShardPlan, storage_options: dict[str, Any] | None = None) -> Indexable:
    """The plan's importer samples: read back from the listing the plan keeps (a tree's), else
    its source opened again; PackError if that source is not the one planned."""
    from fastloader.pack.sources.importers import planned

    assert plan.reopen is not None
    kept = planned(plan.reopen, plan)
    if kept is not None:
        return kept
    options = json.dumps(storage_options or {}, sort_keys=True, default=str)
    samples, identity = _reopened(json.dumps(plan.reopen, sort_keys=True), options)
    if identity != json.dumps(plan.fields, sort_keys=True) + plan.fingerprint:
        raise PackError(f"{plan.reopen['src']} changed since its shard plan was made (its "
                        "files or fields differ); plan the pack again (rerun it, or `packdata "
                        "plan SRC DST`).")
    return samples


def items_of(plan: ShardPlan, settings: TaskSettings, samples: object = None) -> ItemSource:
    """The items of a plan: its samples (handed over, or else its importer's source, read back
    from the plan or reopened with the settings' storage options when first read)."""
    return SampleItems(samples, specs_of(plan.fields), settings, plan)
