"""--engine ray on a real multi-node Ray cluster (ray.cluster_utils.Cluster: a head and two
worker nodes, real raylets on 127.0.0.1, started and shut down here): the shard tasks run on
both worker nodes, the dataset equals the local engine's byte for byte and verifies clean, and
a task killed mid-shard on a worker node is retried into a correct dataset.

The pack runs in a child process (`packdata --engine ray --ray-address`): ray.init rewrites a
loopback address to the machine's network address unless RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
is set before Ray is imported (it makes Ray keep 127.0.0.1, as on a laptop), and Ray is
imported in this process already. Skipped where Ray is not installed (the `ray` extra)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fastloader.pack.maintain.verify import verify
from fastloader.pack.pipeline.tree import pack
from faults import packdata_command
from helpers import broken_tree, dataset_bytes

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'fastloader[ray]')")
cluster_utils = pytest.importorskip("ray.cluster_utils")
SHARD = 8_000  # bytes: a 92-file tree makes 13 shards
_ENV = {"RAY_AUTH_MODE": "disabled",  # a loopback test instance: no token under ~/.ray
        "RAY_USAGE_STATS_ENABLED": "0"}


pytestmark = pytest.mark.heavy


@dataclass
class RayCluster:
    address: str
    workers: set[str]  # the worker nodes' ids
    nodes: Path  # the node fault's folder: shard -> the node that ran it
    died: Path  # the kill fault's flag; its folder arms it


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    """A head node that runs no tasks and two worker nodes of one CPU each (the packs on it
    run in a child that installs faults.py's task wrapper: the local packs here run none)."""
    hooks = tmp_path_factory.mktemp("ray-cluster-hooks")
    found = RayCluster("", set(), hooks / "nodes", hooks / "armed" / "died")
    env = _ENV
    saved = {name: os.environ.get(name) for name in env}
    running = None
    try:
        os.environ.update(env)
        running = cluster_utils.Cluster(initialize_head=True, head_node_args={
            "num_cpus": 0, "node_ip_address": "127.0.0.1", "include_dashboard": False})
        for _ in range(2):
            found.workers.add(running.add_node(num_cpus=1,
                                               node_ip_address="127.0.0.1").node_id)
        running.wait_for_nodes()
        found.address = running.address
        _restore(saved)
        yield found
    finally:
        _restore(saved)
        if running is not None:
            running.shutdown()


def _restore(saved: dict[str, str | None]) -> None:
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _pack_on(cluster: RayCluster, src: Path, dst: Path) -> None:
    argv = [str(src), str(dst), "--engine", "ray", "--ray-address", cluster.address,
            "--shard-size", str(SHARD), "--quiet", "--skip-bad"]
    env = {**os.environ, **_ENV, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    faults = {"die_in": 1, "flag": str(cluster.died), "nodes": str(cluster.nodes)}
    ran = subprocess.run(packdata_command(argv, ray=faults), env=env,
                         capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]


def test_shards_run_on_two_nodes_into_the_local_engines_dataset(
    tmp_path: Path, cluster: RayCluster
) -> None:
    # 26 shards: enough work that the second node's worker starts while tasks still wait
    # (Ray keeps a leased worker busy; 13 shards once ran 12 on one node, 1 on the other)
    written = broken_tree(tmp_path / "src", per_class=60)
    cluster.nodes.mkdir()
    try:
        _pack_on(cluster, tmp_path / "src", tmp_path / "ray.lmdb")
        ran_on = {p.stem: p.read_text() for p in cluster.nodes.iterdir()}
    finally:
        for path in cluster.nodes.iterdir():
            path.unlink()
        cluster.nodes.rmdir()
    by_local = pack(tmp_path / "src", tmp_path / "local.lmdb", skip_bad=True,
                    workers=1, shard_size=SHARD)
    assert len(by_local.shards) >= 20 and by_local.num_samples == len(written)
    assert sorted(ran_on, key=int) == [str(k) for k in range(len(by_local.shards))]
    assert len(set(ran_on.values())) == 2 and set(ran_on.values()) == cluster.workers
    assert dataset_bytes(tmp_path / "ray.lmdb") == dataset_bytes(tmp_path / "local.lmdb")
    assert verify(tmp_path / "ray.lmdb").ok
    assert not cluster.died.exists()


def test_a_task_killed_on_a_worker_node_is_retried_into_a_correct_dataset(
    tmp_path: Path, cluster: RayCluster
) -> None:
    broken_tree(tmp_path / "src")
    cluster.died.parent.mkdir()  # arms the fault: shard 1's first attempt dies, shard torn
    _pack_on(cluster, tmp_path / "src", tmp_path / "ray.h5")
    assert cluster.died.exists()  # it did die, and Ray ran it again
    pack(tmp_path / "src", tmp_path / "local.h5", skip_bad=True, workers=1, shard_size=SHARD)
    assert dataset_bytes(tmp_path / "ray.h5") == dataset_bytes(tmp_path / "local.h5")
    assert verify(tmp_path / "ray.h5").ok
