"""The one error family: every message says what went wrong, where, and how to fix it."""

from __future__ import annotations


class FastloaderError(Exception):
    """Base of every error fastloader raises on purpose."""


class InvalidArgumentError(FastloaderError, ValueError):
    """An argument has a value outside its rule."""


class InvalidTypeError(FastloaderError, TypeError):
    """An argument has the wrong type."""


class DatasetError(FastloaderError):
    """A packed dataset is missing, incomplete or inconsistent."""


class DatasetNotFoundError(DatasetError, FileNotFoundError):
    """The path does not hold a packed dataset."""


class CorruptRecordError(DatasetError):
    """A record's bytes do not match what the index says (length, checksum, shard bounds)."""


class DecodeError(FastloaderError, ValueError):
    """Image bytes could not be decoded."""


class ProducerError(FastloaderError, RuntimeError):
    """An exception other than a FastloaderError raised while a batch was produced; chained
    to the original (its __cause__), naming the stage and the batch."""


class PackError(FastloaderError):
    """Packing a source tree failed (bad source, unwritable destination, bad files in --strict)."""


class NativeUnavailableError(FastloaderError, ImportError):
    """The compiled extension was demanded but is not usable."""


class OptionalDependencyError(FastloaderError, ImportError):
    """An optional package (DALI, matplotlib, ...) is needed for the asked feature."""


def invalid_argument(name: str, value: object, rule: str, fix: str) -> InvalidArgumentError:
    """Build an InvalidArgumentError naming the argument, the value, the rule and the fix."""
    return InvalidArgumentError(f"{name}={value!r} is invalid: {rule}. {fix}")


def invalid_type(name: str, value: object, expected: str) -> InvalidTypeError:
    """Build an InvalidTypeError naming the argument, what it got and what it takes."""
    return InvalidTypeError(
        f"{name} must be {expected}, got {type(value).__name__} ({value!r:.80})."
    )
