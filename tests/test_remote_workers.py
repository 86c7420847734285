"""FastLoader(path, remote=fastloader.Remote(...)) on a real Ray cluster made here
(ray.cluster_utils.Cluster: a head that runs no actor and two worker nodes of one CPU each, every
process on 127.0.0.1): batches bit-equal to the local loader's for images with boxes, audio and
video; a node removed mid-epoch, a worker added mid-epoch and every worker lost leave the epoch's
batches unchanged; a checkpoint resumes on another worker count and locally; a damaged record is
named as the local loader names it; close() leaves no actor behind.

The driver joins the cluster at its 127.0.0.1 address: Ray rewrites a loopback address to the
machine's own unless its ENABLE_RAY_CLUSTER constant is off (the pack tests set the variable
behind it in their children; here Ray is imported in this process already).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import random
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import torch

import fastloader
from audiogen import clip
from fastloader import FastLoader, Remote
from fastloader.doctor.doctor import format_report, run_doctor
from fastloader.errors import DecodeError
from imagegen import encode, photo_like
from videogen import make_clip

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'fastloader[ray]')")
cluster_utils = pytest.importorskip("ray.cluster_utils")
ray_constants = pytest.importorskip("ray._private.ray_constants")

pytestmark = pytest.mark.heavy

_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
# a node's death is noticed in ~2 s, not Ray's default ~30 s
_FAST_DEATH = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
               "health_check_failure_threshold": 3}
BOX_FIELDS = {"image": "image", "boxes": ("boxes", ["box_labels"]), "mask": "mask",
              "box_labels": ("ndarray", "int64", (-1,)), "label": "int"}
IMAGES = 48
BATCH = 4  # 12 batches an epoch


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """The cluster, with this process joined to it as the driver."""
    saved = {name: os.environ.get(name) for name in _ENV}
    loopback = pytest.MonkeyPatch()
    loopback.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
    running = None
    try:
        os.environ.update(_ENV)
        running = cluster_utils.Cluster(initialize_head=True, head_node_args={
            "num_cpus": 0, "node_ip_address": "127.0.0.1", "include_dashboard": False,
            "_system_config": _FAST_DEATH})
        for _ in range(2):
            running.add_node(num_cpus=1, node_ip_address="127.0.0.1")
        running.wait_for_nodes()
        ray.init(address=running.address, include_dashboard=False, log_to_driver=False)
        yield running
    finally:
        ray.shutdown()
        if running is not None:
            running.shutdown()
        loopback.undo()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _ensure_two_nodes(cluster: Any) -> None:
    """Back to two live worker nodes (a test may have removed one)."""
    while len(cluster.worker_nodes) < 2:
        cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    cluster.wait_for_nodes()


@pytest.fixture(scope="module")
def boxes_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("remote") / "boxes.lmdb"
    samples = []
    for i in range(IMAGES):
        k = i % 3
        boxes = np.array([[2 + j, 3, 20 + j, 26] for j in range(k)], np.float32).reshape(-1, 4)
        pixels = photo_like(40 + i % 5, 48, i)
        samples.append({"image": encode(pixels), "boxes": boxes, "label": i % 7,
                        "mask": (pixels[..., 0] > 128).astype(np.uint8),
                        "box_labels": np.arange(k, dtype=np.int64)})
    fastloader.pack(samples, root, fields=BOX_FIELDS, workers=1)
    return root


IMAGE_OPTIONS: dict[str, Any] = {
    "batch_size": BATCH, "shuffle": True, "seed": 3, "device": "cpu", "num_threads": 1,
    "transforms": [fastloader.RandomResizedCrop(24), fastloader.RandomHorizontalFlip()],
    "fields": ("image", "boxes", "mask", "label")}


# 24 batches, at most 2 + window of them ahead of the one taken (ring slots, window): a fault
# after an early batch still finds batches to give out
SMALL_BATCHES = {**IMAGE_OPTIONS, "batch_size": 2, "prefetch": 1}


def _digest(value: Any) -> str:
    """A batch's bytes, whatever its structure (tensors, arrays, lists, tuples, dicts)."""
    h = hashlib.sha256()

    def feed(v: Any) -> None:
        if isinstance(v, torch.Tensor):
            feed(v.detach().cpu().contiguous().numpy())
        elif isinstance(v, np.ndarray):
            h.update(f"{v.dtype}{v.shape}".encode())
            h.update(np.ascontiguousarray(v).tobytes())
        elif isinstance(v, dict):
            for key in sorted(v):
                h.update(str(key).encode())
                feed(v[key])
        elif isinstance(v, (list, tuple)):
            h.update(f"[{len(v)}".encode())
            for item in v:
                feed(item)
        else:
            h.update(repr(v).encode())

    feed(value)
    return h.hexdigest()


