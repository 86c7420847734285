"""`packdata plan SRC DST`, `packdata shard DST --range I:J`, `packdata commit DST`: one pack
as separate steps, for schedulers without a Python API (a SLURM array, Spark, xargs).

plan lists SRC once (an ImageFolder tree, a table, file groups, .tar shards or a COCO file)
and writes the shard plan into DST's staging folder (.DST.partial, on a
filesystem every machine sees) and prints the number of shards; any number of `shard` runs,
anywhere, each write the parts of their range (idempotent: a rerun rewrites the same bytes);
commit checks every part and publishes DST.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from fastloader.errors import PackError
from fastloader.format.remote import is_url
from fastloader.pack.cli.options import pack_options
from fastloader.pack.cli.sources import SourceOptions, source_options
from fastloader.pack.engines.local import run_local
from fastloader.pack.engines.progress import Meter
from fastloader.pack.pipeline.options import PackOptions, check_sizes
from fastloader.pack.sources import importers
from fastloader.pack.staging.commit import commit
from fastloader.pack.staging.items import items_of
from fastloader.pack.staging.journal import Staging, staging_path
from fastloader.pack.staging.plan import (
    PLAN_DIR,
    SETTINGS_NAME,
    load_plan,
    read_settings,
)

COMMANDS = ("plan", "shard", "commit")


def _range(text: str) -> tuple[int, int]:
    lo, sep, hi = text.partition(":")
    try:
        first, stop = int(lo), int(hi) if sep else int(lo) + 1
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a range like 0:8 or 5") from None
    if first < 0 or stop <= first:
        raise argparse.ArgumentTypeError(f"{text!r} is empty or negative; write I:J with I < J")
    return first, stop


def _refuse_url(dst: str) -> None:
    if is_url(dst):
        raise PackError(f"packdata plan/shard/commit take a folder DST, not {dst}; pack to a "
                        "URL in one run: packdata SRC URL [--engine ray].")


def _run_plan(argv: Sequence[str], pack_parser: argparse.ArgumentParser) -> int:
    pack_parser.prog = "packdata plan"
    pack_parser.usage = "packdata plan SRC DST [options of packdata SRC DST]"
    pack_parser.description = ("List SRC once and write the shard plan into DST's staging "
                               "folder; prints the number of shards.")
    pack_parser.epilog = None
    args = pack_parser.parse_args(argv)
    _refuse_url(args.dst)
    if args.engine != "local" or args.ray_address:
        raise PackError("packdata plan takes no --engine: the shard runs are yours to "
                        "schedule.")
    return _plan_samples(args)


def _plan_options(args: argparse.Namespace) -> PackOptions:
    """`packdata plan`'s pack options: packdata's flags (cli/options.py), planned here, not
    run: no workers, no progress (the shard runs choose theirs)."""
    return replace(pack_options(args), workers=None, quiet=True)


def _planned(args: argparse.Namespace, count: int, shards: int, folder: Path,
             noun: str = "files") -> None:
    print(shards)
    if not args.quiet:
        print(f"planned {count} {noun} in {shards} shards in {folder}; now run `packdata "
              f"shard {args.dst} --range I:J` over 0:{shards} (any split, anywhere DST's "
              f"folder is visible), then `packdata commit {args.dst}`", file=sys.stderr)


def _plan_samples(args: argparse.Namespace) -> int:
    """plan of any source (an ImageFolder tree, a table, file groups, .tar shards, a COCO
    file ...): its source description goes into the plan, so each `packdata shard` run opens
    it again (or reads it back from the listing the plan keeps: a tree's)."""
    from fastloader.pack.pipeline.drive import plan_source
    from fastloader.pack.pipeline.samples import SampleSource, sample_options

    options = source_options(args)
    kind = importers.detect(args.src, options.pop("source_format", None))
    reopen = importers.reopen_description(args.src, kind, **_opener(options))
    assert reopen is not None  # packdata's options are JSON
    planning = _plan_options(args).checked()
    samples, specs, source = importers.open_source(
        reopen["src"], kind, **_opener(options), storage_options=planning.storage_options,
        max_file_size=planning.max_file_size)
    if not hasattr(samples, "__getitem__"):
        samples = list(samples)
    checked = sample_options(planning, source)
    dst = Path(args.dst).expanduser().absolute()
    staging, plan, _ = plan_source(SampleSource(samples, specs, source, reopen), dst, checked)
    try:
        (staging.dir / PLAN_DIR / SETTINGS_NAME).write_text(
            json.dumps({"overwrite": args.overwrite}))
    finally:
        staging.release()
    assert plan is not None
    noun = "samples" if plan.path_offsets is None else "files"  # a listing's items are files
    _planned(args, len(plan), plan.num_shards, staging.dir, noun)
    return 0


def _opener(options: SourceOptions) -> importers.OpenerArgs:
    """open_source's keyword arguments from packdata's source options."""
    return {"fields": options.get("fields"), "image": options.get("image"),
            "label": options.get("label"), "root": options.get("root"),
            "skip_empty": options.get("skip_empty", False),
            "masks": options.get("masks", False)}


def _run_shard(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="packdata shard")
    parser.add_argument("dst", metavar="DST", help="the DST given to packdata plan")
    parser.add_argument("--range", type=_range, required=True, metavar="I:J",
                        help="write the parts of shards I..J-1 (J may pass the last shard)")
    parser.add_argument("--workers", type=int, metavar="N",
                        help="processes (default: all usable cores)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    _refuse_url(args.dst)
    _, workers, _, _ = check_sizes(1, args.workers, None, 90)
    folder = staging_path(Path(args.dst).expanduser().absolute())
    plan, settings = load_plan(folder)
    todo = _todo(args, plan.num_shards)
    if not todo:
        return 0
    if plan.handed:
        raise PackError(f"{folder} was planned from Python samples; only the pack that "
                        "planned it can write its shards.")
    items = items_of(plan, settings)  # an importer's source opened again
    meter = Meter(plan, todo, None, args.quiet)
    meter.files, meter.total = 0, sum(plan.span(k)[1] - plan.span(k)[0] for k in todo)
    try:
        run_local(folder, plan, todo, items, settings, workers, meter)
    finally:
        meter.close()
    _wrote(args, todo, folder)
    return 0


def _todo(args: argparse.Namespace, shards: int) -> list[int]:
    lo, hi = args.range
    if lo >= shards and not args.quiet:  # an array task past the end (more tasks than shards)
        print(f"--range {lo}:{hi} starts past the plan's {shards} shards: nothing to do",
              file=sys.stderr)
    return list(range(lo, min(hi, shards)))


def _wrote(args: argparse.Namespace, todo: list[int], folder: Path) -> None:
    if not args.quiet:
        print(f"wrote the parts of shards {todo[0]}..{todo[-1]} in {folder}", file=sys.stderr)


def _run_commit(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="packdata commit")
    parser.add_argument("dst", metavar="DST", help="the DST given to packdata plan")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace DST if it is a packed dataset")
    parser.add_argument("--quiet", action="store_true", help="no summary")
    args = parser.parse_args(argv)
    _refuse_url(args.dst)
    staging = Staging(Path(args.dst).expanduser().absolute())
    staging.adopt()
    try:
        settings = read_settings(staging.dir)
        overwrite = args.overwrite or settings.overwrite
        manifest = commit(staging, load_plan(staging.dir)[0], settings, overwrite)
    finally:
        staging.release()
    if not args.quiet:
        print(f"{args.dst}: {manifest.num_samples} records in {len(manifest.shards)} shards, "
              f"{manifest.stats['skipped']} skipped", file=sys.stderr)
    return 0


def run(command: str, argv: Sequence[str], pack_parser: argparse.ArgumentParser) -> int:
    """Run `packdata plan|shard|commit ARGS`; the exit code."""
    if command == "plan":
        return _run_plan(argv, pack_parser)
    return _run_shard(argv) if command == "shard" else _run_commit(argv)
