"""The `packdata` command: pack an image tree, or show info about / verify a packed dataset."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import re
import shlex
import signal
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from fastloader.decode.tiles import DEFAULT_RESTART_MCUS
from fastloader.errors import DiskFullError, FastloaderError
from fastloader.format.manifest import Manifest
from fastloader.format.remote import is_url
from fastloader.pack.api import pack
from fastloader.pack.cli import steps as cli_plan
from fastloader.pack.cli.options import pack_options
from fastloader.pack.cli.sources import add_source_options, source_options
from fastloader.pack.cli.stops import (
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    Stop,
    sigterm_as_interrupt,
)
from fastloader.pack.cli.summaries import samples_summary, tiles_line, tree_summary
from fastloader.pack.cli.words import cli_words, flags
from fastloader.pack.maintain.info import dataset_info, format_info
from fastloader.pack.pipeline.drive import staging_kept
from fastloader.pack.pipeline.tree import DEFAULT_SHARD_SIZE
from fastloader.pack.sources.validate import DEFAULT_MAX_FILE_SIZE, WARNED_LOG
from fastloader.pack.staging.journal import RESUME_LOG
from fastloader.pack.staging.upload import download

SUBCOMMANDS = ("info", "verify", "append", "merge", "plan", "shard", "commit", "recode")
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SHOWN_SKIPPED = 10

USAGE_EPILOG = """\
other commands:
  packdata info DST [--json]       counts, classes, shards, bytes, image sizes, options
  packdata verify DST [--decode] [--source SRC]
                                   check every shard, index file and record checksum
                                   (--decode also decodes each image; on a --tiles dataset it
                                   checks each tile table, a spliced crop against the full
                                   decode and, with --source, pixels against the source tree);
                                   exit 0 only if intact
  packdata append DST NEW          add NEW (an image tree or a packed dataset) to DST in place:
                                   new shards, new class names at the end, manifest switched
                                   last (readers of the old version keep working)
  packdata merge A B [...] OUT     one dataset from several (records copied, not decoded);
                                   classes by name: A's ids kept, new names added at the end
  packdata recode SRC DST --codec coeffs|jpeg
                                   a new dataset with SRC's JPEG records as coeffs records
                                   (lossless, faster decodes; other images kept as they are),
                                   or a coeffs dataset's records back as JPEGs
  packdata plan SRC DST [options]  a pack in steps, for SLURM arrays and other schedulers:
  packdata shard DST --range I:J   plan lists SRC once and prints the number of shards;
  packdata commit DST              shard writes shards I..J-1 (anywhere DST's folder is
                                   seen, any split, rerunnable); commit checks every part
                                   and publishes DST (docs/cluster-packing.md)

SRC is any of these (detected; --source-format KIND forces one):
  an image tree        SRC/<class>/<image files>, found recursively (hidden and non-image
                       files are ignored)
  class folders of     SRC/<class>/<.wav .flac .mp3 .ogg .opus clips> (a Speech Commands
    audio clips        style tree; --source-format audiofolder)
  class folders of     SRC/<class>/<.mp4 .m4v .mov .mkv .webm .avi clips> (a Kinetics or
    videos             UCF101 style tree; --source-format videofolder)
  a table              .csv .tsv .jsonl .parquet: one row a sample (--image, --label,
                       --root, --field)
  WebDataset groups    x.jpg x.cls x.txt ... in a folder, or in .tar/.tgz shards
                       ('data-{000..009}.tar')
  a COCO file          instances.json (--images DIR, --masks, --skip-empty)
  a Hugging Face       its Parquet files, as the Hub keeps them: a folder of them or
    split              'data/train-{00000..00041}-of-00042.parquet' (in Python,
                       pack(dataset) packs a `datasets` split in memory)
  a URL                s3://bucket/..., gs://... (fsspec): tar shards, a table or a folder
