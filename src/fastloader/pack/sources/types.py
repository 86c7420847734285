"""The shapes every source shares: a sample, pack()'s fields= overrides, a source's description,
a table's row, map-style samples, fsspec's options."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

# one sample: field name -> value as the source gives it (bytes, a path, a TarMember, a
# number ...; its kind's store() checks and converts it), plus values.WHERE_KEY / PATH_KEY /
# ERROR_KEY where an importer tells them
Sample = dict[str, object]

# fsspec's keyword arguments (credentials, an endpoint ...), passed to it as given
StorageOptions = dict[str, Any]

# pack()'s fields=: field name -> kind as the user wrote it ("int", ("ndarray", DTYPE, SHAPE),
# a FieldSpec ...), checked by format/fields.make_spec
FieldKinds = Mapping[str, object]

# what a source says of itself in the plan and the manifest (kind, path, its fingerprint, a
# table's root ...): JSON written by the pack and read back by shard tasks. Its values are
# left untyped, not object: its readers outside pack/sources (staging/items.py,
# pipeline/samples.py) index it by key; a TypedDict needs them to take one
Description = dict[str, Any]

# a table's row: its cells by column (CSV text, JSON values, Parquet cells), or why the line
# cannot be read ("malformed line ...")
Row = dict[str, object] | str


class Indexed(Protocol):
    """Map-style samples: a sequence, or a dataset with __len__ and __getitem__."""

    def __len__(self) -> int: ...

    def __getitem__(self, i: int) -> object: ...
