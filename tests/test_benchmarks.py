"""Smoke tests of the benchmark suite: generator, harness statistics, plot, demo table."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

import baseline  # noqa: E402
import bench_loader  # noqa: E402
import demo  # noqa: E402
import harness  # noqa: E402
import make_images  # noqa: E402
import plot  # noqa: E402


def test_jpeg_bytes_are_deterministic_and_photo_sized() -> None:
    first, width, height = make_images.jpeg_bytes(7)
    again, _, _ = make_images.jpeg_bytes(7)
    other, _, _ = make_images.jpeg_bytes(8)
    assert first == again
    assert first != other
    assert first[:2] == b"\xff\xd8"
    assert 300 <= width <= 800 and 300 <= height <= 800
    # Photo-like content at quality 90 lands near real photos, far from flat or white noise.
    kb_per_megapixel = len(first) / 1000 / (width * height / 1e6)
    assert 250 < kb_per_megapixel < 1200


def test_generate_tree_is_reproducible_and_reports_stats(tmp_path: Path) -> None:
    records = make_images.generate(tmp_path / "a", count=6, classes=2, seed=3, workers=1)
    make_images.generate(tmp_path / "b", count=6, classes=2, seed=3, workers=1)
    files_a = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*.jpg"))
    files_b = sorted(p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*.jpg"))
    assert files_a == files_b and len(files_a) == 6
    assert {p.parts[0] for p in files_a} == {"class_000", "class_001"}
    for rel in files_a:
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes()
    stats = make_images.size_stats(records)
    assert stats["count"] == 6
    dims = stats["dimensions"]
    assert isinstance(dims, dict) and sum(dims.values()) == 6
    text = make_images.format_stats(stats)
    assert "images: 6" in text and "mean" in text


def test_ensure_tree_reuses_and_refuses_foreign_folders(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    assert make_images.ensure_tree(tree, 2, classes=1) is True
    assert make_images.ensure_tree(tree, 2, classes=1) is False
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("user data")
    with pytest.raises(FileExistsError):
        make_images.ensure_tree(foreign, 2)
    assert (foreign / "keep.txt").exists()


def test_image_sizes_follow_imagenet_shares() -> None:
    rng = np.random.default_rng(0)
    sizes = [make_images.image_size(rng) for _ in range(4000)]
    share = sizes.count((500, 375)) / len(sizes)
    assert 0.40 < share < 0.50
    assert all(min(s) >= 300 and max(s) <= 800 for s in sizes)


def test_summarize_median_and_spread() -> None:
    s = harness.summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (s["median"], s["min"], s["max"], s["q1"], s["q3"], s["n"]) == (3, 1, 5, 2, 4, 5)
    assert harness.summarize([2.5])["median"] == 2.5
    assert harness.spread_text(s) == "3 (1-5)"
    with pytest.raises(ValueError):
        harness.summarize([])


def _burn_cpu(seconds: float) -> float:
    """Spin until this process has used `seconds` of CPU time (not wall time: on a loaded
    machine the wall clock runs on while we wait for a core); return the CPU time used."""
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass
    return time.process_time() - start


def test_monitor_counts_cpu_and_child_memory() -> None:
    child = "import time; b = bytearray(80 * 2**20); b[::4096] = b'x' * len(b[::4096]); " \
            "time.sleep(0.6)"
    with harness.TreeMonitor(interval_s=0.02) as monitor:
        proc = subprocess.Popen([sys.executable, "-c", child])
        burnt = _burn_cpu(0.3)  # busy: this CPU time must show up
        proc.wait()
    usage = monitor.usage
    assert usage.cpu_s >= burnt * 0.95
    assert usage.peak_processes >= 2
    assert usage.peak_rss_bytes - usage.start_rss_bytes > 60 * 2**20


def test_monitor_leaves_out_what_a_child_burnt_before_the_run() -> None:
    # a previous row's workers, reaped during this run: their earlier CPU is not this run's
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass\n" \
           "import sys; sys.stdin.read()"
    proc = subprocess.Popen([sys.executable, "-c", burn], stdin=subprocess.PIPE)
    child = harness.psutil.Process(proc.pid)
    # /proc counts CPU in clock ticks (truncated), so the child's 0.4 s of process_time can
    # read as 0.39 for good: wait for most of it, and never past a deadline.
    deadline = time.monotonic() + 60
    while sum(child.cpu_times()[:2]) < 0.35:
        assert time.monotonic() < deadline, "the child did not burn its CPU in 60 s"
        time.sleep(0.02)
    with harness.TreeMonitor(poll=False) as monitor:
        proc.communicate(b"")  # it exits and is reaped inside the run
    assert monitor.usage.cpu_s < 0.2


def test_unpolled_monitor_still_counts_cpu_and_takes_polled_peaks() -> None:
    with harness.TreeMonitor(poll=False) as monitor:
        burnt = _burn_cpu(0.2)
    assert monitor.usage.cpu_s >= burnt * 0.95
    polled = harness.Usage(peak_rss_bytes=10 * 2**40, peak_pss_bytes=2**40, peak_processes=5)
    merged = harness._with_peaks(monitor.usage, polled)
    assert merged.peak_rss_bytes == 10 * 2**40 and merged.peak_processes == 5
    assert merged.cpu_s == monitor.usage.cpu_s


class FakeClock:
    """A clock that reads what the test sets: timing bookkeeping without real time."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_timed_iteration_skips_warmup_and_times_first_batch() -> None:
    clock = FakeClock()

    def batches() -> Iterator[list[int]]:
        clock.now += 5.0  # slow start: must land in time-to-first-batch, not in the rate
        for _ in range(6):
            clock.now += 0.5
            yield [0] * 10

    run = harness.timed_iteration(batches, len, images=30, warmup_batches=2, clock=clock)
    assert run.images == 30 and run.total_images == 50
    assert run.first_batch_s == pytest.approx(5.5)  # start-up + the first batch
    assert run.seconds == pytest.approx(3 * 0.5)  # batches 3, 4, 5 after the warm-up


