"""`packdata plan SRC DST`, `packdata shard DST --range I:J`, `packdata commit DST`: one pack
as separate steps, for schedulers without a Python API (a SLURM array, Spark, xargs).

plan scans SRC once and writes the shard plan into DST's staging folder (.DST.partial, on a
filesystem every machine sees) and prints the number of shards; any number of `shard` runs,
anywhere, each write the parts of their range (idempotent: a rerun rewrites the same bytes);
commit checks every part and publishes DST.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from fastloader.errors import PackError
from fastloader.format.remote import is_url
from fastloader.pack import importers
from fastloader.pack.commit import commit
from fastloader.pack.engines import Meter, run_local
from fastloader.pack.journal import Staging, staging_path
from fastloader.pack.part import read_settings
from fastloader.pack.plan import ShardPlan

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
    from fastloader.pack.write import plan_pack

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
    if importers.detect(args.src, args.source_format) != "imagefolder":
        raise PackError(f"packdata plan packs ImageFolder trees only; pack {args.src} in one "
                        "run (packdata SRC DST).")
    staging, plan, _ = plan_pack(
        args.src, args.dst, format=args.format, shard_size=args.shard_size,
        max_side=args.max_side, quality=args.quality, overwrite=args.overwrite,
        resume=args.resume, strict=args.strict, tiles=args.tiles,
        restart_mcus=args.restart_mcus, max_file_size=args.max_file_size)
    staging.release()
    print(plan.num_shards)
    if not args.quiet:
        print(f"planned {len(plan)} files in {plan.num_shards} shards in {staging.dir}; now "
              f"run `packdata shard {args.dst} --range I:J` over 0:{plan.num_shards} (any "
              f"split, anywhere DST's folder is visible), then `packdata commit {args.dst}`",
              file=sys.stderr)
    return 0


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
    from fastloader.pack.write import _check_options

    _, workers, _, _ = _check_options(1, args.workers, None, 90)
    folder = staging_path(Path(args.dst).expanduser().absolute())
    plan, settings = ShardPlan.load(folder), read_settings(folder)
    lo, hi = args.range
    if lo >= plan.num_shards:  # an array task past the end (more tasks than shards)
        if not args.quiet:
            print(f"--range {lo}:{hi} starts past the plan's {plan.num_shards} shards: "
                  "nothing to do", file=sys.stderr)
        return 0
    todo = list(range(lo, min(hi, plan.num_shards)))
    meter = Meter(plan, todo, None, args.quiet)
    meter.files, meter.total = 0, sum(plan.span(k)[1] - plan.span(k)[0] for k in todo)
    try:
        run_local(folder, plan, todo, settings, workers, meter)
    finally:
        meter.close()
    if not args.quiet:
        print(f"wrote the parts of shards {todo[0]}..{todo[-1]} in {folder}", file=sys.stderr)
    return 0


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
        plan, settings = ShardPlan.load(staging.dir), read_settings(staging.dir)
        overwrite = args.overwrite or bool(settings.get("overwrite"))
        manifest = commit(staging, plan, settings, overwrite)
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
