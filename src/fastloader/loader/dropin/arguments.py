"""What the drop-in refuses as torch's DataLoader does, in fastloader's words: arguments that
contradict each other, shuffle=True over a plain iterable dataset, and setting after construction
an attribute DataLoader fixes at construction."""

from __future__ import annotations

from typing import Any

from torch.utils.data import IterableDataset
from torch.utils.data.datapipes.datapipe import IterDataPipe

from fastloader.errors import InvalidArgumentError, invalid_argument
from fastloader.loader.factory.arguments import loader_signature

# DataLoader's attributes that DataLoader.__setattr__ refuses once it is built.
FIXED_ATTRIBUTES = ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset",
                    "persistent_workers")


def given_arguments(args: tuple[object, ...], kwargs: dict[str, object]) -> set[str]:
    """The names of the drop-in's own arguments (after `data`) the call spelled out."""
    signature = loader_signature("drop-in loader")
    positional = [name for name, parameter in signature.parameters.items()
                  if parameter.kind is parameter.POSITIONAL_OR_KEYWORD][1:]  # after data
    return set(positional[:len(args)]) | set(kwargs)


def drop_none_samplers(kwargs: dict[str, Any]) -> None:
    """sampler=None and batch_sampler=None are DataLoader's defaults: as if not given."""
    for name in ("sampler", "batch_sampler"):
        if name in kwargs and kwargs[name] is None:
            del kwargs[name]


def refuse_contradictions(batch_size: int | None, shuffle: bool, drop_last: bool,
                          kwargs: dict[str, Any]) -> None:
    """Refuse, as DataLoader does, shuffle=True beside a sampler, and batch_size, shuffle,
    sampler or drop_last beside a batch_sampler (DataLoader would drop or contradict them)."""
    sampler = kwargs.get("sampler")
    if "batch_sampler" in kwargs:
        for name, value, default in (("batch_size", batch_size, 1), ("shuffle", shuffle, False),
                                     ("drop_last", drop_last, False)):
            if value != default:
                raise _beside_batch_sampler(name, value, f"build the batch_sampler with it "
                                            f"(BatchSampler(sampler, {name}=...))")
        if sampler is not None:
            raise _beside_batch_sampler("sampler", sampler, "give the sampler to the "
                                        "BatchSampler (BatchSampler(sampler, batch_size, ...))")
    if sampler is not None and shuffle:
        raise invalid_argument(
            "shuffle", shuffle, "sampler option is mutually exclusive with shuffle: the "
            "sampler sets the order", "Pass shuffle=False and shuffle in the sampler "
            "(sampler=RandomSampler(dataset, generator=...)), or leave sampler= out.")


def _beside_batch_sampler(name: str, value: object, fix: str) -> InvalidArgumentError:
    return invalid_argument(
        name, value, "batch_sampler option is mutually exclusive with batch_size, shuffle, "
        "sampler, and drop_last: the batch_sampler makes the batches", f"Leave {name}= out "
        f"and {fix}, passing batch_sampler=BatchSampler(...).")


def is_datapipe(data: object) -> bool:
    """Whether data is a datapipe (IterDataPipe), which DataLoader shuffles itself."""
    return isinstance(data, IterDataPipe)


def iterable_shuffle(data: object, shuffle: bool, given: set[str]) -> bool | None:
    """The shuffle= DataLoader gets for an iterable dataset: a datapipe's as given (None when
    not, so the datapipe's own Shuffler settings stand, as under DataLoader); shuffle=True of
    any other iterable dataset is refused, as DataLoader refuses it."""
    if is_datapipe(data):
        return shuffle if "shuffle" in given else None
    if shuffle and isinstance(data, IterableDataset):
        raise invalid_argument(
            "shuffle", shuffle, f"does not apply to an iterable dataset ({type(data).__name__}),"
            " which yields in its own order (DataLoader refuses it too: expected unspecified "
            "shuffle option)", "Shuffle the dataset itself (datasets: "
            "dataset.shuffle(seed=..., buffer_size=...); a datapipe: .shuffle()) and pass "
            "shuffle=False.")
    return None


def refuse_assignment(name: str, value: object) -> InvalidArgumentError:
    """The error of `loader.<name> = value` for an attribute DataLoader fixes when built."""
    call = ("FastLoader(new_dataset, ...)" if name == "dataset"
            else f"FastLoader(dataset, {name}={value!r}, ...)")
    return invalid_argument(
        name, value, f"{name} attribute should not be set after DataLoader is initialized "
        "(the drop-in's DataLoader was built with it; setting it would change nothing)",
        f"Build a new loader with it: {call}.")
