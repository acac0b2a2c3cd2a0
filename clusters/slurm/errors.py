"""The errors every Slurm client raises; callers never see a backend's own."""

import functools
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar

_P = ParamSpec("_P")
_R = TypeVar("_R")
_T = TypeVar("_T")


class SlurmError(Exception):
    """Base of all Slurm client errors."""


class SlurmUnavailable(SlurmError):
    """Slurm could not be reached or did not answer in time: transient, retry later.

    After a timeout the request may still have been carried out, so a caller
    that changed something must treat the outcome as unknown, never as failed.
    """


class SlurmRejected(SlurmError):
    """Slurm answered and refused the request: final. ``message`` is Slurm's own text."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(SlurmError):
    """The job, account or association asked for does not exist in Slurm."""


class SlurmOutputInvalid(SlurmError, ValueError):
    """Slurm answered, but not in a form the portal can read (a newer Slurm's format, a
    truncated or garbled answer): the parsers' one error. Not a refusal: after a
    change the outcome is unknown, as after a timeout. A ValueError too, as the
    parsers raised before it existed."""


# What Python raises when text or JSON is not the shape a parser expects: a field that
# is not a number, too few fields, a list where an object belongs, a missing key.
MALFORMED = (ValueError, KeyError, IndexError, TypeError, AttributeError, OverflowError)


def reads_slurm_output(parse: Callable[_P, _R]) -> Callable[_P, _R]:
    """Make a parser of Slurm's output raise SlurmOutputInvalid, naming itself and
    what it could not read, instead of whatever Python raised deep inside it."""

    @functools.wraps(parse)
    def checked(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return parse(*args, **kwargs)
        except SlurmOutputInvalid:
            raise
        except MALFORMED as error:
            raise _unreadable(parse, error) from error

    return checked


def _unreadable(parse: Callable, error: Exception) -> SlurmOutputInvalid:
    return SlurmOutputInvalid(
        f"{parse.__name__} cannot read Slurm's answer: {type(error).__name__}: {error}"
    )


def reads_slurm_stream(parse: Callable[_P, Iterator[_T]]) -> Callable[_P, Iterator[_T]]:
    """``reads_slurm_output`` for a parser that yields what it reads as its input comes
    (a generator): what Python raises while it is iterated becomes SlurmOutputInvalid."""

    @functools.wraps(parse)
    def checked(*args: _P.args, **kwargs: _P.kwargs) -> Iterator[_T]:
        try:
            yield from parse(*args, **kwargs)
        except SlurmOutputInvalid:
            raise
        except MALFORMED as error:
            raise _unreadable(parse, error) from error

    return checked


# Slurm's own texts (slurm_strerror, as its tools and libslurm report them) for a
# controller or database daemon that is not there, an unknown job, and a job
# that already ended. The backends classify failures by them.
UNAVAILABLE_MARKERS = (
    "unable to contact slurm controller",
    "connection refused",
    "socket timed out",
    "zero bytes were transmitted",
    "unable to connect to database",
    "problem talking to the database",
    "slurmdbd: getting db_conn",
    "transport endpoint is not connected",
    "failed to open connection",
)
UNKNOWN_JOB_MARKERS = ("invalid job id", "unknown job")
ALREADY_ENDED_MARKERS = ("already completing or completed", "job has already finished")


def says(message: str, markers: tuple[str, ...]) -> bool:
    lowered = message.lower()
    return any(marker in lowered for marker in markers)


def error_from_message(message: str) -> SlurmError:
    """The client error for a failure Slurm described in ``message``."""
    if says(message, UNAVAILABLE_MARKERS):
        return SlurmUnavailable(message)
    if says(message, UNKNOWN_JOB_MARKERS):
        return NotFound(message)
    return SlurmRejected(message)
