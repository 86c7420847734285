"""Every ```python and ```bash block of README.md and docs/*.md runs, as written, on data made here.

A block may be preceded by a marker comment, `<!-- snippet: WORDS -->`, whose `;`-separated
parts are `fixture NAME ...` (what the block's folder holds before it runs, see FIXTURES),
`skip REASON` (not runnable here: a cluster, a wheel) or `xfail REASON` (a known defect, strict).
Bash blocks run under `bash -euo pipefail` in a fresh folder with `packdata` and `fastloader` on
PATH as `python -m fastloader.pack.cli.main` / `python -m fastloader.doctor.doctor`; python
blocks run in a fresh interpreter there. Without CUDA, `device="cuda"` is read as "cpu".
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from audiogen import clip, common_voice, librispeech, nemo_manifest
from helpers import sample_table
from imagegen import encode, make_tree, photo_like

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(
    r"(?:<!-- snippet: (?P<mark>[^\n]*?) -->\n)?^```(?P<lang>[^\n]*)\n(?P<code>.*?)^```$",
    re.S | re.M,
)


pytestmark = pytest.mark.heavy


@dataclass(frozen=True)
class Snippet:
    page: str
    line: int
    lang: str
    code: str
    fixtures: tuple[str, ...]
    skip: str | None
    xfail: str | None


def parse_mark(mark: str | None) -> tuple[tuple[str, ...], str | None, str | None]:
    fixtures: tuple[str, ...] = ()
    skip = xfail = None
    for part in filter(None, (p.strip() for p in (mark or "").split(";"))):
        word, _, rest = part.partition(" ")
        if word == "fixture":
            fixtures = tuple(rest.split())
        elif word == "skip":
            skip = rest
        elif word == "xfail":
            xfail = rest
        else:
            raise ValueError(f"unknown snippet marker {part!r}: use fixture, skip or xfail")
    return fixtures, skip, xfail


def snippets() -> list[Snippet]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for m in FENCE.finditer(text):
            fixtures, skip, xfail = parse_mark(m["mark"])
            line = text.count("\n", 0, m.start("lang")) + 1
            found.append(Snippet(page.relative_to(REPO).as_posix(), line, m["lang"].strip(),
                                 m["code"], fixtures, skip, xfail))
    return found


# ---- fixtures: each writes what a block reads into its folder ------------------------------

def _jpeg(seed: int, h: int = 40, w: int = 56) -> bytes:
    return encode(photo_like(h, w, seed))


def _pack_cli(*args: str, cwd: Path) -> None:
    subprocess.run([sys.executable, "-m", "fastloader.pack.cli.main", *args, "--quiet"],
                   cwd=cwd, check=True, capture_output=True)


def fx_images(cwd: Path) -> None:
    make_tree(cwd / "images", classes=2, per_class=4)
    make_tree(cwd / "new_images", classes=2, per_class=2, seed=5)


def fx_packed(cwd: Path) -> None:
    if not (cwd / "images").exists():
        fx_images(cwd)
    _pack_cli("images", "train.lmdb", cwd=cwd)


def fx_parts(cwd: Path) -> None:
    for name, seed in (("part1", 1), ("part2", 2)):
        make_tree(cwd / f"{name}_src", classes=2, per_class=2, seed=seed)
        _pack_cli(f"{name}_src", f"{name}.lmdb", cwd=cwd)


def fx_my_dataset(cwd: Path) -> str:
    return ("import torch\nmy_dataset = torch.utils.data.TensorDataset("
            "torch.randn(16, 3, 8, 8), torch.arange(16))\nimport fastloader\n")


def fx_table(cwd: Path) -> None:
    sample_table(cwd, n=6)
    (cwd / "t.csv").rename(cwd / "labels.csv")


def _tar(path: Path, groups: dict[str, dict[str, bytes]], mode: str = "w") -> None:
    with tarfile.open(path, mode) as tar:
        for key, members in groups.items():
            for ext, data in members.items():
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def fx_tars(cwd: Path) -> None:
    (cwd / "shards").mkdir()
    (cwd / "samples").mkdir()
    for i in range(10):
        groups = {f"s{i}_{k}": {"jpg": _jpeg(i * 2 + k), "cls": str(k).encode(),
                                "txt": f"caption {i} {k}".encode()} for k in range(2)}
        _tar(cwd / "shards" / f"data-{i:03d}.tar", groups)
        _tar(cwd / "shards" / f"data-{i:03d}.tgz", groups, "w:gz")
        for key, members in groups.items():
            for ext, data in members.items():
                (cwd / "samples" / f"{key}.{ext}").write_bytes(data)


def fx_s3(cwd: Path) -> None:
    """Needs the `s3` pytest fixture (a moto server, bucket `bucket`): tars and a tree in it."""
    import fsspec

    fs = fsspec.filesystem("s3")
    for i in range(100):
        buf = cwd / "_tmp.tar"
        _tar(buf, {f"u{i}": {"jpg": _jpeg(i), "cls": b"0"}})
        fs.put_file(str(buf), f"bucket/train-{i:06d}.tar")
        buf.unlink()


def fx_s3packed(cwd: Path) -> None:
    from servers import upload_folder

    fx_packed(cwd)
    upload_folder(cwd / "train.lmdb", "s3://bucket/train.lmdb")


def fx_mix(cwd: Path) -> None:
    from servers import upload_folder

    make_tree(cwd / "web_src", classes=2, per_class=3, seed=1)
    make_tree(cwd / "books_src", classes=3, per_class=2, seed=2)
    _pack_cli("web_src", "web.lmdb", cwd=cwd)
    _pack_cli("books_src", "books.lmdb", cwd=cwd)
    upload_folder(cwd / "books.lmdb", "s3://bucket/books.lmdb")


SAMPLE_KEYS = {
    "fields": ("image", "label", "caption", "emb", "tags"),
    "boxes": ("image", "boxes", "box_labels", "iscrowd"),
    "masks": ("image", "mask"),
}


def fx_samples(cwd: Path, which: str) -> str:
    """`samples`: six dicts holding the fields one example of the fields page declares."""
    rng = np.random.default_rng(0)
    samples = []
    for i in range(6):
        full = {
            "image": _jpeg(i, 48, 64), "label": i % 3, "caption": f"a photo {i}",
            "emb": rng.standard_normal(512).astype(np.float32),
            "tags": rng.integers(0, 1000, size=i % 3 + 1),
            "boxes": np.array([[4, 4, 30, 40], [10, 8, 50, 44]], np.float32),
            "box_labels": np.array([1, 2]), "iscrowd": np.array([0, 1], np.uint8),
            "mask": rng.integers(0, 4, size=(48, 64)).astype(np.uint8),
        }
        samples.append({key: full[key] for key in SAMPLE_KEYS[which]})
    np.save(cwd / "_samples.npy", np.array(samples, dtype=object), allow_pickle=True)
    return ("import numpy as np\nimport fastloader\n"
            "samples = list(np.load('_samples.npy', allow_pickle=True))\n")


def fx_parquet(cwd: Path) -> None:
    """A split's Parquet files as the Hub stores them, written by `datasets` itself."""
    import datasets

    (cwd / "data" / "train").mkdir(parents=True)
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    for i in range(42):
        rows = {"image": [{"bytes": _jpeg(i), "path": f"{i}.jpg"}], "label": [i % 2]}
        part = datasets.Dataset.from_dict(rows, features=features)
        part.to_parquet(str(cwd / "data" / f"train-{i:05d}-of-00042.parquet"))
        if i < 3:
            part.to_parquet(str(cwd / "data" / "train" / f"train-{i:05d}-of-00003.parquet"))


