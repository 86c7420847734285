"""Weighted mixing: FastLoader([a, b], weights=...) over packed datasets: shares, epoch sizes,
determinism on any thread count, sharding, exact and elastic resume, refusals, joined classes
and fields (one process; real gloo ranks are in test_mix_ddp.py)."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import fastloader
from fastloader import FastLoader
from fastloader.decode.augment import RandomHorizontalFlip, RandomResizedCrop, Resize
from fastloader.errors import InvalidArgumentError
from fastloader.format.open import open_dataset
from fastloader.loader.mix.loader import MixLoader
from fastloader.loader.order.epoch_order import BIJECTION, PERMUTATION
from fastloader.loader.order.mix_order import MixOrder, epoch_length, shares
from fastloader.pack.pipeline.tree import pack
from helpers import same_batches, upload_tree
from imagegen import encode, make_tree, photo_like

OPTIONS: dict[str, Any] = {"device": "cpu", "num_threads": 1,
                           "transforms": [RandomResizedCrop(8), RandomHorizontalFlip()]}


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """a.lmdb: 3 classes x 10 (class_0..2); b.lmdb: 4 classes x 12, its class_0 renamed
    "zebra" (b's classes: class_1..3, zebra; joined: class_0..3, zebra)."""
    root = tmp_path_factory.mktemp("mix")
    make_tree(root / "ta", classes=3, per_class=10, size=(12, 16))
    make_tree(root / "tb", classes=4, per_class=12, size=(14, 16), seed=5)
    (root / "tb" / "class_0").rename(root / "tb" / "zebra")
    pack(root / "ta", root / "a.lmdb", workers=1, quiet=True)
    pack(root / "tb", root / "b.lmdb", workers=1, quiet=True)
    return root / "a.lmdb", root / "b.lmdb"


def _batches(loader: Any) -> list[tuple[torch.Tensor, ...]]:
    """A pass's batches, cloned (ring slots are reused)."""
    return [tuple(t.clone() for t in batch) for batch in loader]


def _stopped(loader: Any, steps: int) -> tuple[list[tuple[torch.Tensor, ...]], dict]:
    """The first `steps` batches of a pass and the checkpoint taken then, mid-pass (a pass
    whose iterator is dropped has ended: its state is the next epoch's start)."""
    iterator = iter(loader)
    head = [tuple(t.clone() for t in batch) for batch in itertools.islice(iterator, steps)]
    return head, loader.state_dict()


def _ids(loader: MixLoader, epoch: int) -> np.ndarray:
    """This rank's sample ids of `epoch` (the mix's global ids)."""
    return loader.sampler.indices(epoch)


def test_a_one_to_three_mix_gives_that_share_over_an_epoch(two: tuple[Path, Path]) -> None:
    a, b = two
    with FastLoader([a, b], weights=[1, 3], batch_size=7, shuffle=True, source_index=True,
                    **OPTIONS) as loader:
        assert isinstance(loader, MixLoader)
        sources = torch.cat([batch[2] for batch in loader]).numpy()
    share = np.mean(sources == 0)
    assert len(sources) == 30 + 48  # an epoch is the sources' sizes added up
    assert abs(share - 0.25) < 0.04, share
    # every rank's share of it keeps the mix too (DDP: disjoint, covering, plus padding)
    per_rank = []
    for rank in range(3):
        with FastLoader([a, b], weights=[1, 3], batch_size=7, shuffle=True, rank=rank,
                        world_size=3, **OPTIONS) as loader:
            per_rank.append(_ids(loader, 0))
            order = loader.sampler.source.epoch_order(0, 0)
    assert sorted(np.concatenate(per_rank).tolist()) == sorted(order.tolist())
    assert all(abs(np.mean(ids < 30) - 0.25) < 0.1 for ids in per_rank)


def test_epoch_sizes_and_draws_follow_their_rule() -> None:
    weights = (0.25, 0.75)
    assert epoch_length(None, [30, 48], weights) == 78
    assert epoch_length("shortest", [30, 48], weights) == 64  # b runs out at 48 / 0.75
    assert epoch_length("longest", [30, 48], weights) == 120  # a runs out at 30 / 0.25
    assert epoch_length(10, [30, 48], weights) == 10
    assert shares(10, weights).tolist() == [3, 7]  # largest remainder: 2.5 -> 3, 7.5 -> 7
    order = MixOrder([30, 48], weights, 120, False, True, 4)
    ids = order.epoch_order(4, 0)
    counts = Counter(ids.tolist())
    assert all(counts[i] == 1 for i in range(30))  # "longest": every a sample once ...
    assert sorted(counts[i] for i in range(30, 78)) == [1] * 6 + [2] * 42  # b repeated 90/48
    # without replacement a source's epochs continue its passes: two epochs of 10 of 30
    # samples are 20 different ones; with replacement they are drawn at random
    small = MixOrder([30, 48], weights, 40, False, True, 4)
    first, second = (small.epoch_order(4, e) for e in (0, 1))
    assert len(set(first[first < 30]) | set(second[second < 30])) == 20
    for replacement, spread in ((False, 1), (True, 2)):  # 100 a picks of 30 samples:
        drawn = MixOrder([30, 48], weights, 400, replacement, True, 4).epoch_order(4, 0)
        counts = np.bincount(drawn[drawn < 30], minlength=30)  # passes: 3 or 4 times each
        assert counts.sum() == 100 and (counts.max() - counts.min() > 1) == (spread > 1)
    # shuffle=False interleaves evenly: a 1:3 mix reads a, b, b, b, a, b, b, b, ...
    plain = MixOrder([30, 48], weights, 8, False, False, 0).epoch_order(0, 0)
    assert (plain < 30).tolist() == [True, False, False, False] * 2


@pytest.mark.parametrize("replacement", [False, True])
def test_the_bijection_kind_draws_by_the_same_rule_at_this_ranks_positions(
        replacement: bool) -> None:
    """Past ORDER_LIMIT a rank evaluates its own positions only: the shares of 3 ranks are
    the whole epoch's order, each source gives its count, passes do not repeat a sample."""
    order = MixOrder([300, 500], (0.25, 0.75), 1000, replacement, True, 7)
    whole = order.at(7, 2, np.arange(1000))
    shares_ = [order.rank_share(7, 2, 0, r, 3, False, BIJECTION) for r in range(3)]
    assert sorted(np.concatenate(shares_).tolist()) == sorted(
        whole.tolist() + whole[:2].tolist())  # 1000 on 3 ranks: 2 padding repeats
    assert int(np.sum(whole < 300)) == 250
    counts = np.bincount(whole[whole >= 300] - 300, minlength=500)
    assert (counts.max() - counts.min() > 1) == replacement  # passes: 1 or 2 times each
    moved = order.rank_share(7, 2, 400, 1, 2, True, BIJECTION)
    assert moved.tolist() == whole[401:1000:2].tolist()  # a resumed pass: the rest, strided
    assert not np.array_equal(whole, order.at(7, 3, np.arange(1000)))  # epochs differ


def test_the_same_batches_for_a_seed_on_any_thread_count(two: tuple[Path, Path]) -> None:
    a, b = two
    runs = []
    for threads in (1, 3):
        with FastLoader({"a": a, "b": b}, weights={"a": 1, "b": 3}, batch_size=5,
                        shuffle=True, seed=3, **{**OPTIONS, "num_threads": threads}) as loader:
            runs.append(_batches(loader))
    assert same_batches(runs[0], runs[1])
    with FastLoader({"a": a, "b": b}, weights={"a": 1, "b": 3}, batch_size=5, shuffle=True,
                    seed=4, **OPTIONS) as loader:
        assert not same_batches(runs[0], _batches(loader))


def test_resumes_exactly_mid_epoch(two: tuple[Path, Path]) -> None:
    a, b = two
    args: dict[str, Any] = {"weights": [1, 3], "batch_size": 6, "shuffle": True, "seed": 2,
                            **OPTIONS}
    with FastLoader([a, b], **args) as loader:
        loader.set_epoch(1)
        whole = _batches(loader)
        loader.set_epoch(1)
        head, state = _stopped(loader, 4)
    assert same_batches(head, whole[:4])
    with FastLoader([a, b], **args) as resumed:
        resumed.load_state_dict(state)
        assert same_batches(_batches(resumed), whole[4:])


@pytest.mark.parametrize("kind", [PERMUTATION, BIJECTION])
def test_resumes_on_another_world_and_batch_size(two: tuple[Path, Path], kind: str) -> None:
    a, b = two
    delivered: list[int] = []
    states = []
    for rank in range(2):  # 2 ranks, 3 batches of 4 each: 24 samples of 78 delivered
        with FastLoader([a, b], weights=[1, 3], batch_size=4, shuffle=True, rank=rank,
                        world_size=2, **OPTIONS) as loader:
            loader.sampler.order_kind = kind  # the bijection: past ORDER_LIMIT samples
            delivered += _ids(loader, 0)[:12].tolist()
            states.append(_stopped(loader, 3)[1])
    rest: list[int] = []
    for rank in range(3):  # resumed on 3 ranks, batches of 5, from another rank's state
        with FastLoader([a, b], weights=[1, 3], batch_size=5, shuffle=True, rank=rank,
                        world_size=3, **OPTIONS) as loader:
            loader.load_state_dict(states[(rank + 1) % 2])  # its run's kind comes with it
            rest += loader.sampler.indices().tolist()
            assert sum(len(batch[0]) for batch in _batches(loader)) == 18
    mix = MixOrder([30, 48], (0.25, 0.75), 78, False, True, 0)
    order = mix.epoch_order(0, 0) if kind == PERMUTATION else mix.at(0, 0, np.arange(78))
    assert sorted(delivered) == sorted(order[:24].tolist())
    assert sorted(rest) == sorted(order[24:].tolist())  # 54 left: 18 a rank, no padding


def test_bad_states_are_refused_naming_the_field(two: tuple[Path, Path]) -> None:
    a, b = two
    with FastLoader([a, b], weights=[1, 3], batch_size=4, shuffle=True, **OPTIONS) as loader:
        state = _stopped(loader, 2)[1]
    cases = [({"weights": [1, 1]}, r"state\['mix'\]\['weights'\]"),
             ({"epoch_size": 40}, r"state\['mix'\]\['epoch_size'\]"),
             ({"replacement": True}, r"state\['mix'\]\['replacement'\]"),
             ({"seed": 1}, r"state\['seed'\]"),
             ({"shuffle": False}, r"state\['shuffle'\]")]
    for change, field in cases:
        args: dict[str, Any] = {"weights": [1, 3], "batch_size": 4, "shuffle": True,
                                **OPTIONS, **change}
        with FastLoader([a, b], **args) as other, pytest.raises(InvalidArgumentError,
                                                                match=field):
            other.load_state_dict(state)
    with FastLoader([b, a], weights=[3, 1], batch_size=4, shuffle=True, **OPTIONS) as other, \
            pytest.raises(InvalidArgumentError, match=r"state\['mix'\]\['sources'\]"):
        other.load_state_dict(state)
    with FastLoader(a, batch_size=4, shuffle=True, **OPTIONS) as single:
        with pytest.raises(InvalidArgumentError, match=r"state\['mix'\]"):
            FastLoader([a, b], batch_size=4, **OPTIONS).load_state_dict(single.state_dict())
        with pytest.raises(InvalidArgumentError, match=r"state\['num_samples'\]"):
            single.load_state_dict(state)


def test_classes_are_joined_by_name_and_labels_remapped(two: tuple[Path, Path]) -> None:
    a, b = two
    with FastLoader([a, b], batch_size=16, source_index=True, **OPTIONS) as loader:
        assert loader.classes == ["class_0", "class_1", "class_2", "class_3", "zebra"]
        assert loader.source_names == [str(a), str(b)]
        got = [(int(s), loader.classes[int(y)]) for _, ys, ss in loader
               for y, s in zip(ys, ss, strict=True)]
    want = []
    for s, path in enumerate((a, b)):
        with open_dataset(path) as ds:
            want += [(s, ds.classes[int(y)]) for y in ds.labels]
    assert sorted(got) == sorted(want)


def test_sources_with_other_fields_are_refused_naming_them(tmp_path: Path,
                                                           two: tuple[Path, Path]) -> None:
    samples = [{"image": encode(photo_like(12, 16, k)), "label": k % 2, "caption": f"c{k}"}
               for k in range(6)]
    fastloader.pack(samples, tmp_path / "v2.lmdb", workers=1,
                    fields={"image": "image", "label": "int", "caption": "text"})
    with pytest.raises(InvalidArgumentError, match=r"'caption'.*same fields"):
        FastLoader([two[0], tmp_path / "v2.lmdb"], **OPTIONS)
    other = [{**s, "caption": k} for k, s in enumerate(samples)]
    fastloader.pack(other, tmp_path / "v2int.lmdb", workers=1,
                    fields={"image": "image", "label": "int", "caption": "int"})
    with pytest.raises(InvalidArgumentError, match=r"field 'caption'"):
        FastLoader([tmp_path / "v2.lmdb", tmp_path / "v2int.lmdb"], **OPTIONS)
    # the same fields mix, each sample's values read from its own source
    more = [{**s, "caption": f"d{k}"} for k, s in enumerate(samples)]
    fastloader.pack(more, tmp_path / "v2b.lmdb", workers=1,
                    fields={"image": "image", "label": "int", "caption": "text"})
    with FastLoader({"c": tmp_path / "v2.lmdb", "d": tmp_path / "v2b.lmdb"}, batch_size=4,
                    fields=("caption", "label"), source_index=True,
                    **{**OPTIONS, "transforms": [Resize((8, 8))]}) as loader:
        rows = [(c, int(s)) for captions, _, sources in loader
                for c, s in zip(captions, sources, strict=True)]
    assert sorted(rows) == sorted([(f"c{k}", 0) for k in range(6)] +
                                  [(f"d{k}", 1) for k in range(6)])


def test_shared_fields_mix_sources_whose_fields_differ(tmp_path: Path,
                                                       two: tuple[Path, Path]) -> None:
    samples = [{"image": encode(photo_like(12, 16, k)), "label": k % 2, "caption": f"c{k}"}
               for k in range(6)]
    fastloader.pack(samples, tmp_path / "v2.lmdb", workers=1,
                    fields={"image": "image", "label": ("int", ["class_1", "yak"]),
                            "caption": "text"})
    with FastLoader([two[0], tmp_path / "v2.lmdb"], shared_fields=True, batch_size=36,
                    source_index=True, **OPTIONS) as loader:
        assert loader.classes == ["class_0", "class_1", "class_2", "yak"]
        assert list(loader.dataset.fields) == ["image", "label"]
        _, labels, sources = next(iter(loader))
    got = sorted(zip(sources.tolist(), [loader.classes[y] for y in labels.tolist()],
                     strict=True))
    assert got == sorted([(0, f"class_{k // 10}") for k in range(30)] +
                         [(1, ["class_1", "yak"][k % 2]) for k in range(6)])
    with pytest.raises(InvalidArgumentError, match="has no field 'caption'"):
        FastLoader([two[0], tmp_path / "v2.lmdb"], shared_fields=True, fields=("caption",),
                   **OPTIONS)


def test_bad_mix_arguments_are_refused(two: tuple[Path, Path]) -> None:
    a, b = two
    bad: list[tuple[dict[str, Any], str]] = [
        ({"weights": [1]}, "weights"), ({"weights": [1, -1]}, r"weights\[.*\]"),
        ({"weights": [0, 0]}, "all 0"), ({"weights": {"x": 1}}, "not sources"),
        ({"epoch_size": "most"}, "epoch_size"), ({"shuffle_window": 2}, "shuffle_window"),
        ({"sampler": [0, 1]}, "sampler"), ({"cache_dir": "/tmp"}, "URL only")]
    for args, match in bad:
        with pytest.raises((InvalidArgumentError, TypeError), match=match):
            FastLoader([a, b], **{**OPTIONS, **args})
    # a list that is not of packed datasets is still a dataset for the drop-in loader
    with FastLoader([torch.zeros(3), torch.ones(3)], batch_size=2) as dropin:
        assert not isinstance(dropin, MixLoader)


def test_a_url_source_mixes_with_a_local_one(two: tuple[Path, Path], s3: Any,
                                             tmp_path: Path) -> None:
    a, b = two
    upload_tree(b, "s3://bucket/b.lmdb")
    args: dict[str, Any] = {"weights": [1, 3], "batch_size": 8, "shuffle": True, **OPTIONS}
    with FastLoader([a, b], **args) as local:
        want = _batches(local)
    with FastLoader([a, "s3://bucket/b.lmdb"], cache_dir=tmp_path / "c", **args) as remote:
        assert remote.classes == ["class_0", "class_1", "class_2", "class_3", "zebra"]
        assert same_batches(_batches(remote), want)  # the same content: the same batches
    with pytest.raises(InvalidArgumentError, match="cache_dir"):
        FastLoader([a, b], cache_dir=tmp_path / "c", **args)


def test_a_list_of_strings_that_are_not_datasets_names_both_readings(tmp_path: Path) -> None:
    """A list of paths is a mix; one that holds no dataset is refused saying how to load the
    list as a plain dataset instead (torch's DataLoader reads a list as one)."""
    from fastloader.errors import DatasetNotFoundError

    with pytest.raises(DatasetNotFoundError, match=r"a\.jpg.*mix of packed datasets.*"
                       r"torch\.utils\.data\.Dataset"):
        FastLoader([str(tmp_path / "a.jpg"), str(tmp_path / "b.jpg")], batch_size=2)


def _boxes_source(root: Path, boxes_per_sample: int, count: int) -> Path:
    """A packed dataset whose sample i has `boxes_per_sample` boxes, all at x0 = i."""
    samples = [{"image": encode(photo_like(40, 48, i)), "label": i % 3,
                "boxes": np.array([[i, 2, i + 5, 9]] * boxes_per_sample, np.float32).reshape(-1, 4)}
               for i in range(count)]
    fastloader.pack(samples, root, fields={"image": "image", "boxes": "boxes", "label": "int"},
                    workers=1)
    return root


def test_a_mix_gathers_each_samples_boxes_from_its_source(tmp_path: Path) -> None:
    from fastloader.format.mixed import MixedDataset

    a = _boxes_source(tmp_path / "a.lmdb", 1, 6)
    b = _boxes_source(tmp_path / "b.lmdb", 2, 5)
    with open_dataset(a) as first, open_dataset(b) as second, \
            MixedDataset([first, second], ["a", "b"]) as mix:
        picked = np.array([7, 0, 10, 5, 6])  # b's 1st, a's 0th, b's 4th, a's 5th, b's 0th
        arrays = mix.columns.gather_arrays("boxes", picked)
    assert [len(box) for box in arrays] == [2, 1, 2, 1, 2]
    assert [float(box[0, 0]) for box in arrays] == [1.0, 0.0, 4.0, 5.0, 0.0]
    # and a loader over the mix delivers every box (it raised AttributeError before)
    with FastLoader({"a": a, "b": b}, batch_size=4, device="cpu", num_threads=1,
                    transforms=[Resize((24, 24))], fields=("image", "boxes", "label")) as loader:
        counts = sorted(len(boxes) for batch in loader for boxes in batch[1])
    assert counts == sorted([1] * 6 + [2] * 5)
