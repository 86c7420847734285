"""fastloader doctor: verdict on synthetic stages, the CLI report, profile() on a DataLoader."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from fastloader.doctor.doctor import main, run_doctor
from fastloader.doctor.profile import batch_size_of, profile
from fastloader.doctor.verdict import diagnose
from fastloader.errors import InvalidArgumentError

IDLE_2 = {"cores": 2, "cpu_percent": [60.0, 10.0], "cuda": False, "dali": False}
BUSY_2 = {"cores": 2, "cpu_percent": [97.0, 95.0], "cuda": False, "dali": False}


def stage_stats(**overrides: float) -> dict[str, Any]:
    """A FastLoader run that took 100 ms per batch of 64, no simulated step."""
    stats: dict[str, Any] = {
        "batches": 50, "batch_size": 64, "batch_ms": 100.0, "simulated_step_ms": 0.0,
        "wait_ms_median": 90.0, "wait_ms_p90": 95.0, "wait_fraction": 0.9,
        "read_ms": 5.0, "plan_ms": 1.0, "decode_ms": 90.0, "copy_ms": 8.0,
        "slot_wait_fraction": 0.0, "num_threads": 2, "prefetch": 2,
        "source_pixels": 500 * 375, "output_pixels": 224 * 224,
    }
    stats.update(overrides)
    return stats


def test_decode_bound_advice_depends_on_the_machine() -> None:
    verdict = diagnose(stage_stats(num_threads=1), IDLE_2, step_ms=60)
    assert verdict.feeds is False and verdict.bottleneck == "decode"
    assert "CANNOT feed a 60 ms step" in verdict.headline
    tips = " ".join(verdict.advice)
    assert "raise num_threads from 1 to 2" in tips
    assert "about 38 images per batch" in tips  # 60 ms / (100 ms / 64 images)
    assert "--max-side" not in tips  # 500x375 stored: a 448 side would save little
    copy_heavy = diagnose(stage_stats(copy_ms=40.0), BUSY_2, step_ms=60)
    assert any("copy/normalize also takes 40.0 ms" in tip for tip in copy_heavy.advice)
    busy = diagnose(stage_stats(source_pixels=2000 * 1500), {**BUSY_2, "cuda": True}, 60)
    tips = " ".join(busy.advice)
    assert "CPU is the limit" in tips and "packdata --max-side 448" in tips
    assert "backend='dali'" in tips and "pip install nvidia-dali" in tips


def test_remote_workers_named_as_the_limit_with_how_many_more() -> None:
    # two workers, 200 ms a batch each, busy 95%; the producer waited on them 40% of the time;
    # the trainer decodes 2 batches/s itself: a 60 ms step needs 16.7 batches/s, so the workers
    # must give 14.7 of them: ceil(14.7 * 0.2) = 3 workers, one more
    remote = {"remote_workers": 2, "remote_ms": 200.0, "remote_busy_share": 0.95,
              "remote_wait_share": 0.4, "local_batches_per_s": 2.0}
    verdict = diagnose(stage_stats(decode_ms=5.0, **remote), BUSY_2, step_ms=60)
    assert verdict.bottleneck == "remote"
    assert "the 2 remote workers are the limit" in verdict.advice[0]
    assert "about 1 more (Remote(workers=3))" in verdict.advice[0]
    slow_step = diagnose(stage_stats(decode_ms=5.0, **remote), BUSY_2, step_ms=None)
    assert slow_step.bottleneck == "remote" and "5.0 batches/s" in slow_step.advice[0]
    # workers with time to spare, or a producer that never waited for them: not the limit
    for calm in ({"remote_busy_share": 0.5}, {"remote_wait_share": 0.01}):
        assert diagnose(stage_stats(**{**remote, **calm}), BUSY_2, 60).bottleneck == "decode"


def test_read_plan_and_copy_bound() -> None:
    read = diagnose(stage_stats(read_ms=70.0, decode_ms=20.0), BUSY_2, step_ms=60)
    assert read.bottleneck == "read" and "storage" in read.advice[0]
    plan = diagnose(stage_stats(plan_ms=70.0, decode_ms=20.0), BUSY_2, step_ms=60)
    assert plan.bottleneck == "plan" and "batch_size" in plan.advice[0]
    copy = diagnose(stage_stats(copy_ms=98.0, decode_ms=20.0), BUSY_2, step_ms=60)
    assert copy.bottleneck == "copy" and "device='cuda'" in copy.advice[0]


def test_headroom_and_consumer_bound_say_the_loader_is_not_the_bottleneck() -> None:
    fast = diagnose(stage_stats(batch_ms=30.0), IDLE_2, step_ms=120)
    assert fast.feeds is True and fast.bottleneck == "none" and fast.advice == ()
    assert "not the bottleneck" in fast.headline and "75% to spare" in fast.headline
    # A simulated 120 ms step, the consumer hardly waited, the producer sat on a full ring.
    consumer = stage_stats(batch_ms=122.0, simulated_step_ms=120.0, wait_fraction=0.01,
                           wait_ms_median=0.1, wait_ms_p90=0.3, slot_wait_fraction=0.8)
    verdict = diagnose(consumer, IDLE_2, step_ms=120)
    assert verdict.feeds is True and verdict.bottleneck == "step"
    assert "training step" in verdict.advice[0]


def test_starving_simulated_step_and_bursty_waits() -> None:
    stats = stage_stats(batch_ms=150.0, simulated_step_ms=100.0, wait_fraction=0.3,
                        wait_ms_median=2.0, wait_ms_p90=120.0, slot_wait_fraction=0.2)
    verdict = diagnose(stats, IDLE_2, step_ms=100)
    assert verdict.feeds is False and "STARVES" in verdict.headline
    assert any("bursty" in tip and "prefetch" in tip for tip in verdict.advice)
    # The producer was busy 34 of 150 ms (read + plan, 6 ms, overlap the decode on the
    # helper thread: not added), the step still waited 25 ms a batch: bursts.
    bursts = diagnose({**stats, "decode_ms": 34.0, "wait_ms": 25.0, "copy_ms": 5.0,
                       "batches_per_pass": 4}, IDLE_2, step_ms=100)
    assert bursts.bottleneck == "prefetch" and "busy only 23%" in bursts.advice[0]
    assert any("only 4 batches" in tip for tip in bursts.advice)
    copying = diagnose({**stats, "decode_ms": 34.0, "wait_ms": 5.0, "copy_ms": 25.0},
                       IDLE_2, step_ms=100)
    assert copying.bottleneck == "copy"
    no_step = diagnose(stage_stats(), IDLE_2, step_ms=None)
    assert no_step.feeds is None and "--step-ms" in no_step.headline
    plain = diagnose({"batches": 9, "batch_size": 8, "batch_ms": 50.0, "wait_fraction": 1.0},
                     IDLE_2, step_ms=20)
    assert plain.bottleneck == "loader" and "num_workers" in plain.advice[0]
    bursty_plain = diagnose({"batches": 9, "batch_size": 8, "batch_ms": 50.0,
                             "wait_fraction": 0.5, "wait_ms_median": 2.0, "wait_ms_p90": 50.0},
                            BUSY_2, step_ms=20)
    assert any("prefetch_factor" in tip for tip in bursty_plain.advice)


def test_doctor_counters_add_up_to_wall_time(dataset_path: Path) -> None:
    report = run_doctor(str(dataset_path), seconds=1.0, batch_size=1, image_size=24,
                        step_ms=5.0, simulate_step=True, device="cpu", num_threads=1)
    s = report.stats
    assert s["batches"] >= 2 and s["batch_size"] == 1
    consumer = s["wait_share"] + s["copy_share"] + s["simulated_s"] / s["wall_s"]
    producer = s["decode_share"] + s["slot_wait_share"]
    helper = s["read_share"] + s["plan_share"]
    # Each thread's counters time disjoint spans of its own wall time, so they can never add
    # up to more than it (the producer may run up to prefetch + 1 batches past the window's
    # edge: 5%). How close they come to it depends on the machine's load (time in the loop's
    # own bookkeeping), so no lower bound is asserted: a unit test must pass on a busy box.
    assert 0 < consumer <= 1.02
    assert 0 < producer <= 1.05 and producer == pytest.approx(s["producer_thread_share"])
    assert 0 < helper <= 1.05
    assert report.verdict.feeds is not None and report.machine["cores"] >= 1


def test_cli_prints_the_table_and_exits_0(dataset_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["doctor", str(dataset_path), "--seconds", "0.5", "--batch-size", "4",
                 "--image-size", "24", "--device", "cpu", "--step-ms", "50",
                 "--prefetch", "auto", "--transforms", "val"])
    out = capsys.readouterr().out
    assert code == 0
    for text in ("decode+crop+resize+flip+normalize", "hand-over (CPU)", "helper*",
                 "overlap", "thread: decode + slot wait", "wait for a batch",
                 "images/s", "CPU per core", "memory: RSS", "VERDICT:", "prefetch="):
        assert text in out, text


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", str(tmp_path / "missing.lmdb"), "--seconds", "0.1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fastloader doctor: error:") and "\n" not in err
    assert main(["doctor", str(tmp_path), "--num-threads", "many"]) == 2


@pytest.mark.heavy
def test_python_m_runs_the_doctor(dataset_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "fastloader.doctor.doctor", str(dataset_path), "--seconds", "0.3",
         "--batch-size", "4", "--image-size", "24", "--device", "cpu"],
        capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert "VERDICT:" in result.stdout


class SlowSquares(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __init__(self, delay_s: float, length: int = 64) -> None:
        self.delay_s = delay_s
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.delay_s)
        return torch.full((3, 4, 4), float(i)), i % 3


def test_profile_on_a_plain_dataloader() -> None:
    slow = torch.utils.data.DataLoader(SlowSquares(0.004), batch_size=4)  # ~16 ms per batch
    report = profile(slow, steps=8, step_ms=2)
    s = report.stats
    assert s["batches"] == 8 and s["batch_size"] == 4
    assert s["wait_ms_median"] >= 14 and s["wait_fraction"] > 0.5
    assert report.verdict.feeds is False and "STARVES" in str(report)
    # Batches made before timing: next() costs microseconds, far under the 5% of a 250 ms step
    # that counts as starving. (A DataLoader's next() after a sleep cost 14-40 ms on this shared
    # VM, in-process or from a worker: waking cold caches, over the 5%. The verdict was right,
    # the test's premise was not.) The rate has an upper bound only: the step sleeps >= 250 ms.
    fast = [(torch.full((8, 3, 4, 4), float(i)), torch.arange(8) % 3) for i in range(50)]
    relaxed = profile(fast, steps=6, step_ms=250)
    assert relaxed.stats["batches"] == 6 and relaxed.verdict.feeds is True
    assert "not the bottleneck" in str(relaxed)
    assert relaxed.stats["images_per_s"] <= 32  # at most 8 images per 250 ms step
    with pytest.raises(InvalidArgumentError, match="steps"):
        profile(fast, steps=0)


def test_profile_reiterates_a_short_loader_and_stops_a_one_shot_iterator() -> None:
    batches = [(torch.zeros(2, 3), torch.zeros(2)) for _ in range(3)]
    assert profile(batches, steps=7, warmup=0).stats["batches"] == 7  # three passes
    assert profile(iter(batches), steps=7, warmup=1).stats["batches"] == 2


def test_batch_size_of_common_batch_shapes() -> None:
    assert batch_size_of((torch.zeros(5, 3), torch.zeros(5))) == 5
    assert batch_size_of({"image": torch.zeros(7, 2)}) == 7
    assert batch_size_of([[torch.zeros(2)]]) == 2
    assert batch_size_of("text") == 1
