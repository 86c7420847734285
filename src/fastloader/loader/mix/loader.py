"""MixLoader: the packed loader over a weighted mix of packed datasets (docs/mixing.md).

`FastLoader([a, b], weights=[1, 3])` or `FastLoader({"web": a, "books": b}, weights={...})`:
the sources (paths, URLs or open PackedDatasets) are read as one MixedDataset
(format/mixed.py), so a batch mixing them takes the packed loader's fused native decode,
pinned ring and every option; each epoch's order is a MixOrder (loader/order/mix_order.py) taken as
the sampler's order, so sharding and elastic resume are the packed loader's own. A checkpoint
also records the mix (`state['mix']`: sources, weights, epoch size, replacement), checked
field by field on load.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from fastloader.errors import DatasetNotFoundError, invalid_argument, invalid_type
from fastloader.format.dataset import PackedDataset
from fastloader.format.mixed import MixedDataset
from fastloader.format.open import dataset_from
from fastloader.format.remote import is_url
from fastloader.loader.factory.options import PackedOptions
from fastloader.loader.factory.pass_dataset import unwrap_view
from fastloader.loader.factory.path_choice import PackedData, is_mix
from fastloader.loader.order.mix_order import EpochSize, MixOrder, check_weights, epoch_length
from fastloader.loader.packed.loader import PackedLoader
from fastloader.loader.packed.storage import RemoteOptions

_REMOTE = ("cache_dir", "cache_limit", "storage_options", "prefetch_shards")
_MIX_FIELDS = ("sources", "weights", "epoch_size", "replacement")
SOURCE_KEY = "source"  # the name of the per-sample source index in a batch (source_index=True)


def _named(data: Any) -> tuple[list[str], list[Any]]:
    """(names, sources): a dict's keys, or each source's path (its index when not a path)."""
    if isinstance(data, Mapping):
        return [str(k) for k in data], [unwrap_view(v) for v in data.values()]
    sources = [unwrap_view(v) for v in data]
    names = [str(v.root) if isinstance(v, PackedDataset) else os.fspath(v) for v in sources]
    if len(set(names)) != len(names):
        names = [f"{k}:{n}" for k, n in enumerate(names)]
    return names, sources


class _WithSource:
    """A batch collator that adds each sample's source number (int64 [B]) to the batch."""

    def __init__(self, collate: Any, mix: MixedDataset) -> None:
        self.collate = collate
        self.mix = mix

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["collate"], name)

    def __call__(self, images: torch.Tensor, labels: torch.Tensor, samples: Any,
                 *rest: Any) -> Any:
        batch = self.collate(images, labels, samples, *rest)
        source = torch.as_tensor(self.mix.source_of(np.asarray(samples, np.int64)),
                                 device=labels.device)
        if isinstance(batch, dict):
            return {**batch, SOURCE_KEY: source}
        return (*batch, source)


