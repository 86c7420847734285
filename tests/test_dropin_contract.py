"""The drop-in keeps torch DataLoader's contract (issue 47, items 1-8): each test reproduces one
way FastLoader(dataset) used to differ from DataLoader(dataset), and holds the fix."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import time

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

from dropin_samples import (
    Dies,
    Holder,
    Numbers,
    Ragged,
    Samples,
    Stream,
    Unpicklable,
    WithLambda,
    nest,
    outcomes,
    same_outcomes,
)
from fastloader import FastLoader
from fastloader.errors import InvalidArgumentError, ProducerError
from fastloader.loader.pipeline.stats import batch_size_of

# the drop-in over torch datasets: nothing the extension decodes
pytestmark = pytest.mark.native_neutral

# -- 1: an error in a batch does not end the pass ------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_an_error_in_a_batch_does_not_end_the_pass(workers: int) -> None:
    with FastLoader(Numbers(8, bad=(2,)), batch_size=2, num_workers=workers) as loader:
        seen = outcomes(loader)
    expected = [torch.tensor([0, 1]), "ValueError", torch.tensor([4, 5]), torch.tensor([6, 7])]
    assert same_outcomes(seen, expected), seen
    assert same_outcomes(outcomes(DataLoader(Numbers(8, bad=(2,)), batch_size=2,
                                             num_workers=workers)), expected)


def test_the_iterator_is_an_iterator_with_dataloaders_len() -> None:
    with FastLoader(Numbers(10), batch_size=4, num_workers=0) as loader:
        iterator = iter(loader)
        assert iter(iterator) is iterator and len(iterator) == 3
        assert [b.tolist() for b in iterator] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
        with pytest.raises(StopIteration):  # and stays finished
            next(iterator)


# -- 2: assignment after construction is refused -------------------------------------------------


@pytest.mark.parametrize("name", ["batch_size", "sampler", "batch_sampler", "dataset",
                                  "drop_last", "persistent_workers"])
def test_assignment_after_construction_is_refused(name: str) -> None:
    values = {"batch_size": 10, "sampler": [0, 1], "batch_sampler": [[0, 1]],
              "dataset": Numbers(3), "drop_last": True, "persistent_workers": False}
    reference = DataLoader(Numbers(10), batch_size=4)
    with pytest.raises(ValueError, match=f"{name} attribute should not be set after DataLoader"):
        setattr(reference, name, values[name])
    with FastLoader(Numbers(10), batch_size=4, num_workers=0) as loader:
        with pytest.raises(InvalidArgumentError,
                           match=rf"{name} attribute should not be set after DataLoader is "
                                 rf"initialized.*FastLoader\("):
            setattr(loader, name, values[name])
        assert [len(b) for b in loader] == [4, 4, 2]  # as built
        loader.device = None  # the loader's own attributes are not DataLoader's
        assert loader.device is None


# -- 3: contradictory arguments are refused with DataLoader's reasons ------------------------------


def batches_of_two() -> BatchSampler:
    return BatchSampler(SequentialSampler(range(10)), batch_size=2, drop_last=False)


@pytest.mark.parametrize(("arguments", "named"), [
    ({"batch_size": 4}, r"batch_size=4 is invalid: batch_sampler option is mutually exclusive"),
    ({"shuffle": True}, r"shuffle=True is invalid: batch_sampler option is mutually exclusive"),
    ({"drop_last": True}, r"drop_last=True is invalid: batch_sampler option is mutually"),
    ({"batch_size": None}, r"batch_size=None is invalid: batch_sampler option is mutually"),
    ({"sampler": [0, 1]}, r"sampler=\[0, 1\] is invalid: batch_sampler option is mutually"),
])
def test_arguments_beside_a_batch_sampler_are_refused(arguments: dict, named: str) -> None:
    with pytest.raises(ValueError, match="batch_sampler option is mutually exclusive"):
        DataLoader(Numbers(10), batch_sampler=batches_of_two(), **arguments)
    with pytest.raises(InvalidArgumentError, match=named + r".*the batch_sampler makes "
                       r"the batches.*batch_sampler=BatchSampler\("):
        FastLoader(Numbers(10), batch_sampler=batches_of_two(), num_workers=0, **arguments)


def test_shuffle_beside_a_sampler_is_refused() -> None:
    with pytest.raises(ValueError, match="sampler option is mutually exclusive with shuffle"):
        DataLoader(Numbers(10), sampler=[3, 2, 1], shuffle=True)
    with pytest.raises(InvalidArgumentError, match=r"shuffle=True is invalid: sampler option is "
                       r"mutually exclusive with shuffle.*RandomSampler"):
        FastLoader(Numbers(10), sampler=[3, 2, 1], shuffle=True, num_workers=0)
    with FastLoader(Numbers(10), sampler=[3, 2, 1], batch_size=2, num_workers=0,
                    batch_sampler=None) as loader:  # None is no batch_sampler, as in torch
        assert [b.tolist() for b in loader] == [[3, 2], [1]]


# -- 4: nested tensors (and any batch torch collates) count in stats -------------------------------


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_nested_tensor_batches_count() -> None:
    nested = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])
    assert batch_size_of(nested) == 2
    assert batch_size_of({"name": ["a", "b", "c"]}) == 3  # strings collate to a list
    assert batch_size_of((torch.zeros(4, 2), torch.zeros(4))) == 4
    with FastLoader(Ragged(), batch_size=3, collate_fn=nest, num_workers=0) as loader:
        assert [b.size(0) for b in loader] == [3, 3, 1]
        assert loader.stats().images == 7
    with FastLoader(Samples("nested"), batch_size=None, num_workers=0) as loader:
        assert all(b.is_nested for b in loader)  # one sample a batch, each nested


# -- 5: a sample that cannot be pickled is an error, never a hang ---------------------------------


@pytest.mark.timeout(90)
def test_a_sample_that_cannot_be_pickled_is_an_error_not_a_hang() -> None:
    # timeout= only bounds the old hang (it would end it as "timed out"): the error is at once
    with FastLoader(Unpicklable(), batch_size=2, timeout=30) as loader:
        assert loader.num_workers > 0  # the drop-in's default: workers
        started = time.monotonic()
        seen = outcomes(loader)
        assert time.monotonic() - started < 20
        assert seen == ["ProducerError", "ProducerError"]  # every batch says so; no hang
        with pytest.raises(ProducerError, match=r"cannot be sent to the main process.*"
                           r"Pair.*top level.*num_workers=0"):
            next(iter(loader))
    with FastLoader(Unpicklable(), batch_size=2, num_workers=0) as loader:
        pair = Holder.Pair  # in this process it needs no pickling: torch's default works
        assert same_outcomes(list(loader), [pair(torch.tensor([0, 1]), torch.tensor([0, -1])),
                                            pair(torch.tensor([2, 3]), torch.tensor([-2, -3]))])


def test_batches_from_workers_are_the_batches_and_collate_fn_is_the_users() -> None:
    with FastLoader(Numbers(6), batch_size=3, num_workers=1, collate_fn=list) as loader:
        assert loader.collate_fn is list
        assert list(loader) == [[0, 1, 2], [3, 4, 5]]


@pytest.mark.timeout(90)
def test_a_worker_that_dies_ends_the_pass_with_an_error_in_a_bound() -> None:
    started = time.monotonic()
    with (FastLoader(Dies(at=2), batch_size=1, num_workers=1, timeout=30) as loader,
          pytest.raises(RuntimeError, match="exited unexpectedly")):
        list(loader)
    assert time.monotonic() - started < 20


@pytest.mark.heavy  # a spawned worker imports torch
def test_a_dataset_that_cannot_cross_to_a_spawned_worker_is_an_error_at_iter() -> None:
    import pickle

    # pickled in this process before any worker starts: DataLoader's error names the lambda
    with FastLoader(WithLambda(), batch_size=2, num_workers=1,
                    multiprocessing_context="spawn") as loader, pytest.raises(
            (pickle.PicklingError, AttributeError), match=r"(?i)can't pickle.*lambda"):
        iter(loader)


# -- 6: shuffle of iterable datasets: datapipes shuffle as in torch; a plain one is refused --


def test_datapipes_shuffle_as_in_torch() -> None:
    from torch.utils.data.datapipes.iter import IterableWrapper

    def pipe():
        return IterableWrapper(range(10)).shuffle()

    for options in ({"shuffle": True}, {"shuffle": False}, {}):
        reference = DataLoader(pipe(), batch_size=5, generator=torch.Generator().manual_seed(3),
                               **options)
        with FastLoader(pipe(), batch_size=5, seed=3, **options) as loader:
            assert same_outcomes(list(loader), list(reference)), options
    with FastLoader(pipe(), batch_size=10, shuffle=True, seed=3) as loader:
        (first,) = list(loader)
        assert sorted(first.tolist()) == list(range(10)) and first.tolist() != list(range(10))


def test_shuffle_of_a_plain_iterable_dataset_is_refused_as_torch_refuses_it() -> None:
    with pytest.raises(ValueError, match="expected unspecified shuffle option"):
        DataLoader(Stream(), shuffle=True)
    with pytest.raises(InvalidArgumentError, match=r"shuffle=True is invalid: does not apply to "
                       r"an iterable dataset \(Stream\)"):
        FastLoader(Stream(), shuffle=True)


# -- 7: iter() starts the pass ------------------------------------------------------------------


def test_iter_starts_the_pass_as_dataloader_does() -> None:
    stream = Stream(4)
    with FastLoader(stream, batch_size=2) as loader:
        iterator = iter(loader)
        assert stream.iterated == 1  # DataLoader calls iter(dataset) at iter(loader)
        assert [b.tolist() for b in iterator] == [[0, 1], [2, 3]]
    before = set(multiprocessing.active_children())
    with FastLoader(Numbers(4), batch_size=2, num_workers=1) as loader:
        iterator = iter(loader)
        assert len(set(multiprocessing.active_children()) - before) == 1  # started, no next()
        assert next(iterator).tolist() == [0, 1]


def test_too_many_workers_warn_at_iter() -> None:
    from torch.utils.data import dataloader

    too_many = len(dataloader.os.sched_getaffinity(0)) + 1
    with pytest.warns(UserWarning, match="worker processes in total"):
        loader = FastLoader(Numbers(4), batch_size=2, num_workers=too_many)
    with loader, pytest.warns(UserWarning, match="worker processes in total"):
        iter(loader)


# -- 8: an unfinished iterator is quiet at exit ---------------------------------------------------

QUIET_EXIT = """
import sys
import torch
from fastloader import FastLoader
# held by a module that outlives fastloader's at interpreter exit; 0 workers, then 2
sys._unfinished = [iter(FastLoader([torch.ones(2)] * 8, batch_size=2, num_workers=workers))
                   for workers in (0, 2)]
assert [next(i).shape for i in sys._unfinished] == [(2, 2), (2, 2)]
"""


@pytest.mark.heavy  # a fresh interpreter
def test_an_unfinished_iterator_is_quiet_at_exit() -> None:
    done = subprocess.run([sys.executable, "-c", QUIET_EXIT], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
