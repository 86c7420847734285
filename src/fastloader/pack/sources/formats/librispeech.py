"""LibriSpeech (and its layout: SPEAKER/CHAPTER/SPEAKER-CHAPTER-UTT.flac beside
SPEAKER-CHAPTER.trans.txt): each clip with its transcript line, speaker and chapter ids.
Read from the corpus root (when it holds one split), a split folder (dev-clean) or a
speaker's or chapter's folder."""

from __future__ import annotations

from pathlib import Path

from fastloader.errors import PackError
from fastloader.format.fields import FieldSpec
from fastloader.pack.sources.probe import Probe
from fastloader.pack.sources.registry import Opened, Opening, Source
from fastloader.pack.sources.types import Sample
from fastloader.pack.sources.values import ERROR_KEY, PATH_KEY, WHERE_KEY

TRANS = ".trans.txt"
CLIP = ".flac"
RECIPE = ('source_format="librispeech" (a LibriSpeech folder: its fields are audio, text, '
          "speaker and chapter)")


def is_librispeech(probe: Probe) -> bool:
    """A folder whose first files hold a SPEAKER-CHAPTER.trans.txt transcript."""
    return probe.is_dir and any(f.name.endswith(TRANS) for f in probe.files)


class LibriSpeech(Source):
    """audio (the .flac as stored), text (its transcript line), speaker and chapter (ints)."""

    name = "librispeech"
    rank = 25

    def detect(self, probe: Probe) -> bool:
        return is_librispeech(probe)

    def open(self, src: str, opening: Opening) -> Opened:
        if opening.fields or opening.image or opening.label or opening.root:
            raise PackError("fields=, image=, label= and root= do not apply to a LibriSpeech "
                            "folder: its fields are audio, text, speaker and chapter.")
        top = Path(src).expanduser().absolute()
        transcripts = sorted(top.rglob("*" + TRANS))
        if not top.is_dir() or not transcripts:
            raise PackError(f"{top}: no SPEAKER-CHAPTER{TRANS} transcripts; a LibriSpeech "
                            "folder holds SPEAKER/CHAPTER/ folders of .flac clips and their "
                            "transcripts.")
        _one_split(top, transcripts)
        samples = [s for trans in transcripts for s in _chapter(top, trans)]
        specs = [FieldSpec("audio", "audio"), FieldSpec("text", "text"),
                 FieldSpec("speaker", "int"), FieldSpec("chapter", "int")]
        return samples, specs, {"kind": self.name, "path": str(top)}

    def files(self, path: str) -> list[Path]:
        return sorted(p for p in Path(path).rglob("*") if p.is_file())


def _one_split(top: Path, transcripts: list[Path]) -> None:
    """The corpus root of several splits is refused, naming them: a pack is one split."""
    splits = sorted({t.relative_to(top).parts[0] for t in transcripts
                     if len(t.relative_to(top).parts) >= 4})
    if len(splits) > 1:
        raise PackError(f"{top} holds the LibriSpeech splits {', '.join(splits)}; pack one "
                        f"split at a time, e.g. {top / splits[0]}.")


def _chapter(top: Path, trans: Path) -> list[Sample]:
    """One chapter's samples: a line of its transcript each (a missing clip is a bad
    sample), then its clips that no line names (bad samples too: never dropped unsaid)."""
    samples: list[Sample] = []
    named: set[str] = set()
    for number, line in enumerate(trans.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        utterance, _, text = line.strip().partition(" ")
        where = f"{trans} line {number}"
        clip = trans.parent / (utterance + CLIP)
        named.add(clip.name)
        ids = utterance.split("-")
        if len(ids) != 3 or not all(i.isdigit() for i in ids):
            samples.append({WHERE_KEY: where, ERROR_KEY: f"{utterance!r} is not "
                            "SPEAKER-CHAPTER-UTTERANCE"})
        elif not clip.is_file():
            samples.append({WHERE_KEY: where, ERROR_KEY: f"names {clip.name}, which is not "
                            f"in {trans.parent}"})
        else:
            samples.append({WHERE_KEY: where, PATH_KEY: clip.relative_to(top).as_posix(),
                            "audio": str(clip), "text": text, "speaker": int(ids[0]),
                            "chapter": int(ids[1])})
    for clip in sorted(trans.parent.glob("*" + CLIP)):
        if clip.name not in named:
            samples.append({WHERE_KEY: str(clip), ERROR_KEY: f"has no line in {trans.name}"})
    return samples


def refuse_as(src: str, kind: str) -> None:
    """A LibriSpeech folder forced to be read as another kind (file groups, class folders of
    clips) would lose its transcripts: refused, naming its own source format."""
    if is_librispeech(Probe(src)):
        raise PackError(f"{src} is a LibriSpeech folder (SPEAKER/CHAPTER/*.flac beside "
                        f"SPEAKER-CHAPTER{TRANS} transcripts): read as {kind} it would lose "
                        f"its transcripts; pack it with {RECIPE}, or let it be detected.")
