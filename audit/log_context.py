"""What the log lines written now are about: the web request, its user, the Celery task,
the job.

Whoever knows one of them binds it for as long as it holds (the request middleware and
the task signals in ``portal/logs.py``, the job paths in ``jobs/``); the log formatter
reads them into every line. It lives in the bottom app, with nothing but the standard
library, so every app may bind what it knows without pointing upward.
"""

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar, Token
from types import MappingProxyType

Fields = Mapping[str, str | int]

# One immutable mapping per context, replaced (never changed) on each bind: a thread or
# task that copied the context keeps what it saw.
_fields: ContextVar[Fields] = ContextVar("log_context", default=MappingProxyType({}))


def log_context() -> Fields:
    """The fields bound now (``request_id``, ``user``, ``task_id``, ``task``, ``job_id``)."""
    return _fields.get()


def log_context_bind(**fields: str | int | None) -> Token[Fields]:
    """Add ``fields`` (None leaves one as it is) until ``log_context_reset`` with the token
    returned, or until the context is cleared."""
    given = {name: value for name, value in fields.items() if value is not None}
    return _fields.set(MappingProxyType({**_fields.get(), **given}))


def log_context_reset(token: Token[Fields]) -> None:
    """Back to what was bound before the ``log_context_bind`` that gave ``token``."""
    _fields.reset(token)


def log_context_clear() -> None:
    """Nothing bound: a new web request starts from here, whatever the last one left."""
    _fields.set(MappingProxyType({}))


@contextmanager
def log_context_bound(**fields: str | int | None) -> Iterator[None]:
    """``fields`` bound for the ``with`` block."""
    token = log_context_bind(**fields)
    try:
        yield
    finally:
        log_context_reset(token)
