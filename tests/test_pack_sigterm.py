"""packdata on SIGTERM (what SLURM and Kubernetes send on preemption) stops as on Ctrl-C: the
pool's workers end without a traceback, the finished shards stay, one line says to rerun with
--resume, exit 143; --resume then says how many shards it reused, or why it starts over.
Real signals, to a real packdata process (its pool's workers slowed by a seam, so the signal
lands mid-pack)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from fastloader import open_dataset
from fastloader.pack.cli.main import main
from imagegen import make_tree

# packdata with each file's check slowed (in the driver's forked workers too): a pack that
# is still running when the signal comes, whatever the machine
SLOW_PACKDATA = """
import sys, time
from fastloader.pack.sources import validate
real = validate.prepare_data
def slow(*args, **kwargs):
    time.sleep(0.02)
    return real(*args, **kwargs)
validate.prepare_data = slow
from fastloader.pack.cli.main import main
sys.exit(main(sys.argv[1:]))
"""
FILES = 240

pytestmark = pytest.mark.heavy


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tree(tmp_path_factory.mktemp("sigterm") / "src", classes=4,
                     per_class=FILES // 4, size=(24, 32))


def packdata(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", SLOW_PACKDATA, *args],
                            stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)


def signal_mid_pack(proc: subprocess.Popen[str], dst: Path, group: bool,
                    signum: int = signal.SIGTERM) -> str:
    """Send signum (SIGTERM) once two shards are written; packdata's stderr."""
    journal = dst.parent / f".{dst.name}.partial" / "journal"
    deadline = time.monotonic() + 120
    while len(list(journal.glob("*.json"))) < 2:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the pack wrote no shard"
        time.sleep(0.01)
    if group:  # SLURM's scancel, a terminal's Ctrl-C: every process of the group
        os.killpg(proc.pid, signum)
    else:  # Kubernetes: the container's main process
        proc.send_signal(signum)
    return proc.communicate(timeout=60)[1]


@pytest.mark.parametrize(("signum", "group"), [(signal.SIGTERM, False), (signal.SIGTERM, True),
                                              (signal.SIGINT, True)],
                         ids=["sigterm-process", "sigterm-group", "sigint-group"])
def test_sigterm_stops_like_sigint_and_resume_reuses_the_shards(src: Path, tmp_path: Path,
                                                                 signum: int, group: bool
                                                                 ) -> None:
    dst = tmp_path / "o.lmdb"
    args = [str(src), str(dst), "--workers", "2", "--shard-size", "16K"]
    proc = packdata(*args)
    err = signal_mid_pack(proc, dst, group, signum)
    # 128 + the signal: what a shell reports for a process that signal killed
    assert proc.returncode == 128 + signum, err
    what = "terminated (SIGTERM)" if signum == signal.SIGTERM else "interrupted"
    assert err.splitlines() == [f"packdata: {what}; the finished shards are kept: rerun the "
                                "same command with --resume"], err
    assert not dst.exists()
    resumed = subprocess.run([sys.executable, "-m", "fastloader.pack.cli", *args, "--resume"],
                             capture_output=True, text=True, timeout=300, check=False)
    assert resumed.returncode == 0, resumed.stderr
    first = resumed.stderr.splitlines()[0]
    kept, total = (int(n) for n in first.split("reusing ")[1].split(" shards")[0].split(" of "))
    assert first == f"packdata: resume: reusing {kept} of {total} shards already packed; " \
        f"packing the other {total - kept}"
    assert kept >= 2
    with open_dataset(dst) as ds:
        assert len(ds) == FILES


