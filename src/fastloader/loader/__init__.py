"""Loading: FastLoader and its loaders, in sub-packages by job, each importing only those below it
(tests/test_layering.py):

    order, pipeline  <-  images  <-  factory  <-  packed, clips, dali, dropin  <-  mix  <-  loader

order: epoch order and resume. pipeline: the one producer, ring, autotune, counters. images:
images' filler and the fields of a batch. factory: FastLoader, its paths and options. packed,
clips, dali, dropin, mix: the loaders. loader.py: the factory with every loader of its own path.

The flat layout's module paths (`fastloader.loader.sampler`, `fastloader.loader.audio` ...) still
import, as the modules they moved to: `MOVED` below is the one table of them.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

# A flat-layout module -> where it lives now. packed, mix, clips, dali and dropin are now
# sub-packages that export their loader class; `remote` is left free for remote workers.
MOVED: dict[str, str] = {
    "sampler": "order.sampler", "epoch_order": "order.epoch_order",
    "shard_shuffle": "order.shard_shuffle", "mix_order": "order.mix_order",
    "duration_batches": "order.duration_batches", "resume": "order.resume",
    "passes": "order.passes",
    "producer": "pipeline.producer", "memory": "pipeline.memory",
    "autotune": "pipeline.autotune", "threads": "pipeline.threads", "stats": "pipeline.stats",
    "skips": "pipeline.skips",
    "image_batches": "images.batches", "collate": "images.collate", "masks": "images.masks",
    "detection": "images.detection", "extra_images": "images.extra_images",
    "batch_transform": "images.batch_transform",
    "base": "factory.base", "interface": "factory.interface", "lifetime": "factory.lifetime",
    "attributes": "factory.attributes", "options": "factory.options",
    "keywords": "factory.keywords", "arguments": "factory.arguments",
    "option_paths": "factory.option_paths", "outputs": "factory.paths",
    "path_choice": "factory.path_choice", "pass_dataset": "factory.pass_dataset",
    "audio_options": "factory.audio_options", "video_options": "factory.video_options",
    "clip_decoding": "clips.decoding", "audio": "clips.audio", "audio_batch": "clips.audio_batch",
    "video": "clips.video", "video_batch": "clips.video_batch",
    "dali_pipeline": "dali.pipeline", "dali_records": "dali.records",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports a flat-layout name as the module it moved to: the same module object, so what
    one name patches or reads, the other sees."""

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        prefix, _, name = fullname.rpartition(".")
        if prefix != __name__ or name not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(f"{__name__}.{MOVED[spec.name.rpartition('.')[2]]}")

    def exec_module(self, module: ModuleType) -> None:
        """The module it moved to ran when create_module imported it."""


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.insert(0, _MovedModules())