DST's suffix picks the backend: NAME.lmdb or NAME.h5.
DST may be a URL (s3://bucket/x.lmdb, gs://..., file://...): every source is packed
straight there (each shard task uploads its shard; the staging is the hidden .NAME.partial
beside it; manifest.json last); info and verify take URLs too.
A source folder literally named like a command ("info", "verify", "append", "merge",
"plan", "shard", "commit") must be written as ./info.
exit codes: 0 ok, 1 verify found damage or an I/O failure, 2 bad input, 130 interrupted
(Ctrl-C), 143 terminated (SIGTERM: what SLURM and Kubernetes send on preemption); after 130 or
143 the finished shards, if any, are kept and the same command with --resume goes on from
them (the message says which). A full disk (1) is refused before the pack starts when the
estimate is clearly larger than the free space (--skip-space-check packs anyway); one that
fills mid-way keeps the finished shards, and --resume finishes the pack once there is room."""

def parse_size(text: str) -> int:
    """'256M' -> 268435456 (K, M, G are powers of 1024; a plain number is bytes)."""
    value = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = value[-1:] if value[-1:] in _UNITS else ""
    number = value[: len(value) - len(unit)]
    try:
        size = int(float(number) * _UNITS[unit])
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 256M or 1G") from None
    if size < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1 byte")
    return size


def _pack_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="packdata",
        usage="packdata SRC DST [options]\n       packdata {info,verify} DST [options]\n"
              "       packdata append DST NEW | packdata merge A B [...] OUT\n"
              "       packdata plan SRC DST [options] | packdata shard DST --range I:J | "
              "packdata commit DST",
        description="Pack images, audio or video clips or any table of samples (an image "
                    "tree, class folders of clips or videos, a CSV/TSV/JSONL/Parquet table, "
                    "WebDataset tars, a COCO file, a Hugging Face split, or URLs to them) "
                    "into a sharded LMDB or HDF5 dataset.",
        epilog=USAGE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add("src", metavar="SRC", help="what to pack: an image tree, class folders of clips or "
        "videos, a table, WebDataset tars, a COCO file, a Hugging Face split or a URL (see below)")
    add("dst", metavar="DST", help="dataset folder to create: NAME.lmdb or NAME.h5")
    add("--format", choices=("lmdb", "hdf5"), help="backend (default: from DST's suffix)")
    add("--shard-size", type=parse_size, default=DEFAULT_SHARD_SIZE, metavar="SIZE",
        help="bytes per shard, e.g. 256M or 1G (default: 256M)")  # fmt: skip
    add("--workers", type=int, metavar="N", help="processes (default: all usable cores)")
    add("--max-side", type=int, metavar="N",
        help="re-encode images whose longer side exceeds N pixels (as JPEG)")  # fmt: skip
    add("--quality", type=int, default=90, metavar="Q", help="JPEG quality for --max-side")
    add("--overwrite", action="store_true", help="replace DST if it is a packed dataset")
    add("--resume", action="store_true", help="reuse the finished shards of an interrupted pack")
    add("--skip-space-check", action="store_true", help="pack even when the output's estimate "
        "is clearly (1.1x) larger than the free space at DST, which is refused otherwise")
    add("--strict", action="store_true", help="stop at the first bad item (the default, "
        "said explicitly; the opposite of --skip-bad)")
    add("--quiet", action="store_true", help="no progress bar and no summary")
    add("--max-file-size", type=parse_size, default=DEFAULT_MAX_FILE_SIZE, metavar="SIZE",
        help="skip (and list in skipped.json) source files larger than SIZE "
        "(default: 256M)")  # fmt: skip
    add("--tiles", action="store_true",
        help="decode-aware packing: repack JPEGs losslessly with restart markers so crops "
        "decode only the tiles they need (needs the native extension)")  # fmt: skip
    add("--codec", choices=("jpeg", "coeffs", "tiles"), default="jpeg",
        help="how JPEG records are stored: jpeg (as they are, default), tiles (= --tiles), or "
        "coeffs (their coefficients: lossless, faster decodes and crops, ~1.5x the bytes; "
        "every source, encoded as it is packed; needs the native extension)")  # fmt: skip
    add("--restart-mcus", type=int, default=DEFAULT_RESTART_MCUS, metavar="R",
        help="with --tiles: at most R MCUs per restart segment "
        f"(default {DEFAULT_RESTART_MCUS})")  # fmt: skip
    add("--apply-exif-orientation", action="store_true",
        help="store each image's EXIF orientation and its turned size, so FastLoader shows "
        "images as PIL.ImageOps.exif_transpose turns them (default: ignored)")  # fmt: skip
    add_source_options(parser)
    add("--engine", choices=("local", "ray"), default="local",
        help="who runs the shard tasks: this machine's processes (default) or Ray (one task "
        "per shard; pip install \"fastloader[ray]\")")  # fmt: skip
    add("--ray-address", metavar="ADDR", help="with --engine ray: the cluster to join "
        "(default: a local Ray instance with --workers CPUs)")  # fmt: skip
    # accepted and ignored, so older commands still run: every source now stages at DST's
    # hidden .NAME.partial prefix (remote_stage.py), never in a local folder
    add("--staging", metavar="DIR", help=argparse.SUPPRESS)
    return parser


def _sub_parser(command: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"packdata {command}")
    parser.add_argument("dst", metavar="DST", help="a packed dataset folder, or its URL")
    if command == "info":
        parser.add_argument("--json", action="store_true", help="print JSON with every field")
    else:
        parser.add_argument("--decode", action="store_true", help="also decode every image")
        parser.add_argument(
            "--source", metavar="SRC", help="with --decode on a tiled dataset: the packed "
            "image tree, to compare tiled records' pixels with their sources"
        )  # fmt: skip
        parser.add_argument("--quiet", action="store_true", help="print only problems")
    return parser


def _run_pack(argv: Sequence[str]) -> int:
    args = _pack_parser().parse_args(argv)
    began = time.perf_counter()
    # Every source packs straight to a URL DST: its staging is remote (remote_stage.py).
    dst = args.dst
    warned = _Collected()
    WARNED_LOG.addHandler(warned)
    try:
        manifest = _pack(args, dst)
    finally:
        WARNED_LOG.removeHandler(warned)
    if not args.quiet:
        seconds = time.perf_counter() - began
        where = dst if is_url(dst) else Path(dst).expanduser().absolute()
        text = (tree_summary(manifest.stats, seconds, where) if "files_found" in manifest.stats
                else samples_summary(manifest, seconds, where))  # a tree's files, or samples
        print("\n".join([text, *warned.lines()]), file=sys.stderr)
    return 0


class _Collected(logging.Handler):
    """The decoders' warnings about packed files (validate.WARNED_LOG), for the summary."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def lines(self) -> list[str]:
        if not self.messages:
            return []
        noun = "file" if len(self.messages) == 1 else "files"
        return [f"{len(self.messages)} packed {noun} made a decoder warn (Pillow, libtiff ...; "
                "they decode and are kept):",
                *(f"  {m}" for m in self.messages[:_SHOWN_SKIPPED])]


def _pack(args: argparse.Namespace, dst: str) -> Manifest:
    return pack(args.src, dst, **source_options(args), options=pack_options(args))


def _run_grow(command: str, argv: Sequence[str]) -> int:
    from fastloader.pack.maintain.grow import append, merge

    parser = argparse.ArgumentParser(prog=f"packdata {command}")
    if command == "append":
        parser.add_argument("dst", metavar="DST", help="the packed dataset to grow")
        parser.add_argument("new", metavar="NEW", help="an image tree or a packed dataset")
        parser.add_argument("--workers", type=int, metavar="N", help="processes for a tree")
    else:
        parser.add_argument("paths", nargs="+", metavar="DATASET", help="inputs, then OUT")
        parser.add_argument("--overwrite", action="store_true", help="replace OUT")
    parser.add_argument("--quiet", action="store_true", help="no summary")
    args = parser.parse_args(argv)
    if command == "append":
        manifest = append(args.dst, args.new, workers=args.workers)
        target = args.dst
    else:
        if len(args.paths) < 3:
            parser.error("merge needs two or more datasets and OUT")
        manifest = merge(args.paths[:-1], args.paths[-1], overwrite=args.overwrite)
        target = args.paths[-1]
    if not args.quiet:
        print(f"{target}: {manifest.num_samples} records in {len(manifest.shards)} shards, "
              f"{len(manifest.classes)} classes", file=sys.stderr)
    return 0


def _run_info(argv: Sequence[str]) -> int:
    args = _sub_parser("info").parse_args(argv)
    info = dataset_info(args.dst)
    print(json.dumps(info, indent=2) if args.json else format_info(info))
    return 0


def _run_verify(argv: Sequence[str]) -> int:
    from fastloader.pack.maintain.verify import verify

    args = _sub_parser("verify").parse_args(argv)
    if is_url(args.dst):  # a full sha256-checked copy, then the same checks as a folder's
        with tempfile.TemporaryDirectory(prefix="packdata-verify-") as tmp:
            local = download(args.dst, Path(tmp) / "dataset")
            report = verify(local, decode=args.decode or args.source is not None,
                            source=args.source)
            report.root = args.dst
    else:
        report = verify(args.dst, decode=args.decode or args.source is not None,
                        source=args.source)
    for problem in report.problems:
        print(problem)
    what = "records checked and decoded" if args.decode else "records checked"
    if report.ok:
        if not args.quiet:
            values = (f" and {report.values_checked} text/json/image field values"
                      if report.values_checked else "")
            print(f"OK: {report.root}: {report.records_checked} {what}{values}, all intact")
            if report.tiles_checked or report.tiles_unchecked:
                print(tiles_line(report, args.source is not None))
        return 0
    print(
        f"DAMAGED: {report.root}: {len(report.problems)} problems, "
        f"{len(set(report.bad_records))} bad records of {report.records_checked} {what}",
        file=sys.stderr,
    )
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run packdata with argv (default sys.argv[1:]); return the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    stop = Stop()
    try:
        with sigterm_as_interrupt(stop), _shown(RESUME_LOG, "--quiet" in args):
            return _dispatch(args)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else 2
    except (KeyboardInterrupt, Exception) as exc:
        # After a stop signal, whatever surfaces is the stop's: the exception the handler
        # raised can be replaced by one from the code it unwound (np.savez's zip file, closed
        # in its finally while a member was being written, raised ValueError over it).
        if isinstance(exc, KeyboardInterrupt) or stop.signum is not None:
            # the handler noted which signal
            return _stopped(args, stop.signum == signal.SIGTERM, staging_kept(exc))
        if isinstance(exc, FastloaderError):
            print(f"packdata: error: {_words(exc)}", file=sys.stderr)
            return 1 if isinstance(exc, DiskFullError) else 2  # an I/O failure: a full disk
        if isinstance(exc, OSError):  # disk full, permission lost mid-way...: one line
            again = " with --resume" if staging_kept(exc) else ""
            print(f"packdata: error: {_words(exc)}; fix it and rerun{again}", file=sys.stderr)
            return 1
        raise


def _stopped(args: list[str], terminated: bool, kept: bool) -> int:
    """Say that the command stopped (by SIGTERM, else Ctrl-C) and how to go on (kept: a pack
    kept finished shards); the exit code a shell would show."""
    print(f"packdata: {'terminated (SIGTERM)' if terminated else 'interrupted'}"
          f"{_going_on(args, kept)}", file=sys.stderr)
    return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED


def _going_on(args: list[str], kept: bool) -> str:
    """How to go on after an interrupted command: a pack that kept finished shards resumes
    (one stopped before any finished kept nothing), a shard run is rerun."""
    command = args[0] if args else ""
    if command == "shard":
        return "; the parts written are kept: rerun the same command to write the rest"
    if command in SUBCOMMANDS and command != "plan":  # info, verify, append, merge, commit
        return ""
    if not kept:
        return "; no shard had finished, nothing is kept: rerun the same command"
    return "; the finished shards are kept: rerun the same command with --resume"


@contextlib.contextmanager
def _shown(log: logging.Logger, quiet: bool) -> Iterator[None]:
    """The log's messages on stderr as packdata's lines while a command runs (not --quiet)."""
    if quiet:
        yield
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("packdata: %(message)s"))
    log.addHandler(handler)
    try:
        yield
    finally:
        log.removeHandler(handler)


def _dispatch(args: list[str]) -> int:
    if args and args[0] == "recode":
        from fastloader.pack.cli import recode as cli_recode

        return cli_recode.run(args[1:])
    if args and args[0] in ("append", "merge"):
        return _run_grow(args[0], args[1:])
    if args and args[0] in cli_plan.COMMANDS:
        return cli_plan.run(args[0], args[1:], _pack_parser())
    if args and args[0] in SUBCOMMANDS:
        return _run_info(args[1:]) if args[0] == "info" else _run_verify(args[1:])
    return _run_pack(args)


def _words(exc: BaseException) -> str:
    """The error's text in packdata's words (its flags, not pack()'s arguments; its command,
    not a call of fastloader.pack: format/not_packed.source_advice)."""
    text = re.sub(r'`fastloader\.pack\("([^"]*)", "([^"]*)"\)`',
                  lambda m: f"`packdata {shlex.join(m.groups())}`", str(exc))
    return cli_words(text, flags(_pack_parser()))


if __name__ == "__main__":
    sys.exit(main())
