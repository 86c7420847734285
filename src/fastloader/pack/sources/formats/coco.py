"""A COCO instances file (.json): images with boxes, labels and (masks=True) masks."""

from __future__ import annotations

from fastloader.errors import PackError
from fastloader.pack.sources.probe import Probe
from fastloader.pack.sources.registry import Opened, Opening, Source


class Coco(Source):
    """pack/sources/coco.py's importer."""

    name = "coco"
    rank = 50

    def detect(self, probe: Probe) -> bool:
        return not probe.is_dir and probe.suffix == ".json"

    def open(self, src: str, opening: Opening) -> Opened:
        if opening.fields or opening.image or opening.label:
            raise PackError("fields=, image= and label= do not apply to a COCO file: its "
                            "fields are image, boxes, box_labels, iscrowd and image_id.")
        from fastloader.pack.sources.coco import open_coco

        return open_coco(src, opening.root, opening.skip_empty, opening.masks)