def fx_audio(cwd: Path) -> None:
    (cwd / "clips").mkdir()
    for k in (1, 2):
        (cwd / "clips" / f"{k:04d}.flac").write_bytes(clip(16000, 0.5, seed=k))
    lines = [json.dumps({"audio_filepath": f"clips/{k:04d}.flac", "duration": 0.5,
                         "text": f"clip {k}"}) for k in (1, 2)]
    (cwd / "train_manifest.jsonl").write_text("\n".join(lines) + "\n")
    (cwd / "shards").mkdir()
    for i in range(64):
        _tar(cwd / "shards" / f"train-{i:03d}.tar",
             {f"c{i}": {"flac": clip(16000, 0.3, seed=i), "txt": f"clip {i}".encode()}})
    for word in ("yes", "no"):
        (cwd / "speech_commands" / word).mkdir(parents=True)
        for k in range(2):
            (cwd / "speech_commands" / word / f"{k}.wav").write_bytes(
                clip(16000, 0.4, fmt="wav", seed=k))


def fx_speech(cwd: Path) -> None:
    """The speech corpora of docs/speech.md in their own layouts, and a save_to_disk folder."""
    import datasets

    librispeech(cwd / "LibriSpeech" / "dev-clean", {84: [121123], 174: [50561]})
    common_voice(cwd / "cv-corpus" / "en")
    nemo_manifest(cwd)
    for word in ("yes", "no"):
        (cwd / "speech_commands" / word).mkdir(parents=True)
        for k in range(2):
            (cwd / "speech_commands" / word / f"{k}.wav").write_bytes(
                clip(16000, 0.4, fmt="wav", seed=k))
    split = datasets.Dataset.from_dict(  # Audio()'s own storage: {bytes, path} structs
        {"audio": [{"bytes": clip(16000, 0.3, seed=k), "path": f"{k}.flac"} for k in (1, 2)],
         "text": ["one", "two"]}).cast_column("audio", datasets.Audio(decode=False))
    datasets.DatasetDict({"train": split}).save_to_disk(str(cwd / "saved"))