def _epoch(path: Any, **options: Any) -> list[str]:
    with FastLoader(path, **options) as loader:
        return [_digest(batch) for batch in loader]


def test_remote_images_with_boxes_equal_local(cluster: Any, boxes_dataset: Path) -> None:
    _ensure_two_nodes(cluster)
    local = _epoch(boxes_dataset, **IMAGE_OPTIONS)
    assert len(local) == IMAGES // BATCH
    with FastLoader(boxes_dataset, remote=Remote(workers=2, local=False),
                    **IMAGE_OPTIONS) as loader:
        remote = [_digest(batch) for batch in loader]
        workers = [w for w in loader.stats().remote_workers if w.worker != "local"]
    assert remote == local
    assert sum(w.batches for w in workers) == len(local)  # every batch made remotely
    assert all(w.bytes > 0 and w.decode_s > 0 for w in workers if w.batches)
    assert len({w.node for w in workers}) == 2  # one actor on each worker node
    # the trainer's threads and a worker together: still the same batches, in order
    mixed = _epoch(boxes_dataset, remote=Remote(workers=1), **IMAGE_OPTIONS)
    assert mixed == local


def test_batches_late_on_a_worker_are_taken_back_and_made_here(
        cluster: Any, boxes_dataset: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker slowed to 0.3 s a batch (its work wrapped here, pickled to the actor by value)
    is late for batches the trainer decodes in milliseconds: the trainer takes back those queued
    there (cancelled on the worker) and the one it runs once the wait is longer than a local
    decode, and decodes them itself. Every batch is still made once and bit-equal."""
    from fastloader.loader.packed import workers
    from fastloader.loader.packed.remote_images import ImageRecipe, ImageWork

    class SlowWork(ImageWork):
        def run(self, plan: Any, b: int) -> Any:
            time.sleep(0.3)
            return super().run(plan, b)

    @dataclasses.dataclass(frozen=True)
    class SlowRecipe(ImageRecipe):
        def __call__(self) -> SlowWork:
            return SlowWork(self)

    _ensure_two_nodes(cluster)
    local = _epoch(boxes_dataset, **SMALL_BATCHES)
    monkeypatch.setattr(workers, "ImageRecipe", SlowRecipe)
    with FastLoader(boxes_dataset, remote=Remote(workers=1), **SMALL_BATCHES) as loader:
        got = [_digest(batch) for batch in loader]
        stats = {w.worker: w for w in loader.stats().remote_workers}
    assert got == local
    assert stats["0"].taken_back >= 2  # the one running and those queued behind it
    assert stats["local"].batches > stats["0"].batches
    assert stats["0"].batches + stats["local"].batches == len(local)  # each made once


@pytest.mark.parametrize("output", [
    {"normalize": ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])},  # float32 channel-first
    {"memory_format": torch.channels_last},  # the NHWC slot copied, as on CUDA
    {"batch_transform": lambda images: images.flip(1)}])  # run on the trainer after the copy
def test_remote_outputs_equal_local(cluster: Any, boxes_dataset: Path,
                                    output: dict[str, Any]) -> None:
    _ensure_two_nodes(cluster)
    options = {**IMAGE_OPTIONS, **output}
    assert _epoch(boxes_dataset, remote=Remote(workers=2, local=False), **options) == _epoch(
        boxes_dataset, **options)


@pytest.mark.parametrize("route", ["cpu", "device"])
def test_pixel_ops_on_the_workers_equal_local(cluster: Any, boxes_dataset: Path,
                                              route: str) -> None:
    """transforms= with pixel ops: fused into the workers' decode (cpu), or drawn on the worker
    and run by the trainer after the copy (device: the CPU device stands in for a GPU)."""
    _ensure_two_nodes(cluster)
    ops = [fastloader.ColorJitter(0.4, 0.4, 0.2, 0.1, p=0.8), fastloader.TrivialAugmentWide(),
           fastloader.RandomErasing(p=0.5)]
    options = {**IMAGE_OPTIONS, "fields": ("image", "label"), "pixel_ops_on": route,
               "transforms": [*IMAGE_OPTIONS["transforms"], *ops]}
    local = _epoch(boxes_dataset, **options)
    assert local != _epoch(boxes_dataset, **{**options, "transforms": IMAGE_OPTIONS["transforms"]})
    assert _epoch(boxes_dataset, remote=Remote(workers=2, local=False), **options) == local


def test_a_dataset_at_a_url_read_by_the_workers_through_their_cache(
        cluster: Any, served: tuple[str, Any, Path]) -> None:
    _ensure_two_nodes(cluster)
    url = served[0]  # an HTTP server on 127.0.0.1; each worker opens the URL itself
    options = {**IMAGE_OPTIONS, "fields": None}
    local = _epoch(url, **options)
    assert _epoch(url, remote=Remote(workers=2, local=False), **options) == local


# DINO's shape at this size: a global view and two local ones, colour ops in each; boxes and
# masks follow each view's crop
VIEW_OPTIONS: dict[str, Any] = {
    **{k: v for k, v in IMAGE_OPTIONS.items() if k != "transforms"},
    "views": [fastloader.View([fastloader.RandomResizedCrop(24), fastloader.RandomHorizontalFlip(),
                               fastloader.ColorJitter(0.4, 0.4, 0.2, 0.1, p=0.8)]),
              fastloader.View([fastloader.RandomResizedCrop(16), fastloader.RandomHorizontalFlip(),
                               fastloader.GaussianBlur(3, (0.1, 2.0), p=0.5)], count=2)]}


@pytest.mark.parametrize("output", [
    {},  # uint8 channel-first: each view's planar batch from the worker
    {"normalize": ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])},
    {"memory_format": torch.channels_last},  # each view into its region of the NHWC slot
    {"pixel_ops_on": "device"}])  # drawn on the worker, run by the trainer after the copy
def test_views_from_the_workers_equal_local(cluster: Any, boxes_dataset: Path,
                                            output: dict[str, Any]) -> None:
    """views=: a worker decodes each record once for all its views, as the trainer does."""
    _ensure_two_nodes(cluster)
    options = {**VIEW_OPTIONS, **output}
    local = _epoch(boxes_dataset, **options)
    with FastLoader(boxes_dataset, remote=Remote(workers=2, local=False), **options) as loader:
        first = next(iter(loader))
        assert [v.shape[-1] for v in first[0]] == [24, 16, 16]  # three views of images
        assert len(first[1]) == 3 and len(first[2]) == 3  # boxes and masks a view
    assert _epoch(boxes_dataset, remote=Remote(workers=2, local=False), **options) == local
    if not output:  # the trainer's threads and a worker together
        assert _epoch(boxes_dataset, remote=Remote(workers=1), **options) == local


def test_a_mix_of_datasets_and_the_doctor(cluster: Any, boxes_dataset: Path) -> None:
    _ensure_two_nodes(cluster)
    sources = {"a": boxes_dataset, "b": boxes_dataset}
    options = {**IMAGE_OPTIONS, "weights": {"a": 1, "b": 2}}  # boxes and masks too
    local = _epoch(sources, **options)
    remote = _epoch(sources, remote=Remote(workers=2, local=False), **options)
    assert remote == local
    report = run_doctor(str(boxes_dataset), seconds=1.0, batch_size=4, image_size=24,
                        device="cpu", num_threads=1, remote=Remote(workers=1, local=False))
    assert report.stats["remote_workers"] == 1.0 and report.stats["remote_ms"] > 0
    assert "remote workers: 1 live" in format_report(report)


@pytest.fixture(scope="module")
def audio_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("remote") / "audio.lmdb"
    clips = [clip(16000, 0.2 + i / 20, 1 + i % 2, "flac", seed=i) for i in range(10)]
    fastloader.pack([{"audio": c, "label": i} for i, c in enumerate(clips)], root,
                    fields={"audio": "audio", "label": "int"}, workers=1)
    return root


@pytest.fixture(scope="module")
def video_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("remote") / "video.lmdb"
    clips = [make_clip(frames=10 + k, width=32, height=32) for k in range(6)]
    fastloader.pack([{"video": c, "label": k} for k, c in enumerate(clips)], root,
                    fields={"video": "video", "label": "int"}, workers=1)
    return root


@pytest.mark.parametrize("kind", ["audio", "video"])
def test_remote_clips_equal_local(cluster: Any, audio_dataset: Path, video_dataset: Path,
                                  kind: str) -> None:
    _ensure_two_nodes(cluster)
    if kind == "audio":
        path, options = audio_dataset, {"audio": fastloader.Audio(sample_rate=8000)}
    else:
        path, options = video_dataset, {"video": fastloader.Video(frames=4, stride=2),
                                        "transforms": [fastloader.RandomResizedCrop(16)]}
    options.update(batch_size=3, shuffle=True, seed=5, device="cpu", num_threads=1)
    local = _epoch(path, **options)
    remote = _epoch(path, remote=Remote(workers=2, local=False), **options)
    assert remote == local and len(local) >= 2


def test_workers_that_cannot_be_placed_are_named(cluster: Any, boxes_dataset: Path) -> None:
    _ensure_two_nodes(cluster)
    remote = Remote(workers=1, resources={"gpu_free_node": 1}, startup_timeout=2)
    with pytest.raises(fastloader.FastloaderError,
                       match=r"none of the 1 remote workers started within 2 s.*"
                             r"'gpu_free_node': 1.0.*startup_timeout"):
        FastLoader(boxes_dataset, remote=remote, **IMAGE_OPTIONS)


def _node_of(cluster: Any, node_id: str) -> Any:
    return next(n for n in cluster.worker_nodes if n.node_id == node_id)


def test_a_node_removed_mid_epoch_leaves_the_epochs_batches(cluster: Any,
                                                             boxes_dataset: Path) -> None:
    _ensure_two_nodes(cluster)
    options = SMALL_BATCHES
    local = _epoch(boxes_dataset, **options)
    window = 4
    at = random.Random(os.getpid()).randrange(1, len(local) - window - 8)
    got = []
    with FastLoader(boxes_dataset, remote=Remote(workers=2, local=False, window=window),
                    **options) as loader:
        for k, batch in enumerate(loader):
            got.append(_digest(batch))
            if k == at:
                victim = loader.remote.live()[0]
                cluster.remove_node(_node_of(cluster, victim.node), allow_graceful=False)
                _wait_gone([victim.pid])  # its batches in flight die with it
        workers = {w.worker: w for w in loader.stats().remote_workers}
    assert got == local, f"node removed after batch {at}"
    assert workers[str(victim.number)].state == "lost", f"node removed after batch {at}"
    assert workers[str(victim.number)].redone >= 1  # batches it held, made by the other
    assert sum(w.batches for w in workers.values()) == len(local)


def test_a_worker_added_mid_epoch_takes_batches(cluster: Any, boxes_dataset: Path) -> None:
    _ensure_two_nodes(cluster)
    local = _epoch(boxes_dataset, **SMALL_BATCHES)
    got = []
    with FastLoader(boxes_dataset, remote=Remote(workers=1, local=False, window=2),
                    **SMALL_BATCHES) as loader:
        for k, batch in enumerate(loader):
            got.append(_digest(batch))
            if k == 0:
                loader.remote.add(1)
                loader.remote.wait_started(60)
        workers = [w for w in loader.stats().remote_workers if w.worker != "local"]
    assert got == local
    assert len(workers) == 2 and workers[1].state == "live"
    assert workers[1].batches > 0


@pytest.mark.parametrize("on_lost", ["local", "raise"])
def test_every_worker_lost(cluster: Any, boxes_dataset: Path, on_lost: str,
                           caplog: pytest.LogCaptureFixture) -> None:
    _ensure_two_nodes(cluster)
    local = _epoch(boxes_dataset, **SMALL_BATCHES)
    got = []
    remote = Remote(workers=2, local=False, on_lost=on_lost, lost_timeout=2)  # type: ignore
    with FastLoader(boxes_dataset, remote=remote, **SMALL_BATCHES) as loader:
        iterator = iter(loader)
        got.append(_digest(next(iterator)))
        for worker in loader.remote.live():
            ray.kill(worker.actor, no_restart=True)
        if on_lost == "raise":
            with pytest.raises(fastloader.RemoteWorkersLostError, match="lost_timeout"):
                got.extend(_digest(b) for b in iterator)
            return
        got.extend(_digest(b) for b in iterator)
    assert got == local
    assert "every remote worker is gone" in caplog.text


def test_every_worker_lost_beside_the_local_decode_raises_after_lost_timeout(
        cluster: Any, boxes_dataset: Path) -> None:
    """local=True with on_lost="raise": the trainer decodes on meanwhile, then raises."""
    _ensure_two_nodes(cluster)
    remote = Remote(workers=1, on_lost="raise", lost_timeout=1)
    with FastLoader(boxes_dataset, remote=remote, **SMALL_BATCHES) as loader:
        iterator = iter(loader)
        next(iterator)
        for worker in loader.remote.live():
            ray.kill(worker.actor, no_restart=True)
        carried_on = 0
        with pytest.raises(fastloader.RemoteWorkersLostError, match="lost_timeout"):
            for _ in iterator:
                carried_on += 1
                time.sleep(0.25)  # a training step: the epoch outlasts lost_timeout
    assert 1 <= carried_on < len(_epoch(boxes_dataset, **SMALL_BATCHES)) - 1


def test_checkpoint_resumes_on_another_worker_count_and_locally(cluster: Any,
                                                                boxes_dataset: Path) -> None:
    _ensure_two_nodes(cluster)
    k = 5
    local = _epoch(boxes_dataset, **IMAGE_OPTIONS)
    with FastLoader(boxes_dataset, remote=Remote(workers=2, local=False),
                    **IMAGE_OPTIONS) as loader:
        iterator = iter(loader)
        first = [_digest(next(iterator)) for _ in range(k)]
        state = loader.state_dict()
    assert first == local[:k]
    rest = {}
    for name, remote in (("one worker", Remote(workers=1, local=False)), ("local", None)):
        with FastLoader(boxes_dataset, remote=remote, **IMAGE_OPTIONS) as loader:
            loader.load_state_dict(state)
            rest[name] = [_digest(batch) for batch in loader]
    assert rest["one worker"] == rest["local"] == local[k:]
    # and a local run's checkpoint resumes remotely
    with FastLoader(boxes_dataset, **IMAGE_OPTIONS) as loader:
        iterator = iter(loader)
        [next(iterator) for _ in range(k)]
        state = loader.state_dict()
    assert _epoch_from(boxes_dataset, state, Remote(workers=2)) == local[k:]


def _epoch_from(path: Path, state: dict[str, Any], remote: Remote | None) -> list[str]:
    with FastLoader(path, remote=remote, **IMAGE_OPTIONS) as loader:
        loader.load_state_dict(state)
        return [_digest(batch) for batch in loader]


def _damage(path: Path, dst: Path, index: int) -> Path:
    """A copy of the dataset with record `index`'s JPEG header overwritten in its shard."""
    import shutil

    shutil.copytree(path, dst)
    with fastloader.open_dataset(dst) as dataset:
        record = bytes(dataset.record(index))
    for shard in dst.rglob("*.mdb"):
        data = bytearray(shard.read_bytes())
        at = data.find(record)
        if at >= 0:
            data[at : at + 64] = b"\x00" * 64
            shard.write_bytes(bytes(data))
            return dst
    raise AssertionError("record not found in any shard")


def _no_address(text: str) -> str:
    return re.sub(r"0x[0-9a-f]+", "0x...", text)


def test_a_damaged_record_is_named_as_locally(cluster: Any, boxes_dataset: Path,
                                              tmp_path: Path) -> None:
    _ensure_two_nodes(cluster)
    bad = _damage(boxes_dataset, tmp_path / "bad.lmdb", 9)
    errors = []
    for remote in (None, Remote(workers=2, local=False)):
        with FastLoader(bad, remote=remote, **IMAGE_OPTIONS) as loader:
            with pytest.raises(DecodeError) as caught:
                list(loader)
            errors.append(caught.value)
    assert type(errors[0]) is type(errors[1])
    # the same words; Pillow's message names its BytesIO by address, which differs by process
    assert _no_address(str(errors[0])) == _no_address(str(errors[1]))
    assert "batch" in str(errors[1]) and str(bad) in str(errors[1])
    for options in (IMAGE_OPTIONS, VIEW_OPTIONS):  # views=: replaced in every view
        skipping = dict(options, on_error="skip")
        local = _epoch(bad, **skipping)
        with FastLoader(bad, remote=Remote(workers=2, local=False), **skipping) as loader:
            assert [_digest(b) for b in loader] == local
            assert loader.stats().skipped == 1


def _wait_gone(pids: list[int]) -> None:
    deadline = time.monotonic() + 60  # a kill is asynchronous: a bound, not a speed
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids)


