"""fastloader.pack(): one entry for every source: an ImageFolder tree, a table (Parquet: a
Hugging Face split's files too), WebDataset-style file groups (a folder or .tar shards), a
Hugging Face `datasets` Dataset, or Python samples."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from fastloader.errors import PackError
from fastloader.format.fields import FieldSpec
from fastloader.format.manifest import Manifest
from fastloader.pack.pipeline.options import PackOptions, refuse_inside
from fastloader.pack.pipeline.samples import pack_samples
from fastloader.pack.sources import hf_dataset, importers
from fastloader.pack.sources.types import Description, FieldKinds, Sample


def pack(
    src: object,
    dst: str | os.PathLike[str],
    *,
    fields: FieldKinds | None = None,
    source_format: str | None = None,
    image: str | None = None,
    label: str | None = None,
    root: str | os.PathLike[str] | None = None,
    skip_bad: bool = False,
    skip_empty: bool = False,
    masks: bool = False,
    pil_format: str = "png",
    options: PackOptions | None = None,
    **option_values: Any,
) -> Manifest:
    """Pack src into the dataset folder dst (NAME.lmdb or NAME.h5), atomically.

    src is an ImageFolder tree (image + label: its class folders, sorted), a table
    (.csv, .tsv, .jsonl, .parquet; Parquet also as a brace pattern of files or a folder of one
    split's files, as the Hugging Face Hub stores them: train-00000-of-00042.parquet ...),
    WebDataset-style files grouped by basename (a folder, a .tar, or a brace pattern of .tar
    shards), a speech corpus's folder or table (LibriSpeech, Common Voice, class folders of
    clips), a `datasets` save_to_disk folder, a Hugging Face `datasets` Dataset or
    IterableDataset (one split: a DatasetDict is
    refused, naming its splits), or Python samples: a sequence or map-style dataset of dicts
    (read by index in parallel workers) or any iterable of dicts (in order). Each makes a
    format v2 dataset with declared fields (docs/fields.md).

    A Parquet file written by `datasets` and a Dataset take their fields from their features:
    Image -> image (its stored bytes, never decoded or re-encoded), ClassLabel -> int with its
    class names, Value(string) -> text, Value(int*, bool) -> int, Value(float*) -> float,
    List/Sequence of numbers and ArrayND -> ndarray, other lists and dicts -> json
    (fastloader.pack.sources.hf_features). PIL images (in Python samples, from any source)
    are encoded once, as PNG (lossless) unless pil_format="jpeg" (at `quality`); the
    "fastloader" logger says so.

    Args:
        src: the source (see above).
        dst: the dataset folder to create.
        fields: Python samples: name -> kind ("image", "int", "float", "text", "bytes",
            "json", ("ndarray", DTYPE, SHAPE) with -1 for variable dims, ("int", CLASSES),
            ("boxes", PER_BOX_FIELDS): float32 [k, 4] XYXY source-pixel boxes, "mask": a
            uint8 [H, W] label image the size of the first image field, given as an array,
            PNG bytes or a PNG path).
            Tables, file groups and Datasets: kinds that override the inferred ones (a
            column of the table or Dataset -> kind).
        source_format: force the source kind: "imagefolder", "csv", "tsv", "jsonl",
            "parquet", "files" (a folder of file groups), "tar", "coco", "audiofolder"
            (class folders of clips), "videofolder" (class folders of videos: video,
            label), "librispeech" (audio, text, speaker, chapter),
            "commonvoice" (a split's .tsv: audio = clips/PATH, text = sentence) or
            "savedataset" (a `datasets` save_to_disk folder); None: detected (every
            registered source: fastloader.pack.sources.catalog).
        image: tables: the image column (default: path, image, file or filename; Parquet:
            else its first Image column); a Dataset: which Image column is the records.
        label: tables: a column of class names, turned into class ids (sorted names).
        root: tables and COCO files: the folder image paths (COCO: file_name entries) are
            relative to (default: the table's or file's folder).
        skip_bad: every source: pack the items that are fine and list the others (why,
            where) in skipped.json (and a v2 manifest's stats), instead of stopping at the
            first bad one (the default; strict=True says it explicitly, and contradicts
            skip_bad).
        skip_empty: COCO files: leave out images without annotations (kept by default,
            with empty boxes).
        masks: COCO files: rasterize each image's polygons and RLEs into a `mask` field
            (uint8 [H, W]: 0 background, box_labels id + 1, 255 crowd regions).
        pil_format: how PIL images are stored: "png" (lossless, the default) or "jpeg" (at
            the `quality` option, 90 unless given).
        options: the pack options as one PackOptions (what packdata passes); the keyword
            options below, and skip_bad=True, are set on top of it.
        **option_values: format, shard_size, workers, max_side, quality, overwrite, quiet,
            progress, max_file_size, engine ("local" or "ray": one task per shard, the same
            dataset either way; Python samples go to Ray pickled, plain iterables are
            refused), ray_address, resume (Python samples: those read by index, each finished
            shard's samples read again and compared by key; a plain iterable is refused),
            storage_options (fsspec's, for a URL dst: s3://..., gs://...; every
            shard task uploads its part there), strict, tiles and restart_mcus (the records'
            image field repacked as restart tiles; see fastloader.pack.pipeline.tree.pack),
            codec: "jpeg" (default: the bytes as they are), "tiles" (= tiles=True) or
            "coeffs" (every source: each JPEG record encoded as a coeffs record in the
            pack's workers; see fastloader.pack.pipeline.options.PackOptions),
            skip_space_check (pack even when the output's estimate is clearly larger than
            the free space where dst goes).
            Shards of an importer's
            samples are cut by their image sizes (shard_size bytes); Python samples by count:
            shard_samples samples a shard (default shard_size / 128 KiB, i.e. 2048 for
            256 MiB).

    Returns:
        Manifest: what was written (also in dst/manifest.json).

    Raises:
        PackError: a bad source or destination, or (skip_bad=False) a bad item: the message
            names the file, the line or member, and the field.
        InvalidArgumentError: an option or a field declaration is invalid.
        PackDiskFullError: (a PackError) the disk where dst goes is too small for the
            estimate (refused before anything is written), or filled mid-way; its folder,
            needed and free say by how much, and kept whether resume=True finishes the pack
            from the finished shards once there is room.
    """
    base = PackOptions() if options is None else options
    if not isinstance(base, PackOptions):
        raise PackError(f"options={options!r} is not a PackOptions; pass "
                        "fastloader.pack.pipeline.options.PackOptions(...) or keywords.")
    packing = base.with_values(option_values, skip_bad)
    path = src if isinstance(src, (str, os.PathLike)) else None
    kind = None if path is None else importers.detect(path, source_format)
    if skip_empty and kind != "coco":
        raise PackError("skip_empty=True applies to COCO files only.")
    if masks and kind != "coco":
        raise PackError("masks=True applies to COCO files only; a table or file groups "
                        "take a mask column or a .mask.png member instead.")
    if pil_format != "png" and (kind is not None or hf_dataset.is_hf_dataset(src)):
        raise PackError(f"pil_format={pil_format!r} applies to PIL images in Python samples; "
                        "this source's images are stored as the bytes it holds.")
    checked = packing.checked()
    if kind is None and hf_dataset.is_hf_dataset(src):
        samples, specs = hf_dataset.dataset_samples(src, fields, image, label, root)
        return pack_samples(samples, dst, specs, checked)
    if path is None or kind is None:
        given = hf_dataset.with_pil_format(src, pil_format, checked.quality)
        # fields=None reaches parse_fields, which says fields= is needed
        return pack_samples(given, dst, fields, checked)
    refuse_inside(path, dst)
    opener: importers.OpenerArgs = {"fields": fields, "image": image, "label": label,
                                    "root": root, "skip_empty": skip_empty, "masks": masks}
    samples, specs, source, reopen = _importer(path, kind, opener, checked)
    return pack_samples(samples, dst, specs, checked, source=source, reopen=reopen)


def _importer(src: str | os.PathLike[str], kind: str, opener: importers.OpenerArgs,
              options: PackOptions
              ) -> tuple[Iterable[Sample], list[FieldSpec], Description, Description | None]:
    """(samples, specs, source, reopen description) of an importer's source, opened by its
    absolute path, as a shard task reopens it (the same fingerprint)."""
    reopen = importers.reopen_description(src, kind, **opener)
    samples, specs, source = importers.open_source(
        reopen["src"] if reopen else src, kind, **opener,
        storage_options=options.storage_options, max_file_size=options.max_file_size)
    return samples, specs, source, reopen
