"""The device check rehearses on the CPU: every step of benchmarks/gpu_check.py at toy sizes.

A typo in a row the GPU machine would run first shows up here, not in its few minutes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_gpu_check_dry_run_runs_every_row(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("OUT", None)
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--dry-run",
         "--data", str(tmp_path / "data"), "--out", str(tmp_path / "out")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    record = json.loads((tmp_path / "out" / "gpu_check_dry.json").read_text())
    assert record["dry_run"] is True and record["sizes"]["device"] == "cpu"
    assert record["tests"]["rc"] in (0, 5), record["tests"]  # skipped without CUDA, not failed
    rows = record["throughput"]
    names = " | ".join(rows)
    for expected in ("ceiling", "loader-only, 2 threads", "loader-only, 1 threads",
                     "FastLoader -> resnet50 step", "DataLoader"):
        assert expected in names, names
    for name, result in rows.items():
        assert "error" not in result, f"{name}: {result.get('error')}"
        assert result["images_per_s_median"] > 0
    assert rows["FastLoader -> resnet50 step"]["share_of_ceiling"] > 0


def test_device_scripts_parse() -> None:
    """The shell steps the dry run does not execute (install, build) at least parse."""
    for script in ("gpu_check.sh", "gpu_check_prepare.sh", "gpu_check_env.sh"):
        done = subprocess.run(["bash", "-n", str(REPO / "benchmarks" / script)],
                              capture_output=True, text=True)
        assert done.returncode == 0, f"{script}: {done.stderr}"