def test_resume_with_other_options_says_it_starts_over(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "o.lmdb"
    proc = packdata(str(src), str(dst), "--workers", "2", "--shard-size", "16K")
    signal_mid_pack(proc, dst, False)
    assert proc.returncode == 143
    resumed = subprocess.run([sys.executable, "-m", "fastloader.pack.cli", str(src), str(dst),
                              "--workers", "2", "--shard-size", "32K", "--resume"],
                             capture_output=True, text=True, timeout=300, check=False)
    assert resumed.returncode == 0, resumed.stderr
    lines = resumed.stderr.splitlines()
    assert lines[0] == (f"packdata: resume: the interrupted pack of {dst} had another source "
                        "or other options (shard_size differ); starting over, its shards are "
                        "cleared")
    assert lines[1].startswith("packdata: resume: reusing 0 of ")
    fresh = subprocess.run([sys.executable, "-m", "fastloader.pack.cli", str(src),
                            str(tmp_path / "new.lmdb"), "--resume"],
                           capture_output=True, text=True, timeout=300, check=False)
    assert fresh.stderr.splitlines()[0] == (f"packdata: resume: no interrupted pack of "
                                            f"{tmp_path / 'new.lmdb'} to resume; packing from "
                                            "the start")


def test_sigterm_in_a_shard_run_says_to_rerun_it(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "o.lmdb"
    assert main(["plan", str(src), str(dst), "--shard-size", "16K", "--quiet"]) == 0
    proc = packdata("shard", str(dst), "--range", "0:1000", "--workers", "2")
    err = signal_mid_pack(proc, dst, True)
    assert proc.returncode == 143, err
    assert err.splitlines() == ["packdata: terminated (SIGTERM); the parts written are kept: "
                                "rerun the same command to write the rest"]
    assert main(["shard", str(dst), "--range", "0:1000", "--quiet"]) == 0
    assert main(["commit", str(dst), "--quiet"]) == 0
    with open_dataset(dst) as ds:
        assert len(ds) == FILES


def test_packdata_signal_handlers_act_in_its_own_process_only() -> None:
    """A pool worker forked from packdata holds packdata's handlers until its initializer
    installs its own: a SIGTERM or SIGINT landing in that moment must not unwind the worker
    (a traceback on stderr, the task queue's lock perhaps held); the pool stops it."""
    from fastloader.pack.cli.stops import Stop, Terminated, main_process_only

    handler = main_process_only(Terminated, Stop())
    with pytest.raises(Terminated):
        handler(signal.SIGTERM, None)
    child = os.fork()
    if child == 0:  # a forked worker before its initializer
        try:
            handler(signal.SIGTERM, None)
        except BaseException:
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_a_stop_is_reported_whatever_exception_the_unwinding_raised(
        src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], signum: int) -> None:
    """A signal that lands as np.savez closes a zip member (CI caught one there) unwinds
    past the member's close, and the zip file's own close, in np.savez's finally, raises
    ValueError over the stop. packdata still says it stopped, and exits 128 + the signal; no
    shard had finished, so it says nothing is kept and leaves no staging behind."""
    real_close, owner, sent = zipfile._ZipWriteFile.close, os.getpid(), []

    def close(member: zipfile._ZipWriteFile) -> None:
        if os.getpid() == owner and not sent:
            sent.append(signum)
            os.kill(owner, signum)  # the handler raises here, before the member is closed
        real_close(member)

    monkeypatch.setattr(zipfile._ZipWriteFile, "close", close)
    dst = tmp_path / "o.lmdb"
    args = [str(src), str(dst), "--workers", "1", "--shard-size", "16K"]
    assert main(args) == 128 + signum
    what = "terminated (SIGTERM)" if signum == signal.SIGTERM else "interrupted"
    assert capsys.readouterr().err.splitlines() == [
        f"packdata: {what}; no shard had finished, nothing is kept: rerun the same command"]
    assert sent == [signum] and not dst.exists()
    assert not (tmp_path / f".{dst.name}.partial").exists()
    monkeypatch.setattr(zipfile._ZipWriteFile, "close", real_close)
    assert main([*args, "--resume", "--quiet"]) == 0
    with open_dataset(dst) as ds:
        assert len(ds) == FILES