def test_a_damaged_clip_is_named_as_locally(cluster: Any, audio_dataset: Path,
                                            tmp_path: Path) -> None:
    _ensure_two_nodes(cluster)
    bad = _damage(audio_dataset, tmp_path / "bad.lmdb", 4)
    options: dict[str, Any] = {"audio": fastloader.Audio(sample_rate=8000), "batch_size": 3,
                               "shuffle": True, "seed": 5, "device": "cpu", "num_threads": 1}
    errors = []
    for remote in (None, Remote(workers=2, local=False)):
        with FastLoader(bad, remote=remote, **options) as loader:
            with pytest.raises(DecodeError) as caught:
                list(loader)
            errors.append(caught.value)
    assert _no_address(str(errors[0])) == _no_address(str(errors[1]))
    assert "sample 4" in str(errors[1])
    local = _epoch(bad, on_error="skip", **options)
    with FastLoader(bad, remote=Remote(workers=2, local=False), on_error="skip",
                    **options) as loader:
        assert [_digest(b) for b in loader] == local
        assert loader.stats().skipped == 1


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_close_leaves_no_actor(cluster: Any, boxes_dataset: Path) -> None:
    _ensure_two_nodes(cluster)
    loader = FastLoader(boxes_dataset, remote=Remote(workers=2), **IMAGE_OPTIONS)
    next(iter(loader))
    actors = [w.actor for w in loader.remote.workers]
    pids = [ray.get(a.ready.remote())["pid"] for a in actors]
    loader.close()
    _wait_gone(pids)
    for actor in actors:  # and Ray knows them dead
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.ready.remote(), timeout=60)


