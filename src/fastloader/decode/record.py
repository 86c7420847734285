"""What the decoders read: a record's bytes, as a dataset hands them out or a caller gives them."""

from __future__ import annotations

from typing import TypeAlias

Record: TypeAlias = bytes | bytearray | memoryview  # a shard's record is a memoryview
