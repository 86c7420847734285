"""A kind of encoded files registered from outside the package (a toy "mesh" kind, here) is
found by every importer from what it declares, with no importer edited: WebDataset members by
its extensions, a table column by its name or its cells' file names, a Hugging Face feature by
its name; each file stored as given with the facts its `facts()` proves, and verified."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from fastloader.errors import DecodeError, PackError
from fastloader.format import kinds
from fastloader.format.kinds.encoded import EncodedKind, encoded_kinds
from fastloader.format.open import open_dataset
from fastloader.pack.api import pack
from fastloader.pack.maintain.verify import verify

MAGIC = b"MESH"


pytestmark = pytest.mark.native_neutral


class MeshKind(EncodedKind):
    """A toy file format: MAGIC, then a vertex count byte, then 3 bytes a vertex."""

    extensions = (".mesh",)
    columns = ("mesh", "mesh_path")
    feature = "Mesh"
    meta = ("vertices",)

    def facts(self, data: bytes) -> tuple[int, ...]:
        if data[:4] != MAGIC or len(data) != 5 + 3 * data[4]:
            raise DecodeError("not a whole mesh")
        return (data[4],)

    def record_shape(self, spec: object, stored: kinds.WithMeta) -> tuple[int, int]:
        return 1, max(1, stored.meta[0])


def _mesh(vertices: int) -> bytes:
    return MAGIC + bytes([vertices]) + bytes(range(3 * vertices))


@pytest.fixture()
def mesh() -> Iterator[MeshKind]:
    kind = kinds.register(MeshKind("mesh"))
    yield kind
    kinds.unregister("mesh")


def _check(root: Path, field: str, meshes: list[bytes]) -> None:
    ds = open_dataset(root)
    assert ds.fields[field].kind.name == "mesh"
    assert [bytes(ds.sample(i)[field]) for i in range(len(ds))] == meshes  # as given
    assert ds.columns is not None
    assert ds.columns.meta(field)[:, 0].tolist() == [m[4] for m in meshes]
    ds.close()
    assert verify(root, decode=True).ok


def test_the_kind_lists_itself(mesh: MeshKind) -> None:
    assert mesh in encoded_kinds() and kinds.AUDIO in encoded_kinds()


def test_tar_members_by_the_kinds_extension(mesh: MeshKind, tmp_path: Path) -> None:
    meshes = [_mesh(k + 1) for k in range(3)]
    with tarfile.open(tmp_path / "shard.tar", "w") as tar:
        for k, data in enumerate(meshes):
            for name, member in ((f"s{k}.mesh", data), (f"s{k}.cls", str(k).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(member)
                tar.addfile(info, io.BytesIO(member))
    pack(str(tmp_path / "shard.tar"), tmp_path / "t.lmdb")
    _check(tmp_path / "t.lmdb", "mesh", meshes)


@pytest.mark.parametrize("column", ["mesh_path", "shape_file"])
def test_a_table_column_by_its_name_or_its_files(mesh: MeshKind, tmp_path: Path,
                                                 column: str) -> None:
    meshes = [_mesh(k + 2) for k in range(3)]
    lines = []
    for k, data in enumerate(meshes):
        (tmp_path / f"{k}.mesh").write_bytes(data)
        lines.append(json.dumps({column: f"{k}.mesh", "caption": f"mesh {k}"}))
    (tmp_path / "t.jsonl").write_text("\n".join(lines) + "\n")
    pack(str(tmp_path / "t.jsonl"), tmp_path / "t.lmdb")
    _check(tmp_path / "t.lmdb", "mesh", meshes)


def test_a_hugging_face_feature_of_the_kind(mesh: MeshKind, tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    meshes = [_mesh(k + 1) for k in range(2)]
    table = pa.table({"shape": [{"bytes": m, "path": f"{k}.mesh"} for k, m in enumerate(meshes)]})
    features = {"shape": {"_type": "Mesh"}}
    table = table.replace_schema_metadata(
        {"huggingface": json.dumps({"info": {"features": features}})})
    pq.write_table(table, tmp_path / "t.parquet")
    pack(str(tmp_path / "t.parquet"), tmp_path / "t.lmdb")
    _check(tmp_path / "t.lmdb", "mesh", meshes)


def test_a_broken_file_is_refused_by_the_kinds_own_check(mesh: MeshKind, tmp_path: Path) -> None:
    (tmp_path / "0.mesh").write_bytes(_mesh(2)[:-1])
    (tmp_path / "t.jsonl").write_text(json.dumps({"mesh": "0.mesh"}) + "\n")
    with pytest.raises(PackError, match="not a whole mesh"):
        pack(str(tmp_path / "t.jsonl"), tmp_path / "t.lmdb")


def test_without_the_kind_its_files_are_bytes(tmp_path: Path) -> None:
    """Unregistered, a .mesh member is a bytes field, which cannot be a dataset's records."""
    with tarfile.open(tmp_path / "shard.tar", "w") as tar:
        data = _mesh(1)
        info = tarfile.TarInfo("s0.mesh")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(PackError, match=r"no field of kind 'image' or 'audio' or 'video' "
                                        r"among \['mesh'\]"):
        pack(str(tmp_path / "shard.tar"), tmp_path / "t.lmdb")
