"""Thin script: `python tools/doctor.py DATASET [options]` runs `fastloader doctor`."""

from __future__ import annotations

import sys

from fastloader.doctor.doctor import main

if __name__ == "__main__":
    sys.exit(main(["doctor", *sys.argv[1:]]))
