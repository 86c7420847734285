"""Shared pytest set-up: skip native-only tests when the extension is disabled."""

from __future__ import annotations

import os

import pytest

NATIVE_DISABLED = os.environ.get("FASTLOADER_DISABLE_NATIVE", "") not in ("", "0")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not NATIVE_DISABLED:
        return
    skip = pytest.mark.skip(reason="FASTLOADER_DISABLE_NATIVE=1: this test needs the extension")
    for item in items:
        if "native" in item.keywords:
            item.add_marker(skip)
