"""Pack options are declared once: every PackOptions field reaches packdata's flags (or is
named as no flag) and plan.json (or is named as run-only), and plan.json's settings are read
back checked."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest

from fastloader.errors import PackError
from fastloader.pack.cli.main import _pack_parser
from fastloader.pack.cli.options import NOT_FLAGS, pack_options
from fastloader.pack.pipeline.options import RUN_ONLY, PackOptions
from fastloader.pack.staging.journal import PLAN_NAME
from fastloader.pack.staging.plan import TaskSettings, read_settings

# flags that make each mapped field differ from its default
_FLAGS = ["--format", "hdf5", "--shard-size", "1M", "--workers", "3", "--max-side", "64",
          "--quality", "80", "--overwrite", "--resume", "--strict", "--skip-bad", "--quiet",
          "--tiles", "--restart-mcus", "7", "--max-file-size", "2M", "--engine", "ray",
          "--ray-address", "auto", "--apply-exif-orientation", "--codec", "coeffs",
          "--skip-space-check"]


def test_every_option_has_a_flag_or_says_why_not() -> None:
    args = _pack_parser().parse_args(["src", "dst.h5", *_FLAGS])
    mapped = pack_options(args)
    default = pack_options(_pack_parser().parse_args(["src", "dst.h5"]))
    for f in fields(PackOptions):
        if f.name in NOT_FLAGS:
            assert getattr(mapped, f.name) == getattr(PackOptions(), f.name), f.name
        else:
            assert getattr(mapped, f.name) != getattr(default, f.name), (
                f"PackOptions.{f.name} has no packdata flag: map it in cli/options.py "
                "pack_options() or name it in NOT_FLAGS")


def test_every_option_reaches_the_plan_or_says_why_not() -> None:
    # every option set away from its default (codec apart: coeffs and tiles contradict)
    written = set(PackOptions(max_side=64, apply_exif_orientation=True, tiles=True)
                  .plan_entries()) | set(PackOptions(codec="coeffs").plan_entries())
    settings = {f.name for f in fields(TaskSettings)}
    for f in fields(PackOptions):
        if f.name not in RUN_ONLY:
            assert f.name in written, (f"PackOptions.{f.name} is not written to plan.json: "
                                       "add it to plan_entries() or name it in RUN_ONLY")
            assert f.name in settings, f"plan.json's {f.name} is not read back by TaskSettings"
    assert written <= settings


def _settings(options: PackOptions) -> dict[str, object]:
    return {"backend": "lmdb", "src": "/data", "classes": ["a"], "shard_files": 65536,
            **options.plan_entries()}


@pytest.mark.parametrize("options", [
    PackOptions(), PackOptions(max_side=32, quality=70, shard_size=5, max_file_size=9),
    pytest.param(PackOptions(tiles=True, restart_mcus=3, apply_exif_orientation=True),
                 marks=pytest.mark.native),
])
def test_plan_round_trip_keeps_every_setting(tmp_path: Path, options: PackOptions) -> None:
    checked = options.checked()
    (tmp_path / PLAN_NAME).write_text(json.dumps(_settings(checked)))
    read = read_settings(tmp_path)
    for name, value in checked.plan_entries().items():
        assert getattr(read, name) == value, name


_TREE_PLAN = {"backend": "lmdb", "classes": ["cat", "dog"], "max_file_size": 268435456,
              "max_side": None, "quality": 90, "shard_files": 65536, "shard_size": 268435456,
              "src": "/data/tree"}
_TABLE_PLAN = {"backend": "hdf5", "fields": [{"name": "image", "kind": "image"}],
               "source": {"kind": "table", "path": "/data/t.csv", "fingerprint": "ab"},
               "shard_files": 65536, "skip_bad": False, "item_keys": True, "quality": 90,
               "max_side": 64, "max_file_size": 268435456, "shard_size": 1024, "codec": "coeffs"}


@pytest.mark.parametrize("old", [_TREE_PLAN, _TABLE_PLAN])
def test_a_plan_json_of_today_still_loads(tmp_path: Path, old: dict[str, object]) -> None:
    """A tree's and a table's plan.json as packdata plan wrote them before the typed round
    trip (no plan_version: format 1), with the run settings beside."""
    (tmp_path / PLAN_NAME).write_text(json.dumps(old))
    (tmp_path / "plan").mkdir()
    (tmp_path / "plan" / "settings.json").write_text('{"overwrite": false, "skip_bad": true}')
    read = read_settings(tmp_path)
    assert (read.backend, read.quality, read.skip_bad) == (old["backend"], 90, True)
    assert read.codec == old.get("codec", "jpeg") and read.fields == old.get("fields")


@pytest.mark.parametrize(("change", "words"), [
    ({"colour": "red"}, "unknown setting 'colour'"),
    ({"quality": "90"}, "setting 'quality' is '90'"),
    ({"skip_bad": 1}, "setting 'skip_bad' is 1"),
    ({"shard_size": True}, "setting 'shard_size' is True"),
    ({"tiles": {"version": "1"}}, "setting 'tiles'"),
    ({"plan_version": 2}, "plan format 2"),
    ({"quality": None}, "setting 'quality' is None"),
])
def test_a_bad_plan_json_is_refused_naming_file_and_key(
        tmp_path: Path, change: dict[str, object], words: str) -> None:
    (tmp_path / PLAN_NAME).write_text(json.dumps(_settings(PackOptions().checked()) | change))
    with pytest.raises(PackError) as caught:
        read_settings(tmp_path)
    assert words in str(caught.value) and str(tmp_path / PLAN_NAME) in str(caught.value)
    assert "packdata plan SRC DST" in str(caught.value)


def test_a_plan_json_missing_a_setting_is_refused(tmp_path: Path) -> None:
    entries = _settings(PackOptions().checked())
    del entries["quality"]
    (tmp_path / PLAN_NAME).write_text(json.dumps(entries))
    with pytest.raises(PackError, match=r"lacks the setting 'quality'.*packdata plan"):
        read_settings(tmp_path)


def test_pack_takes_the_typed_options(tmp_path: Path,
                                      mixed_tree: tuple[Path, dict[str, bytes]]) -> None:
    from fastloader import pack

    made = pack(mixed_tree[0], tmp_path / "a.lmdb", skip_bad=True, max_side=16,
                options=PackOptions(quality=77, workers=1))
    assert (made.options["quality"], made.options["max_side"]) == (77, 16)
    assert json.loads((tmp_path / "a.lmdb" / "manifest.json").read_text())["options"][
        "quality"] == 77
    with pytest.raises(PackError, match=r"unknown pack option.*colour"):
        pack(mixed_tree[0], tmp_path / "b.lmdb", colour=1)
    with pytest.raises(PackError, match="is not a PackOptions"):
        pack(mixed_tree[0], tmp_path / "c.lmdb", options={"quality": 70})  # type: ignore[arg-type]


@pytest.mark.parametrize("steps", [False, True])
def test_packdata_flags_reach_the_dataset(tmp_path: Path, steps: bool,
                                          mixed_tree: tuple[Path, dict[str, bytes]]) -> None:
    """The same flags, through `packdata SRC DST` or plan + shard + commit (plan.json between
    them), give the same options in the manifest."""
    from fastloader.pack.cli.main import main

    dst = tmp_path / "out.lmdb"
    flags = ["--quiet", "--skip-bad", "--max-side", "16", "--quality", "70",
             "--shard-size", "64K", "--max-file-size", "5M", "--apply-exif-orientation"]
    if steps:
        assert main(["plan", str(mixed_tree[0]), str(dst), *flags]) == 0
        assert main(["shard", str(dst), "--range", "0:1000", "--quiet", "--workers", "1"]) == 0
        assert main(["commit", str(dst), "--quiet"]) == 0
    else:
        assert main([str(mixed_tree[0]), str(dst), "--workers", "1", *flags]) == 0
    options = json.loads((dst / "manifest.json").read_text())["options"]
    assert (options["max_side"], options["quality"], options["shard_size"]) == (16, 70, 65536)
    assert options["apply_exif_orientation"] is True
