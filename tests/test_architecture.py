"""ARCHITECTURE.md stays true: every module, file and folder it names exists, and every stage
and package folder of src/fastloader (loader/'s sub-packages among them) has a section or a
table row. The checker reads the page's text only, so a page with a made-up path fails it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import fastloader

pytestmark = pytest.mark.native_neutral  # reads the page and the tree

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "ARCHITECTURE.md"
# the package as the tests import it: the checkout's src/, or an installed wheel's site-packages
PACKAGE = Path(fastloader.__file__).parent

FILE_SUFFIXES = ("py", "pyi", "cpp", "h", "sh", "md", "txt", "toml", "rst")
_SUFFIX = "|".join(FILE_SUFFIXES)
# `loader/order/sampler.py`, `csrc/jpeg.{h,cpp}`, `csrc/audio_*.cpp`, `docs/*.md`
_FILE = re.compile(rf"^[\w./*-]+\.(?:{_SUFFIX}|\{{[\w,]+\}})$")
# `loader/order/` (a folder)
_FOLDER = re.compile(r"^[\w.-]+(?:/[\w.-]+)*/$")
# `fastloader.loader.factory.paths`, `fastloader.FastLoader`, `fastloader.pack()`
_DOTTED = re.compile(r"^fastloader(?:\.\w+)+$")
# `gpu/device.DeviceStep`: a module and a name in it
_MODULE_NAME = re.compile(r"^(?:[\w]+/)+\w+\.\w+$")
# in a fenced block (the diagram), a path that starts with a top folder
_TOPS = ("csrc", "decode", "format", "pack", "loader", "gpu", "doctor", "tests", "tools",
         "benchmarks", "docs")
_BLOCK_PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(_TOPS)})/[\w./{{}},*-]*[\w/}}*])")
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_SPAN = re.compile(r"`([^`\n]+)`")


def path_tokens(text: str) -> list[str]:
    """Every path-like name on a page, in order, once each: backticked module, file, folder and
    dotted names outside fenced blocks, and the top-folder paths inside them."""
    tokens: list[str] = []
    for block in _FENCE.findall(text):
        tokens += _BLOCK_PATH.findall(block)
    for span in _SPAN.findall(_FENCE.sub("", text)):
        token = span.strip().removesuffix("()")
        if any(rule.match(token) for rule in (_FILE, _FOLDER, _DOTTED, _MODULE_NAME)):
            tokens.append(token)
    return list(dict.fromkeys(tokens))


def expansions(token: str) -> list[str]:
    """A brace form's names (`csrc/jpeg.{h,cpp}` -> csrc/jpeg.h, csrc/jpeg.cpp), else token."""
    found = re.search(r"\{([\w,]+)\}", token)
    if not found:
        return [token]
    head, tail = token[:found.start()], token[found.end():]
    return [name for part in found.group(1).split(",")
            for name in expansions(f"{head}{part}{tail}")]


def _names_in(module: Path, name: str) -> bool:
    return module.is_file() and re.search(rf"\b{re.escape(name)}\b", module.read_text()) is not None


def _extension_built(name: str, repo: Path) -> bool:
    """A compiled module (fastloader._core, fastloader._video) the CMake build declares."""
    cmake = repo / "CMakeLists.txt"
    return cmake.is_file() and re.search(rf"add_module\(\s*{re.escape(name)}\b",
                                         cmake.read_text()) is not None


def _dotted_exists(token: str, package: Path, repo: Path) -> bool:
    """fastloader.a.b: a package or module, or one name its module (or package) defines."""
    here = package
    parts = token.split(".")[1:]
    for i, part in enumerate(parts):
        rest = parts[i + 1:]
        if (here / part / "__init__.py").is_file():
            here = here / part
            continue
        if (here / f"{part}.py").is_file():
            return not rest or (len(rest) == 1 and _names_in(here / f"{part}.py", rest[0]))
        if not rest and here == package and _extension_built(part, repo):
            return True
        return not rest and _names_in(here / "__init__.py", part)
    return True


def _exists(name: str, package: Path, repo: Path) -> bool:
    if name.startswith("fastloader.") and "/" not in name:
        return _dotted_exists(name, package, repo)
    for root in (package, repo):
        if "*" in name:
            if any(root.glob(name)):
                return True
        elif (root / name).exists():
            return True
        elif _MODULE_NAME.match(name) and not name.endswith(tuple(f".{s}" for s in
                                                                  FILE_SUFFIXES)):
            module, _, attr = name.rpartition("/")[2].partition(".")
            if _names_in(root / name.rpartition("/")[0] / f"{module}.py", attr):
                return True
    return False


def missing_paths(text: str, package: Path, repo: Path) -> list[str]:
    """The page's path-like names that name nothing: each looked for under the package, then
    the repository root (every expansion of a brace form)."""
    return [token for token in path_tokens(text)
            if not all(_exists(name, package, repo) for name in expansions(token))]


def package_folders(package: Path) -> list[str]:
    """Every package folder under the package, relative to it (`decode`, `loader/order` ...)."""
    return sorted(str(init.parent.relative_to(package)) for init in package.rglob("__init__.py")
                  if init.parent != package)


def folders_without_a_place(text: str, package: Path) -> list[str]:
    """Package folders that no heading and no table row of the page names."""
    lines = [line for line in text.splitlines() if line.startswith(("#", "|"))]
    return [folder for folder in package_folders(package)
            if not any(f"`{folder}/" in line for line in lines)]


def _page() -> str:
    if not PAGE.is_file():
        pytest.skip(f"ARCHITECTURE.md is not beside tests/ ({REPO}): not run from a checkout")
    return PAGE.read_text()


def test_every_path_the_page_names_exists() -> None:
    text = _page()
    assert len(path_tokens(text)) > 100  # the tables were read
    assert missing_paths(text, PACKAGE, REPO) == []


def test_every_stage_and_loader_sub_package_has_a_place() -> None:
    text = _page()
    folders = package_folders(PACKAGE)
    assert {"decode", "format", "pack", "loader", "gpu", "doctor", "loader/order",
            "loader/factory"} <= set(folders)
    assert folders_without_a_place(text, PACKAGE) == []


def test_the_checker_reports_a_made_up_path() -> None:
    """The checks can fail: made-up names in every form are reported, real ones are not."""
    page = "\n".join([
        "# A page", "",
        "| path | job |", "|---|---|",
        "| `loader/order/sampler.py` | real |",
        "| `loader/nowhere.py` | made up |",
        "| `csrc/jpeg.{h,cpp}` | real |",
        "| `csrc/jpeg.{h,cxx}` | half made up |",
        "",
        "`loader/pipeline/` and `loader/elsewhere/`; `fastloader.loader.factory.paths`,",
        "`fastloader.loader.MOVED`, `fastloader.FastLoader`, `fastloader.loader.nowhere`,",
        "`gpu/device.DeviceStep`, `gpu/device.NoSuchStep`, `docs/*.md`, `docs/*.nothing.md`.",
        "", "```", "SOURCE -> pack/sources/ -> pack/nowhere/ -> format/", "```",
    ])
    assert missing_paths(page, PACKAGE, REPO) == [
        "pack/nowhere/", "loader/nowhere.py", "csrc/jpeg.{h,cxx}", "loader/elsewhere/",
        "fastloader.loader.nowhere", "gpu/device.NoSuchStep", "docs/*.nothing.md"]
    rows = "| `loader/pipeline/producer.py` | x |\n`loader/order/sampler.py` in prose only\n"
    unplaced = folders_without_a_place(rows, PACKAGE)
    assert "loader/order" in unplaced and "loader/pipeline" not in unplaced
