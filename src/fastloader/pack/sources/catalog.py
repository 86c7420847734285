"""Every source pack() and packdata know, registered once each (one line a source; detection
order is each Source's rank, the --source-format choices this order)."""

from __future__ import annotations

from fastloader.pack.sources.formats.audio_folder import AudioFolder
from fastloader.pack.sources.formats.coco import Coco
from fastloader.pack.sources.formats.common_voice import CommonVoice
from fastloader.pack.sources.formats.groups import Files, Tars
from fastloader.pack.sources.formats.image_folder import ImageFolder
from fastloader.pack.sources.formats.librispeech import LibriSpeech
from fastloader.pack.sources.formats.parquet import Parquet
from fastloader.pack.sources.formats.saved_dataset import SavedDataset
from fastloader.pack.sources.formats.table import Table
from fastloader.pack.sources.formats.video_folder import VideoFolder
from fastloader.pack.sources.registry import register

register(ImageFolder())
register(Table("csv"))
register(Table("tsv"))
register(Table("jsonl"))
register(Parquet())
register(Files())
register(Tars())
register(Coco())
register(AudioFolder())
register(VideoFolder())
register(LibriSpeech())
register(CommonVoice())
register(SavedDataset())
