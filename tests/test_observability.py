"""What the loader tells: skips, autotune decisions and fallbacks on the "fastloader" logger;
the max_skips error budget; producer-thread errors chained to the original with stage and batch.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from fastloader.decode import _native
from fastloader.decode.decode import BatchDecoder
from fastloader.errors import DecodeError, InvalidArgumentError, InvalidTypeError, ProducerError
from fastloader.loader.loader import FastLoader
from fastloader.loader.pipeline.autotune import AutoTuner
from helpers import BAD, TRAIN, damaged

OPTIONS = {"batch_size": 4, "transforms": TRAIN, "device": "cpu", "num_threads": 1}


def run(dataset, **options) -> int:
    with FastLoader(dataset, **{**OPTIONS, **options}) as loader:
        return sum(len(labels) for _, labels in loader)


def test_a_skip_is_logged_naming_the_record(dataset_path: Path, caplog) -> None:
    dataset = damaged(dataset_path, "garbage")
    with caplog.at_level(logging.INFO, logger="fastloader"):
        assert run(dataset, on_error="skip") == len(dataset)
    skips = [r for r in caplog.records if "on_error='skip'" in r.getMessage()]
    assert len(skips) == 1 and skips[0].levelno == logging.WARNING
    assert skips[0].name.startswith("fastloader.") and f"record {BAD}" in skips[0].getMessage()
    assert any("replacement for" in r.getMessage() for r in caplog.records)
    dataset.close()


@pytest.mark.parametrize(("max_skips", "fails"), [(0, True), (1, False), (0.01, True),
                                                  (0.05, False), (None, False)])
def test_max_skips_is_a_count_or_a_fraction_of_the_pass(dataset_path: Path, max_skips,
                                                         fails: bool) -> None:
    # One bad record in a pass of 24: 0.01 * 24 -> 0 allowed, 0.05 * 24 -> 1 allowed.
    dataset = damaged(dataset_path, "garbage")
    if fails:
        with pytest.raises(DecodeError, match=rf"max_skips={max_skips!r}") as caught:
            run(dataset, on_error="skip", max_skips=max_skips)
        message = str(caught.value)
        assert f"record {BAD}" in message and dataset.path(BAD) in message
        assert "stage 'decode'" in message
    else:
        assert run(dataset, on_error="skip", max_skips=max_skips) == len(dataset)
    dataset.close()


def test_bad_max_skips_are_refused(dataset_path: Path) -> None:
    for bad, error in ((-1, InvalidArgumentError), (1.0, InvalidArgumentError),
                       (-0.1, InvalidArgumentError), ("5", InvalidTypeError),
                       (True, InvalidTypeError)):
        with pytest.raises(error, match="max_skips"):
            FastLoader(dataset_path, **OPTIONS, on_error="skip", max_skips=bad)
    with pytest.raises(InvalidArgumentError, match="on_error='skip'"):
        FastLoader(dataset_path, **OPTIONS, max_skips=3)  # on_error="raise": no budget
    # The DALI loader has the same budget now, and the same rule for it.
    with pytest.raises(InvalidArgumentError, match="on_error='skip'"):
        FastLoader(dataset_path, batch_size=4, backend="dali", max_skips=3)


def test_a_reader_crash_reaches_the_caller_chained_with_stage_and_batch(
        dataset_path: Path) -> None:
    dataset = damaged(dataset_path, "garbage")
    good = dataset.record
    crash = RuntimeError("reader crashed")

    def record(i: int, verify: bool = False) -> object:
        if i == BAD:
            raise crash
        return good(i, verify)

    dataset.record = record
    with pytest.raises(ProducerError) as caught:
        run(dataset)
    assert caught.value.__cause__ is crash
    assert isinstance(caught.value, RuntimeError)  # still caught by `except RuntimeError`
    assert f"stage 'read', batch {BAD // 4}" in str(caught.value)
    assert "RuntimeError: reader crashed" in str(caught.value)
    dataset.close()


def test_a_decode_error_keeps_its_type_and_names_stage_and_batch(dataset_path: Path) -> None:
    dataset = damaged(dataset_path, "garbage")
    with pytest.raises(DecodeError) as caught:
        run(dataset)
    assert isinstance(caught.value.__cause__, DecodeError)
    assert f"stage 'decode', batch {BAD // 4}" in str(caught.value)
    dataset.close()


def test_autotune_decisions_are_logged(caplog) -> None:
    tuner = AutoTuner(None, 4, None, 8)
    with caplog.at_level(logging.INFO, logger="fastloader"):
        for _ in range(AutoTuner.max_batches_to_settle(4, 8)):
            if tuner.state == "settled":
                break
            setting = tuner.setting()
            tuner.record_produce(0.001 * 8, 0.0, 8)  # every thread count equally fast
            tuner.record_consume(0.0, 0.1)
            assert setting.threads >= 1
    assert tuner.state == "settled"
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("fastloader")]
    assert any("stepping down" in m for m in messages)
    assert any("settled after" in m and f"on {tuner.threads} decode threads" in m
               for m in messages)


def test_the_pillow_fallback_is_logged(monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    monkeypatch.setenv("FASTLOADER_DISABLE_NATIVE", "1")
    with caplog.at_level(logging.INFO, logger="fastloader"):
        assert BatchDecoder(backend="auto").backend == "pillow"
    assert any("decoding with Pillow" in r.getMessage() and _native.DISABLE_ENV in r.getMessage()
               for r in caplog.records)


def test_pack_logs_each_skipped_file_and_is_silent_by_default(tmp_path: Path, caplog) -> None:
    import subprocess
    import sys

    from fastloader.pack.pipeline.tree import pack
    from treegen import add_broken_files, make_flat_tree

    make_flat_tree(tmp_path / "src", classes=3, per_class=1)
    broken = add_broken_files(tmp_path / "src")
    with caplog.at_level(logging.WARNING, logger="fastloader"):
        pack(tmp_path / "src", tmp_path / "out.lmdb", workers=1, skip_bad=True)
    logged = " ".join(r.getMessage() for r in caplog.records if r.name.startswith("fastloader"))
    assert all(f"skipped {path}" in logged for path in broken)
    # Without logging configured nothing reaches stderr (no print, no last-resort handler).
    code = ("import sys; from fastloader.pack.pipeline.tree import pack; "
            f"pack({str(tmp_path / 'src')!r}, {str(tmp_path / 'again.lmdb')!r}, workers=1, "
            "skip_bad=True)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, check=True)
    assert result.stderr == "" and result.stdout == ""