def fx_video(cwd: Path) -> None:
    """Kinetics-style class folders of MP4s, a caption table over them, WebDataset tars."""
    pytest.importorskip("av")
    from videogen import make_clip

    rows = ["video,caption"]
    for label, name in enumerate(("archery", "bowling")):
        folder = cwd / "kinetics" / "train" / name
        folder.mkdir(parents=True)
        for k in range(2):
            data = make_clip(frames=20 + 4 * k + label, width=64, height=48)
            (folder / f"{k}.mp4").write_bytes(data)
            rows.append(f"kinetics/train/{name}/{k}.mp4,{name} {k}")
    (cwd / "captions.csv").write_text("\n".join(rows) + "\n")
    (cwd / "shards").mkdir()
    for i in range(4):
        _tar(cwd / "shards" / f"clips-{i:03d}.tar",
             {f"c{i}": {"mp4": make_clip(frames=12 + i, width=32, height=32),
                        "txt": f"clip {i}".encode()}})


def fx_native(cwd: Path) -> None:
    import fastloader

    if not fastloader.native_available():
        pytest.skip("the coeffs codec needs the compiled extension")


FIXTURES: dict[str, Callable[..., str | None]] = {
    "images": fx_images, "packed": fx_packed, "parts": fx_parts, "my_dataset": fx_my_dataset,
    "table": fx_table, "tars": fx_tars, "s3": fx_s3, "s3packed": fx_s3packed, "mix": fx_mix,
    "samples": fx_samples, "parquet": fx_parquet, "audio": fx_audio, "native": fx_native,
    "speech": fx_speech, "video": fx_video,
}
NEEDS_S3 = {"s3", "s3packed", "mix"}


def _wrappers(folder: Path) -> dict[str, str]:
    """PATH with `packdata` and `fastloader` running this interpreter's modules."""
    folder.mkdir()
    for name, module in (("packdata", "fastloader.pack.cli.main"),
                         ("fastloader", "fastloader.doctor.doctor")):
        script = folder / name
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m {module} "$@"\n')
        script.chmod(0o755)
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


ALL = snippets()


def _param(s: Snippet) -> object:
    # A block runs in its own processes, on the extension or on the fallback alike: one that
    # needs the extension says so (`fixture native`); the others check what the page says,
    # which the fallback does not change (its paths have their own tests).
    marks = [pytest.mark.native if "native" in s.fixtures else pytest.mark.native_neutral]
    if s.skip:
        marks.append(pytest.mark.skip(reason=s.skip))
    if s.xfail:
        marks.append(pytest.mark.xfail(strict=True, reason=s.xfail))
    return pytest.param(s, marks=marks, id=f"{s.page}:{s.line}")


@pytest.mark.parametrize("snippet", [_param(s) for s in ALL])
def test_snippet_runs(snippet: Snippet, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    assert snippet.lang in ("python", "bash"), (
        f"{snippet.page}:{snippet.line}: a block must be ```python or ```bash (or marked skip)")
    cwd = tmp_path / "work"
    cwd.mkdir()
    env = _wrappers(tmp_path / "bin")
    if NEEDS_S3 & set(snippet.fixtures):
        request.getfixturevalue("s3")  # moto on loopback; AWS_* set in os.environ for children
        env = {**os.environ, "PATH": env["PATH"]}
    prelude = ""
    for name in snippet.fixtures:  # NAME or NAME:ARG
        fixture, *arg = name.split(":")
        prelude += FIXTURES[fixture](cwd, *arg) or ""
    code = snippet.code
    if not _cuda():
        code = code.replace('device="cuda"', 'device="cpu"')
    if snippet.lang == "bash":
        argv = ["bash", "-euo", "pipefail", "-c", code]
    else:
        argv = [sys.executable, "-c", prelude + code]
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (
        f"{snippet.page}:{snippet.line} failed ({done.returncode}):\n{done.stdout[-3000:]}\n"
        f"{done.stderr[-3000:]}")


def test_every_marker_names_known_fixtures() -> None:
    unknown = {(s.page, s.line, f) for s in ALL for f in s.fixtures
               if f.split(":")[0] not in FIXTURES}
    assert not unknown
    assert len(ALL) >= 20  # the fence pattern still finds the blocks


def test_unrunnable_blocks_stay_rare() -> None:
    skipped = [f"{s.page}:{s.line}" for s in ALL if s.skip]
    assert len(skipped) <= len(ALL) // 4, skipped


def test_readme_is_short_with_two_setup_commands() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) < 250
    setup = [s for s in ALL if s.page == "README.md" and "make " in s.code]
    assert len(setup) == 1
    commands = [line.split("#")[0].strip() for line in setup[0].code.splitlines()]
    assert commands == ["make demo", "make test"]
    assert "\nmake test\n" in (REPO / ".ci" / "run").read_text()


def test_readme_lists_every_extra() -> None:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11+")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    readme = (REPO / "README.md").read_text()
    assert [e for e in extras if f"| `{e}` |" not in readme] == []


def test_readme_links_every_docs_page() -> None:
    readme = (REPO / "README.md").read_text()
    pages = sorted(p.name for p in (REPO / "docs").glob("*.md"))
    assert [p for p in pages if f"(docs/{p})" not in readme] == []
