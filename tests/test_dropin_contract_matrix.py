"""The drop-in beside torch's own DataLoader, case by case (issue 47's behaviour matrix): the same
batches, errors mid-epoch, len() and refusals, over samplers and batch samplers, shuffle and
drop_last, 0/1/2 workers, fork/spawn/forkserver, iterable datasets with and without __len__, and
dict, namedtuple, string and nested-tensor samples."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler

from dropin_samples import (
    Numbers,
    Offset,
    Ragged,
    Samples,
    SizedStream,
    Stream,
    nest,
    offset_by_worker,
    outcomes,
    refusal,
    same_outcomes,
)
from fastloader import FastLoader
from fastloader.errors import InvalidArgumentError

SEED = 7
WORKERS = [0, 1, 2]

# the drop-in over torch datasets: nothing the extension decodes
pytestmark = [pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors"),
              pytest.mark.native_neutral]


def side_by_side(dataset: Callable[[], Any], arguments: Callable[[], dict[str, Any]],
                 workers: int, **context: Any) -> tuple[list[Any], list[Any]]:
    """The outcomes of a pass of the drop-in and of DataLoader, each over its own dataset and
    arguments (a sampler is stateful); shuffle draws from a generator seeded alike."""
    with FastLoader(dataset(), seed=SEED, num_workers=workers, **context,
                    **arguments()) as loader:
        ours = outcomes(loader)
    options = arguments()
    if options.get("shuffle") and "generator" not in options:
        options["generator"] = torch.Generator().manual_seed(SEED)
    theirs = outcomes(DataLoader(dataset(), num_workers=workers, **context, **options))
    return ours, theirs


def lens(dataset: Callable[[], Any], **arguments: Any) -> tuple[Any, Any]:
    """len() of the drop-in and of DataLoader, or the type of the error it raises."""
    def length(loader: Any) -> Any:
        try:
            return len(loader)
        except TypeError as error:
            return type(error)

    with FastLoader(dataset(), num_workers=0, **arguments) as loader:
        return length(loader), length(DataLoader(dataset(), **arguments))


# -- batch_sampler / sampler / shuffle / drop_last, 0/1/2 workers ---------------------------------

ORDERS: dict[str, Callable[[], dict[str, Any]]] = {
    "defaults": lambda: {},
    "batch_size": lambda: {"batch_size": 3},
    "drop_last": lambda: {"batch_size": 3, "drop_last": True},
    "shuffle": lambda: {"batch_size": 4, "shuffle": True},
    "shuffle_drop_last": lambda: {"batch_size": 4, "shuffle": True, "drop_last": True},
    "sampler": lambda: {"batch_size": 4, "sampler": [9, 0, 8, 1, 7, 2]},
    "random_sampler": lambda: {"batch_size": 3, "sampler": RandomSampler(
        range(10), generator=torch.Generator().manual_seed(3))},
    "batch_sampler": lambda: {"batch_sampler": BatchSampler(
        SequentialSampler(range(10)), batch_size=4, drop_last=True)},
    "ragged_batch_sampler": lambda: {"batch_sampler": [[3, 1], [4, 1, 5, 9], [2]]},
    "no_batching": lambda: {"batch_size": None},
    "no_batching_sampler": lambda: {"batch_size": None, "sampler": [5, 3, 1]},
}


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("order", list(ORDERS))
def test_orders_give_dataloaders_batches(order: str, workers: int) -> None:
    ours, theirs = side_by_side(Numbers, ORDERS[order], workers)
    assert ours and same_outcomes(ours, theirs), (ours, theirs)


@pytest.mark.parametrize("order", ["batch_size", "drop_last", "batch_sampler", "no_batching"])
def test_len_is_dataloaders(order: str) -> None:
    ours, theirs = lens(Numbers, **ORDERS[order]())
    assert ours == theirs


# -- refusals: the same arguments refused (or taken) as DataLoader refuses them -------------------

REFUSED: dict[str, tuple[Callable[[], Any], Callable[[], dict[str, Any]]]] = {
    "batch_sampler_and_batch_size": (Numbers, lambda: {
        "batch_sampler": [[0, 1]], "batch_size": 3}),
    "batch_sampler_and_shuffle": (Numbers, lambda: {"batch_sampler": [[0, 1]], "shuffle": True}),
    "batch_sampler_and_drop_last": (Numbers, lambda: {
        "batch_sampler": [[0, 1]], "drop_last": True}),
    "batch_sampler_and_sampler": (Numbers, lambda: {"batch_sampler": [[0, 1]], "sampler": [0]}),
    "sampler_and_shuffle": (Numbers, lambda: {"sampler": [0, 1], "shuffle": True}),
    "no_batching_and_drop_last": (Numbers, lambda: {"batch_size": None, "drop_last": True}),
    "iterable_and_shuffle": (Stream, lambda: {"shuffle": True}),
    "iterable_and_sampler": (Stream, lambda: {"sampler": [0, 1]}),
    "iterable_and_batch_sampler": (Stream, lambda: {"batch_sampler": [[0, 1]]}),
    "context_without_workers": (Numbers, lambda: {"multiprocessing_context": "spawn"}),
    "unknown_context": (Numbers, lambda: {"num_workers": 1, "multiprocessing_context": "nope"}),
    "negative_workers": (Numbers, lambda: {"num_workers": -1}),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_refused_as_dataloader_refuses(case: str) -> None:
    dataset, arguments = REFUSED[case]
    extra = {} if "num_workers" in arguments() else {"num_workers": 0}
    theirs = refusal(lambda: DataLoader(dataset(), **arguments()))
    ours = refusal(lambda: FastLoader(dataset(), **extra, **arguments()))
    assert theirs is not None and ours is not None and issubclass(ours, theirs), (ours, theirs)


def test_what_dataloader_takes_is_taken() -> None:
    for arguments in ({"batch_sampler": [[0, 1]], "batch_size": 1},
                      {"sampler": [0, 1], "shuffle": False}, {"batch_sampler": None},
                      {"shuffle": False}):
        assert refusal(lambda a=arguments: DataLoader(Numbers(), **a)) is None
        assert refusal(lambda a=arguments: FastLoader(Numbers(), num_workers=0, **a)) is None
    assert refusal(lambda: FastLoader(Stream(), shuffle=False)) is None


def test_refusals_say_what_and_how_to_fix() -> None:
    with pytest.raises(InvalidArgumentError, match=r"drop_last=True is invalid: batch_sampler "
                       r"option is mutually exclusive.*Leave drop_last= out and build the "
                       r"batch_sampler with it \(BatchSampler\(sampler, drop_last=\.\.\.\)\)"):
        FastLoader(Numbers(), batch_sampler=[[0, 1]], drop_last=True, num_workers=0)


# -- errors mid-epoch -----------------------------------------------------------------------------


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("batch_size", [1, 3])
def test_errors_mid_epoch_as_in_dataloader(batch_size: int, workers: int) -> None:
    ours, theirs = side_by_side(lambda: Numbers(10, bad=(2, 7)),
                                lambda: {"batch_size": batch_size}, workers)
    assert "ValueError" in ours and same_outcomes(ours, theirs), (ours, theirs)


@pytest.mark.parametrize("workers", [0, 2])
def test_an_iterable_dataset_that_raises_as_in_dataloader(workers: int) -> None:
    ours, theirs = side_by_side(lambda: Stream(10, bad=(5,)), lambda: {"batch_size": 2},
                                workers)
    assert "ValueError" in ours and same_outcomes(ours, theirs), (ours, theirs)


# -- multiprocessing contexts ----------------------------------------------------------------------


@pytest.mark.heavy  # spawned workers import torch: seconds each
@pytest.mark.parametrize("context", ["fork", "spawn", "forkserver"])
def test_multiprocessing_contexts(context: str) -> None:
    """One worker under each start method; the reference is DataLoader's (fork, the same
    batches under any start method): a spawned worker imports torch, seconds a loader."""
    if context not in multiprocessing.get_all_start_methods():
        pytest.skip(f"the {context} start method is not available on this platform")
    arguments = {"batch_size": 2, "shuffle": True}
    with FastLoader(Numbers(8, bad=(5,)), seed=SEED, num_workers=1,
                    multiprocessing_context=context, **arguments) as loader:
        ours = outcomes(loader)
        assert loader.multiprocessing_context.get_start_method() == context
    theirs = outcomes(DataLoader(Numbers(8, bad=(5,)), num_workers=1, **arguments,
                                 generator=torch.Generator().manual_seed(SEED)))
    assert "ValueError" in ours and same_outcomes(ours, theirs), (ours, theirs)


# -- iterable datasets, with and without __len__ -----------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("stream", [Stream, SizedStream])
@pytest.mark.parametrize("drop_last", [False, True])
def test_iterable_datasets(stream: type[Stream], workers: int, drop_last: bool) -> None:
    ours, theirs = side_by_side(stream, lambda: {"batch_size": 3, "drop_last": drop_last},
                                workers)
    assert ours and same_outcomes(ours, theirs), (ours, theirs)
    ours_len, theirs_len = lens(stream, batch_size=3, drop_last=drop_last)
    assert ours_len == theirs_len == ((10 // 3 if drop_last else 4) if stream is SizedStream
                                      else TypeError)


# -- dict, namedtuple, string and nested-tensor samples -------------------------------------------

SAMPLES: dict[str, tuple[Callable[[], Any], Callable[[], dict[str, Any]]]] = {
    "dict": (lambda: Samples("dict"), lambda: {"batch_size": 4}),
    "namedtuple": (lambda: Samples("namedtuple"), lambda: {"batch_size": 4}),
    "string": (lambda: Samples("string"), lambda: {"batch_size": 4, "shuffle": True}),
    "nested_unbatched": (lambda: Samples("nested"), lambda: {"batch_size": None}),
    "nested_collated": (Ragged, lambda: {"batch_size": 3, "collate_fn": nest}),
    "nested_default_collate": (lambda: Samples("nested"), lambda: {"batch_size": 2}),
}


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", list(SAMPLES))
def test_sample_kinds(kind: str, workers: int) -> None:
    dataset, arguments = SAMPLES[kind]
    ours, theirs = side_by_side(dataset, arguments, workers)
    assert ours and same_outcomes(ours, theirs), (ours, theirs)
    if kind == "nested_default_collate":  # default_collate refuses batches of nested tensors
        assert set(ours) == {"RuntimeError"}


# -- worker_init_fn, in_order, generator ----------------------------------------------------------


def test_worker_init_fn_and_generator_as_in_dataloader() -> None:
    ours, theirs = side_by_side(Offset, lambda: {"batch_size": 2,
                                                 "worker_init_fn": offset_by_worker}, 2)
    assert same_outcomes(ours, theirs) and min(int(b.min()) for b in ours) >= 100
    ours, theirs = side_by_side(Numbers, lambda: {  # a generator of its own each: it is drawn
        "batch_size": 3, "shuffle": True, "generator": torch.Generator().manual_seed(11)}, 1)
    assert same_outcomes(ours, theirs), (ours, theirs)


def test_out_of_order_gives_the_same_batches() -> None:
    ours, theirs = side_by_side(Numbers, lambda: {"batch_size": 2, "in_order": False}, 2)
    assert sorted(b.tolist() for b in ours) == sorted(b.tolist() for b in theirs)
    assert len(ours) == 5
