"""A pack whose DST is a URL (s3://, gs://, file://, any fsspec URL): the staging is remote.

Layout: the shard files go straight to their final names under DST (a reader trusts only
manifest.json, which comes last); the plan and the parts (part-manifest JSON, index arrays,
tile columns) go under the hidden sibling prefix PARENT/.NAME.partial/, laid out as a local
pack's staging folder. A shard task (in the local engine's driver, or a Ray task on any node)
builds its part in a local temporary folder, uploads its shard file, then its part files with
the part-manifest last, and deletes the local copy; a retried task uploads the same bytes.

The commit step (commit.py, on the driver) downloads the parts (small files) into a local
folder and checks them against one listing of DST: a shard file must have its part's size,
and its sha256 is the one its task computed over the bytes it uploaded (no shard is
downloaded again). It builds the index there and uploads index/, skipped.json and
manifest.json last, then deletes the objects of any older dataset and the staging prefix.
There is no lock on object storage: run one pack per URL at a time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import posixpath
import re
import shutil
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastloader.errors import DatasetNotFoundError, PackError
from fastloader.format.manifest import MANIFEST_NAME
from fastloader.format.remote import Remote
from fastloader.pack.sources import tiling
from fastloader.pack.staging.journal import (
    JOURNAL_DIR,
    PLAN_DIR,
    PLAN_NAME,
    note_resume,
    same_identity,
    write_atomic,
)
from fastloader.pack.staging.part import Identity, Part, check_part, part_path
from fastloader.pack.staging.plan import ShardPlan, Spans, TaskSettings, read_settings
from fastloader.pack.staging.upload import put

# What a dataset folder of ours holds: anything else at DST is not ours to replace.
_OURS = re.compile(r"^(shard-\d+\.[A-Za-z0-9]+|index(-\d+)?/[^/]+|skipped\.json|manifest\.json)$")


def staging_url(dst: str) -> str:
    """The hidden sibling prefix a pack of the URL dst is staged under: PARENT/.NAME.partial"""
    parent, _, name = dst.rstrip("/").rpartition("/")
    return f"{parent}/.{name}.partial"


def _listing(remote: Remote, sub: str = "") -> dict[str, int]:
    """Every object under the remote folder (or its sub-folder): relative name -> bytes.
    The listing cache is dropped first: other processes (Ray tasks) wrote there meanwhile."""
    top = posixpath.join(remote.path, sub) if sub else remote.path
    remote.fs.invalidate_cache(top)
    try:
        found = remote.fs.find(top, detail=True)
    except FileNotFoundError:
        return {}
    return {posixpath.relpath(path, remote.path): int(info.get("size") or 0)
            for path, info in found.items() if info.get("type", "file") != "directory"}


@dataclass(frozen=True)
class RemoteStage:
    """Where shard tasks put their parts when DST is a URL; picklable (Ray ships it)."""

    dst: str
    staging: str
    storage_options: dict[str, Any] | None
    token: str  # this plan's id: a worker's cached plan is reused for the same plan only

    def _remote(self, url: str) -> Remote:
        return Remote(url, self.storage_options)

    def load_plan(self) -> tuple[ShardPlan, TaskSettings]:
        """The plan the driver uploaded and its settings (downloaded once per worker
        process)."""
        options = json.dumps(self.storage_options or {}, sort_keys=True, default=str)
        plan, settings = _cached_plan(self.staging, self.token, options)
        return plan, dataclasses.replace(settings, storage_options=self.storage_options)

    def build(self, k: int, make: Callable[[Path], Part]) -> Part:
        """Shard k's part made by make(folder) in a local temporary folder (an ImageFolder
        or a sample part), then its files uploaded and the folder deleted."""
        folder = Path(tempfile.mkdtemp(prefix=f"packdata-shard-{k:05d}-"))
        try:
            (folder / JOURNAL_DIR).mkdir()
            part = make(folder)
            self._publish(folder, part)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return part

    def _publish(self, folder: Path, part: Part) -> None:
        """The shard file to DST, then the part files, the part-manifest last (so a
        part-manifest in the staging always means a whole part, as in a folder)."""
        if part.info is not None:
            put(self._remote(self.dst), folder / part.info.file, part.info.file)
        staging = self._remote(self.staging)
        for suffix in (".part.npz", tiling.SHARD_SUFFIX, ".json"):
            local = part_path(folder, part.shard, suffix)
            if local.is_file():
                put(staging, local, f"{JOURNAL_DIR}/{local.name}")


@functools.lru_cache(maxsize=4)
def _cached_plan(staging: str, token: str, options: str) -> tuple[ShardPlan, TaskSettings]:
    remote = Remote(staging, json.loads(options) or None)
    with tempfile.TemporaryDirectory(prefix="packdata-plan-") as tmp:
        names = [PLAN_NAME] + [name for name in _listing(remote, PLAN_DIR)]
        for name in names:
            (Path(tmp) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / name).write_bytes(remote.read_bytes(name))
        # in memory: its arrays outlive the folder
        plan, settings = ShardPlan.load(Path(tmp), mmap=False), read_settings(Path(tmp))
    if settings.token != token:
        raise PackError(f"the plan at {staging} is not this pack's (another packdata replaced "
                        "it?); run one packdata per DST at a time.")
    return plan, settings


class RemoteStaging:
    """The driver's side of a pack to a URL: what journal.Staging is for a folder.

    `dir` is a local temporary folder where the plan is written before upload and where the
    commit gathers the parts and builds the index; `stage` is what the shard tasks get.
    """

    def __init__(self, dst: str, storage_options: dict[str, Any] | None = None) -> None:
        self.dst = dst.rstrip("/")
        self.remote = Remote(self.dst, storage_options)
        self.staging = Remote(staging_url(self.dst), storage_options)
        self.stage = RemoteStage(self.dst, self.staging.url, storage_options, uuid.uuid4().hex)
        # created by open(); local to the driver, so never shared with another pack
        self.dir = Path(tempfile.gettempdir()) / f"packdata-remote-{self.stage.token}"
        self.journal = self.dir / JOURNAL_DIR

    def check_destination(self, overwrite: bool) -> None:
        """PackError when DST holds a dataset (without overwrite) or objects not ours."""
        found = _listing(self.remote)
        if MANIFEST_NAME in found and not overwrite:
            raise PackError(f"{self.dst} already holds a packed dataset; pass --overwrite to "
                            "replace it or choose another DST.")
        foreign = sorted(name for name in found if not _OURS.match(name))
        if foreign:
            raise PackError(f"{self.dst} holds objects that are not a packed dataset's (e.g. "
                            f"{foreign[0]!r}), so packdata will not write there; remove them "
                            "or choose another DST.")

    def open(self, identity: dict[str, object], resume: bool, overwrite: bool) -> None:
        """Keep the remote parts only when resuming the same plan; drop an old manifest.json
        (overwrite) before any shard is uploaded, so no reader trusts a half-replaced one."""
        try:
            old = json.loads(self.staging.read_bytes(PLAN_NAME))
        except (DatasetNotFoundError, ValueError):  # none yet, or unreadable
            old = None
        note_resume(self.dst, old, identity, resume)
        if not resume or not same_identity(old, identity):
            self._remove(self.staging, "")
        if overwrite:
            self._remove(self.remote, MANIFEST_NAME)
        self.journal.mkdir(parents=True, exist_ok=True)
        write_atomic(self.dir / PLAN_NAME, json.dumps(identity, sort_keys=True))

    def publish_plan(self, settings_name: str) -> None:
        """Upload the plan written in dir (the tasks read it from there), plan.json last;
        the run settings carry this pack's token."""
        settings = self.dir / PLAN_DIR / settings_name
        run = json.loads(settings.read_text()) | {"token": self.stage.token}
        write_atomic(settings, json.dumps(run, sort_keys=True))
        for path in sorted((self.dir / PLAN_DIR).iterdir()):
            put(self.staging, path, f"{PLAN_DIR}/{path.name}")
        put(self.staging, self.dir / PLAN_NAME, PLAN_NAME)

    def gather(self) -> dict[str, int]:
        """Download the parts into dir/journal (replacing what was there); DST's object
        sizes, for check_part (which then checks each shard's size, not its bytes)."""
        shutil.rmtree(self.journal, ignore_errors=True)
        self.journal.mkdir()
        names = list(_listing(self.staging, JOURNAL_DIR))  # journal/NNNNN.json ...
        paths = [f"{self.staging.path}/{name}" for name in names]
        got = self.staging.fs.cat(paths, on_error="omit") if paths else {}
        for name, path in zip(names, paths, strict=True):
            if path in got:
                (self.dir / name).write_bytes(got[path])
        return _listing(self.remote)

    def pending(self, plan: Spans, resume: bool, made_of: Identity) -> list[int]:
        """The shards whose part is missing, invalid or made from other items at the URL
        (all unless resuming)."""
        if not resume:
            return list(range(plan.num_shards))
        sizes = self.gather()
        return [k for k in range(plan.num_shards)
                if check_part(self.dir, plan, k, made_of, sizes=sizes)[0] is None]

    def finish(self, write_manifest: Callable[[Path], object], overwrite: bool) -> None:
        """Upload index/ and skipped.json, then manifest.json (last); then delete the objects
        no manifest names (an older dataset's, an earlier plan's) and the staging prefix."""
        if MANIFEST_NAME in _listing(self.remote) and not overwrite:  # before any upload
            raise PackError(f"{self.dst} appeared while this pack ran (another packdata "
                            "finished it?); rerun with --overwrite to replace it, or choose "
                            "another DST.")
        write_manifest(self.dir)
        manifest = json.loads((self.dir / MANIFEST_NAME).read_text())
        keep = {s["file"] for s in manifest["shards"]} | {MANIFEST_NAME, "skipped.json"}
        members = sorted(f["file"] for f in manifest["fields"].values())
        for name in [*members, "skipped.json"]:
            put(self.remote, self.dir / name, name)
        put(self.remote, self.dir / MANIFEST_NAME, MANIFEST_NAME)
        keep |= set(members)
        for name in _listing(self.remote):
            if name not in keep:
                self._remove(self.remote, name)
        self._remove(self.staging, "")

    @staticmethod
    def _remove(remote: Remote, name: str) -> None:
        target = posixpath.join(remote.path, name) if name else remote.path
        remote.fs.invalidate_cache(target)
        with contextlib.suppress(FileNotFoundError):
            remote.fs.rm(target, recursive=not name)

    def release(self) -> None:
        """Delete the local folder (the remote staging stays, for --resume)."""
        shutil.rmtree(self.dir, ignore_errors=True)


__all__ = ["RemoteStage", "RemoteStaging", "staging_url"]
