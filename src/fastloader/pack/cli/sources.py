"""packdata's options for tables and file groups (--source-format, --image, --label, --root,
--field, --skip-bad)."""

from __future__ import annotations

import argparse
from typing import TypedDict

from fastloader.format import kinds
from fastloader.pack.sources.importers import SOURCE_FORMATS


def parse_field(text: str) -> tuple[str, str | tuple[str, str, tuple[int, ...]]]:
    """'caption:text' -> ('caption', 'text'); 'emb:ndarray:float32:512' and '...:3x-1' give
    ('emb', ('ndarray', 'float32', (512,))): a kind whose bare name does not say it all
    (kinds.Kind.bare: an array's dtype and shape) is declared NAME:KIND:DTYPE:SHAPE."""
    parts = text.split(":")
    simple = [k for k in kinds.names() if isinstance(kinds.get(k).bare(), str)]
    typed = [k for k in kinds.names() if k not in simple]
    if len(parts) == 2 and parts[1] in simple:
        return parts[0], parts[1]
    if len(parts) == 4 and parts[1] in typed:
        try:
            shape = tuple(int(n) for n in parts[3].split("x")) if parts[3] else ()
            return parts[0], (parts[1], parts[2], shape)
        except ValueError:
            pass
    forms = " or ".join(f"NAME:{k}:DTYPE:SHAPE (e.g. emb:{k}:float32:512, seq:{k}:int32:-1)"
                        for k in typed)
    raise argparse.ArgumentTypeError(
        f"{text!r} is not NAME:KIND (KIND one of {', '.join(simple)}) or {forms}")


def add_source_options(parser: argparse.ArgumentParser) -> None:
    """The importer options of `packdata SRC DST`."""
    add = parser.add_argument
    add("--source-format", choices=SOURCE_FORMATS, metavar="KIND",
        help=f"force SRC's kind: {', '.join(SOURCE_FORMATS)} (default: detected)")
    add("--image", metavar="COL", help="table: the image path column (default: path, image, "
        "file or filename)")
    add("--label", metavar="COL", help="table: a column of class names, stored as class ids")
    add("--root", metavar="DIR", help="table or COCO file: the folder image paths are "
        "relative to (default: the table's or file's folder)")
    add("--field", type=parse_field, action="append", metavar="NAME:KIND",
        help="a column's or extension's kind, overriding the inferred one (repeatable)")
    add("--images", metavar="DIR", dest="root", help="COCO file: the folder its file_name "
        "entries are relative to (default: the file's folder; same as --root)")
    add("--skip-empty", action="store_true", help="COCO file: leave out images without "
        "annotations")
    add("--masks", action="store_true", help="COCO file: rasterize the polygons and RLEs into "
        "a semantic 'mask' field (0 background, class + 1, 255 crowd)")
    add("--skip-bad", action="store_true", help="pack the good items and list the bad ones "
        "in skipped.json (file, line or member, field, why) instead of stopping at the first")


class SourceOptions(TypedDict, total=False):
    """pack()'s source keyword arguments, as packdata's options give them."""

    source_format: str
    image: str
    label: str
    root: str
    fields: dict[str, object]
    skip_empty: bool
    masks: bool


def source_options(args: argparse.Namespace) -> SourceOptions:
    """pack()'s keyword arguments from the importer options (--skip-bad, a pack option, is
    mapped with the others in cli/options.py)."""
    options: SourceOptions = {}
    if args.source_format is not None:
        options["source_format"] = args.source_format
    if args.image is not None:
        options["image"] = args.image
    if args.label is not None:
        options["label"] = args.label
    if args.root is not None:
        options["root"] = args.root
    if args.field:
        options["fields"] = dict(args.field)
    if args.skip_empty:
        options["skip_empty"] = True
    if args.masks:
        options["masks"] = True
    return options