def test_a_cluster_torn_down_and_a_resume_on_the_loaders_own_ray(cluster: Any,
                                                                   boxes_dataset: Path) -> None:
    """A checkpoint on a cluster of its own, that cluster shut down, and the rest of the epoch
    on a local Ray a loader starts on 127.0.0.1, shared with a second loader and shut down by
    the last to close; the module's cluster is left as it was for the other tests."""
    local = _epoch(boxes_dataset, **IMAGE_OPTIONS)
    ray.shutdown()  # the driver leaves the module's cluster for one of this test's own
    own = cluster_utils.Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "node_ip_address": "127.0.0.1", "include_dashboard": False})
    try:
        own.add_node(num_cpus=2, node_ip_address="127.0.0.1")
        own.wait_for_nodes()
        ray.init(address=own.address, include_dashboard=False, log_to_driver=False)
        with FastLoader(boxes_dataset, remote=Remote(workers=2, local=False),
                        **IMAGE_OPTIONS) as loader:
            iterator = iter(loader)
            first = [_digest(next(iterator)) for _ in range(3)]
            state = loader.state_dict()
    finally:
        ray.shutdown()
        own.shutdown()
    assert first == local[:3]
    # a second loader of the process (a validation loader, say) joins the local Ray the first
    # started, which has the machine's CPUs; the one that closes first leaves it to the other
    with FastLoader(boxes_dataset, remote=Remote(workers=1, local=False),
                    **IMAGE_OPTIONS) as validation:
        assert _epoch_from(boxes_dataset, state, Remote(workers=1)) == local[3:]
        assert ray.is_initialized()
        assert [_digest(b) for b in validation] == local
    assert not ray.is_initialized()  # the last loader shut down the Ray it started
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)