class MixLoader(PackedLoader, path="mixed loader"):
    """The packed loader over several packed datasets with weights.

    Built by FastLoader(sources, weights=..., ...): see docs/mixing.md.

    Args:
        data: a list or tuple of sources, or a dict name -> source; a source is a packed
            dataset path, its URL, or an open PackedDataset (the caller closes it).
        weights: one per source (a sequence, or a dict by name for a dict of sources), any
            scale, >= 0; None: proportional to the sources' sizes (a plain concatenation).
        epoch_size: samples per epoch: an int, "sum" (None: every source's size added),
            "shortest" (until the first source is used up) or "longest" (until the last is).
        replacement: draw each source's share uniformly with replacement (default: from
            the source's own reshuffled passes, so no sample repeats before its source ran out).
        source_index: add each sample's source number (int64 [B], into `source_names`) to
            every batch: last in a tuple, under "source" in a dict.
        shared_fields: mix sources whose fields differ on the fields they all share alike
            (default False: such sources are refused, naming the difference).
        **options: every packed loader option (FastLoader); not sampler= or shuffle_window=.
    """

    def __init__(self, data: Sequence[PackedData] | Mapping[str, PackedData],
                 batch_size: int = 1, shuffle: bool = False, *,
                 weights: Sequence[float] | Mapping[str, float] | None = None,
                 epoch_size: EpochSize = None, replacement: bool = False,
                 source_index: bool = False, shared_fields: bool = False,
                 **options: Any) -> None:
        if not is_mix(data):
            raise invalid_type("data", data, "a list or dict of packed dataset paths, URLs "
                               "or PackedDatasets")
        for name in ("sampler", "shuffle_window"):
            if options.get(name) is not None:
                raise invalid_argument(name, options[name], "is not taken by a mix, whose "
                                       "weights set each epoch's order",
                                       f"Drop {name}=; set weights= and epoch_size=.")
        if options.get("backend") == "dali":
            raise invalid_argument("backend", "dali", "does not read a mix of datasets",
                                   "Use backend='auto' (the native decode), or pack one "
                                   "dataset with `packdata merge`.")
        self._names, self._given = _named(data)
        self._weights_arg = weights
        self._epoch_size_arg = epoch_size
        self._replacement = bool(replacement)
        self._source_index = bool(source_index)
        self._shared_fields = bool(shared_fields)
        self._remote_args = {k: options.pop(k) for k in _REMOTE if k in options}
        super().__init__(data, batch_size, shuffle, **options)  # type: ignore[arg-type]

    def _open_sources(self, undo: contextlib.ExitStack) -> MixedDataset:
        """Open every source (URLs with the remote options), each closed by `undo`."""
        urls = any(is_url(s) for s in self._given)
        given = {k: v for k, v in self._remote_args.items() if v is not None}
        if given and not urls:
            name = next(iter(given))
            raise invalid_argument(name, given[name], "applies to a dataset at a URL only, "
                                   "and no source of this mix is one",
                                   "Drop it, or pass a source's s3:// (or other) URL.")
        remote = {"cache_dir": given.get("cache_dir"), "cache_limit": given.get("cache_limit"),
                  "storage_options": given.get("storage_options"),
                  "prefetch": given.get("prefetch_shards"), "window": 1}
        opened, owned = [], []
        for name, source in zip(self._names, self._given, strict=True):
            if not isinstance(source, (str, PackedDataset)) and not hasattr(source, "__fspath__"):
                raise invalid_type(f"data[{name!r}]", source, "a packed dataset path or URL, "
                                   "or a PackedDataset")
            try:
                dataset, own = dataset_from(source, "a packed dataset path or URL",
                                            **(remote if is_url(source) else {}))
            except DatasetNotFoundError as exc:  # a list of strings has two readings
                raise DatasetNotFoundError(
                    f"data[{name!r}]: {exc} A list (or dict) of paths is read as a mix of "
                    "packed datasets (FastLoader([a, b], weights=...)); to load a list of "
                    "strings as a map-style dataset instead, wrap it in a "
                    "torch.utils.data.Dataset.") from exc
            if own:
                undo.callback(dataset.close)
            opened.append(dataset)
            owned.append(own)
        return MixedDataset(opened, self._names, owned, self._shared_fields)

    def _order_source(self, options: PackedOptions) -> MixOrder:
        return self._order

    def _open(self, data: object, options: PackedOptions, remote: RemoteOptions,
              undo: contextlib.ExitStack) -> None:
        mixed = self._open_sources(undo)
        sizes = [len(s) for s in mixed.sources]
        weights = self._weights_arg
        if isinstance(weights, Mapping):
            unknown = set(map(str, weights)) - set(self._names)
            if unknown:
                raise invalid_argument("weights", dict(weights), f"names {sorted(unknown)}, "
                                       f"not sources of this mix {self._names}",
                                       "Key weights by the sources' names.")
            weights = [weights.get(n, 0.0) for n in self._names]
        self.weights = check_weights(weights, sizes, self._names)
        total = epoch_length(self._epoch_size_arg, sizes, self.weights)
        self._order = MixOrder(sizes, self.weights, total, self._replacement, options.shuffle,
                               options.seed)
        # the packed loader's sampler over this order (_order_source), its checkpoint's
        # dataset the sources' fingerprints by name (resume.dataset_identity)
        super()._open(mixed, options, remote, undo)  # the caller's dataset: not closed there
        self._owns_dataset = True  # closes only the sources it opened (MixedDataset.owned)
        if self._source_index:
            self._collate = _WithSource(self._collate, mixed)  # type: ignore[assignment]

    # -- what a mix reports and checkpoints --------------------------------------------------

    @property
    def classes(self) -> list[str]:
        """The sources' classes joined by name (labels index this list)."""
        return list(self._data.classes)

    @property
    def source_names(self) -> list[str]:
        """The sources' names, in order (a batch's source index points into this list)."""
        return list(self._names)

    def source_counts(self) -> dict[str, int]:
        """Samples each source gives an epoch (all ranks together)."""
        return {n: int(c) for n, c in zip(self._names, self._order.counts, strict=True)}

    def _mix_state(self) -> dict[str, Any]:
        return {"sources": list(self._names), "weights": list(self.weights),
                "epoch_size": self._order.num_samples, "replacement": self._replacement}

    def state_dict(self) -> dict[str, Any]:
        """The packed loader's global checkpoint, plus `mix`: sources, weights, epoch size and
        replacement, which a loader must match to load it."""
        return {**super().state_dict(), "mix": self._mix_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume a mix's checkpoint (on any world size, batch size or drop_last), or refuse
        one of another mix naming the field (state['mix'][...]) that differs."""
        if not isinstance(state, dict):
            raise invalid_type("state", state, "a dict from the loader's state_dict()")
        saved, mine = state.get("mix"), self._mix_state()
        if not isinstance(saved, dict):
            raise invalid_argument("state['mix']", saved, "this loader mixes "
                                   f"{self._names}, and the state is not a mix's",
                                   "Pass a dict saved by a mixed loader's state_dict().")
        for key in _MIX_FIELDS:
            if saved.get(key) != mine[key]:
                raise invalid_argument(
                    f"state['mix'][{key!r}]", saved.get(key), f"this loader has {key}="
                    f"{mine[key]!r}, and the epoch's order depends on it",
                    "Resume with the same sources, weights, epoch_size and replacement "
                    "(world size, batch size, drop_last and threads may change).")
        super().load_state_dict({k: v for k, v in state.items() if k != "mix"})

    def __repr__(self) -> str:
        if not hasattr(self, "sampler"):
            return "FastLoader(<not built>)"
        return (f"FastLoader(mix {dict(zip(self._names, self.weights, strict=True))}, "
                f"batch_size={self.batch_size}, image_size={self.image_size}, "
                f"device={self.device}, {self.sampler!r})")
