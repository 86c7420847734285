"""Thin script: `python tools/inspect_dataset.py DATASET [--json]` runs `packdata info`."""

from __future__ import annotations

import sys

from fastloader.pack.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["info", *sys.argv[1:]]))