def test_run_interleaved_alternates_configs() -> None:
    order: list[str] = []

    def make(name: str) -> Callable[[], harness.RunResult]:
        def fn() -> harness.RunResult:
            order.append(name)
            return harness.RunResult(10, 0.1, 10, 0.01)

        return fn

    passes: list[tuple[str, str]] = []
    results = harness.run_interleaved({"a": make("a"), "b": make("b")}, repeats=3,
                                      on_pass=lambda stage, name: passes.append((stage, name)))
    assert passes == [("warm-up", "a"), ("warm-up", "b"), ("memory", "a"), ("memory", "b")]
    # warm-up, three timed rounds (in round_order), the polled memory pass
    rounds = [name for k in range(3) for name in harness.round_order(["a", "b"], k)]
    assert order == ["a", "b", *rounds, "a", "b"]
    assert len(results["a"]) == 3
    row = harness.summary_row("a", results["a"])
    assert row["img_per_s"]["median"] == pytest.approx(100)
    assert row["first_batch_s"]["median"] == pytest.approx(0.01)


def test_round_order_gives_each_row_different_neighbours() -> None:
    names = ["a", "b", "c", "d"]
    rounds = [harness.round_order(names, k) for k in range(8)]
    assert rounds[0] == names and all(sorted(r) == names for r in rounds)
    assert rounds == [harness.round_order(names, k) for k in range(8)]  # reproducible
    before_a = {r[r.index("a") - 1] for r in rounds if r.index("a") > 0}
    assert len(before_a) >= 2  # a rotation would always put "d" before "a"


def test_paired_speedups_divide_within_each_round() -> None:
    # The machine halves its speed in round 2: the median of the two medians' ratio would
    # mix rounds, the paired ratio stays at the true 3x in every round.
    usage = harness.Usage()
    results = {
        "DataLoader workers=2": [(harness.RunResult(100, 1.0, 100), usage),
                                 (harness.RunResult(50, 1.0, 50), usage)],
        "FastLoader LMDB": [(harness.RunResult(300, 1.0, 300), usage),
                            (harness.RunResult(150, 1.0, 150), usage)],
    }
    paired = bench_loader.paired_speedups(results, "DataLoader workers=2")
    assert paired["FastLoader LMDB"]["median"] == pytest.approx(3.0)
    assert paired["FastLoader LMDB"]["min"] == pytest.approx(3.0)
    assert paired["DataLoader workers=2"]["max"] == pytest.approx(1.0)


def _rows() -> list[dict]:
    def summary(name: str, rate: float) -> dict:
        s = harness.summarize([rate * 0.9, rate, rate * 1.1])
        return {"kind": "summary", "name": name, "img_per_s": s, "peak_rss_mb": 500.0,
                "peak_pss_mb": 400.0}

    return [summary("DataLoader workers=2", 100), summary("DataLoader workers=3", 120),
            summary("FastLoader LMDB", 360)]


def test_plot_writes_png_from_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "loader.jsonl"
    with harness.JsonlWriter(path, "loader") as writer:
        for row in _rows():
            writer.write(row)
    records = harness.read_jsonl(path)
    assert records[0]["kind"] == "env" and records[0]["benchmark"] == "loader"
    png = plot.plot(records, tmp_path / "loader.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError):
        plot.plot(records[:1], tmp_path / "empty.png")


def test_demo_table_shows_speedup_against_best_dataloader() -> None:
    rows = _rows()
    text = demo.demo_table(rows)
    lines = text.splitlines()
    assert lines[0].startswith("| loader")
    assert len({len(line) for line in lines}) == 1  # columns padded to one width
    assert "3.00x" in lines[-1] and "360 (324-396)" in lines[-1]
    assert "1.00x  <- best DataLoader" in lines[3]
    # torchvision is not what the baseline runs: the rows name baseline.py's transforms
    assert "DataLoader (PIL + baseline.py transforms) workers=3" in lines[3]
    assert "3.00x" in demo.headline(rows) and "workers=3" in demo.headline(rows)
    with pytest.raises(ValueError):
        demo.demo_table(rows[2:])


def test_torchvision_style_crop_params_stay_in_bounds() -> None:
    import torch

    torch.manual_seed(0)
    for height, width in [(375, 500), (500, 333), (10, 400), (1, 1)]:
        for _ in range(50):
            top, left, h, w = baseline.rrc_params(height, width)
            assert 0 < h <= height and 0 < w <= width
            assert 0 <= top <= height - h and 0 <= left <= width - w
    tensor = baseline.train_transform(32)(
        __import__("PIL.Image", fromlist=["Image"]).new("RGB", (50, 40), (255, 0, 0))
    )
    assert tuple(tensor.shape) == (3, 32, 32)
    assert tensor[0].mean().item() == pytest.approx((1 - 0.485) / 0.229, abs=1e-4)
