"""What `packdata` prints after a pack (a listed tree's files, or declared-field samples) and
after a verify of tiled records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from fastloader.format.disk_space import human_bytes
from fastloader.format.manifest import Manifest
from fastloader.pack.pipeline.tree import SKIPPED_NAME

if TYPE_CHECKING:
    from fastloader.pack.maintain.verify import VerifyReport

_SHOWN_SKIPPED = 10


def _skipped_list(dst: Path | str) -> list[dict[str, str]]:
    """skipped.json of a dataset folder or URL."""
    if isinstance(dst, str):  # a URL
        from fastloader.format.remote import Remote

        return list(json.loads(Remote(dst).read_bytes(SKIPPED_NAME)))
    return list(json.loads((dst / SKIPPED_NAME).read_text()))


def tree_summary(manifest_stats: dict, seconds: float, dst: Path | str) -> str:
    """What a listed tree's pack made: files, rate, what the listing ignored, tiles,
    re-encodes and the first skipped files."""
    stats = manifest_stats
    rate = stats["files_found"] / max(seconds, 1e-9)
    mbps = stats["source_bytes"] / max(seconds, 1e-9) / 1e6
    lines = [
        f"packed {stats['packed']} images into {dst} in {seconds:.1f} s "
        f"({rate:.0f} files/s, {mbps:.1f} MB/s, {human_bytes(stats['record_bytes'])} of records)"
    ]
    ignored = stats["ignored_hidden"] + stats["ignored_non_image"]
    ignored += stats["ignored_outside_classes"]
    if ignored:
        lines.append(
            f"ignored {ignored} files: {stats['ignored_hidden']} hidden, "
            f"{stats['ignored_non_image']} not images, "
            f"{stats['ignored_outside_classes']} outside class folders"
        )
    if stats["empty_classes"]:
        lines.append(f"empty class folders (kept as classes): {stats['empty_classes']}")
    if "tiled" in stats:
        lines.append(
            f"tiled {stats['tiled']} JPEGs losslessly; {stats['untiled']} records kept their "
            "bytes (not tileable: non-JPEG, arithmetic-coded, lossless or 12-bit)"
        )
    if stats["reencoded"]:
        lines.append(f"re-encoded {stats['reencoded']} images larger than --max-side")
    if stats["skipped"]:
        noun = "file" if stats["skipped"] == 1 else "files"
        lines.append(f"skipped {stats['skipped']} unreadable {noun} (all in "
                     f"{dst}/{SKIPPED_NAME}):")
        skipped = _skipped_list(dst)
        lines += [f"  {s['path']}: {s['reason']}" for s in skipped[:_SHOWN_SKIPPED]]
    return "\n".join(lines)


def _named(sample: str, reason: str) -> str:
    """A skipped sample's line: its reason, led by where it came from unless the reason is
    (a sample's error names its location first)."""
    return reason if reason.startswith(f"{sample}: ") else f"{sample}: {reason}"


def samples_summary(manifest: Manifest, seconds: float, dst: Path | str) -> str:
    """What a fields (v2) pack made, and what it skipped."""
    stats = manifest.stats
    fields = ", ".join(f"{f['name']} ({f['kind']})" for f in manifest.sample_fields)
    lines = [f"packed {stats['packed']} samples into {dst} in {seconds:.1f} s "
             f"({stats['packed'] / max(seconds, 1e-9):.0f} samples/s); fields: {fields}"]
    skipped = stats.get("skipped_samples", [])
    if skipped:
        noun = "sample" if len(skipped) == 1 else "samples"
        lines.append(f"skipped {len(skipped)} bad {noun} (all in the manifest and "
                     f"{dst}/skipped.json):")
        lines += [f"  {_named(s['sample'], s['reason'])}" for s in skipped[:_SHOWN_SKIPPED]]
    return "\n".join(lines)


def tiles_line(report: VerifyReport, with_source: bool) -> str:
    """`packdata verify`'s line on tiled records."""
    if report.tiles_unchecked:
        return f"tiles: not checked: {report.tiles_unchecked}"
    line = f"tiles: {report.tiles_checked} tile tables match their records"
    if with_source:
        line += (
            f"; {report.sources_compared} records equal their source pixels, "
            f"{report.sources_unavailable} sources gone or changed (not compared)"
        )
    return line
