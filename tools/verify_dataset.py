"""Thin script: `python tools/verify_dataset.py DATASET [--decode]` runs `packdata verify`."""

from __future__ import annotations

import sys

from fastloader.pack.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["verify", *sys.argv[1:]]))
