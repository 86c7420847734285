"""Without the extension, tiles say clearly that they need it and how to build it."""

from __future__ import annotations

import pytest

from fastloader.decode import tiles
from fastloader.errors import NativeUnavailableError


def test_disabled_extension_raises_with_build_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTLOADER_DISABLE_NATIVE", "1")
    with pytest.raises(NativeUnavailableError, match="libjpeg-turbo headers"):
        tiles.repack(b"\xff\xd8")
    with pytest.raises(NativeUnavailableError, match="FASTLOADER_DISABLE_NATIVE"):
        tiles.scan(b"\xff\xd8")