def test_ctrl_c_in_the_training_loop_leaves_no_worker(boxes_dataset: Path,
                                                      tmp_path: Path) -> None:
    import subprocess
    import sys

    pids = tmp_path / "pids"
    script = (
        "import os, sys, time, ray, fastloader\n"
        "from fastloader import FastLoader, Remote\n"
        f"loader = FastLoader({str(boxes_dataset)!r}, remote=Remote(workers=1, local=False), "
        "batch_size=4, device='cpu', num_threads=1, transforms=[fastloader.CenterCrop(24)])\n"
        "next(iter(loader))\n"
        "pids = [ray.get(w.actor.ready.remote())['pid'] for w in loader.remote.workers]\n"
        f"open({str(pids)!r}, 'w').write(' '.join(map(str, pids)))\n"
        "while True:\n    time.sleep(0.1)\n")
    env = {**os.environ, **_ENV}
    child = subprocess.Popen([sys.executable, "-c", script], env=env)
    deadline = time.monotonic() + 240
    while not pids.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pids.exists(), "the child did not start its worker"
    # every process the child started: its local Ray (GCS, raylet, agents) and its worker
    started = [p.pid for p in psutil.Process(child.pid).children(recursive=True)]
    workers = [int(p) for p in pids.read_text().split()]
    child.send_signal(signal.SIGINT)
    assert child.wait(timeout=120) != 0
    _wait_gone([*workers, *started])
