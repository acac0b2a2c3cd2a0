"""The portal's log lines, and the request id that ties a web request to the tasks it
enqueues (README "Logs").

Every process (gunicorn, Celery worker, beat) logs through ``settings.LOGGING``: one
record a line, plain text (the default) or one JSON object (``PORTAL_LOG_FORMAT=json``)
carrying what ``audit.log_context`` holds — request id, user, task id and name, job id.
A record is one line whatever its text holds: JSON escapes control characters, the
plain format writes them as ``\\n``, ``\\x1b``…, so a job name, a Slurm message or a
user name in a message cannot forge a line; a traceback follows on lines indented by
two spaces, so only a record's own first line starts at the first column.
"""

import datetime as dt
import json
import logging
import re
import uuid
from typing import TYPE_CHECKING, Any

from django.conf import settings

from audit.log_context import (
    log_context,
    log_context_bind,
    log_context_clear,
    log_context_reset,
)

if TYPE_CHECKING:
    from celery import Task
    from django.http import HttpRequest, HttpResponse

REQUEST_ID_HEADER = "X-Request-ID"
# The Celery message header that carries the request id into a task.
TASK_HEADER = "portal_request_id"
# What a proxy's request id may look like (nginx's $request_id, a UUID, a trace id):
# a bounded token of characters that need no escaping anywhere.
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:+=/-]{1,100}")

# C0 and C1 control characters and Unicode's line and paragraph separators.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")
_CONTROL_BUT_NEWLINE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def request_id_or_none(value: object) -> str | None:
    """``value`` if it is a well-formed request id, else None."""
    return value if isinstance(value, str) and _REQUEST_ID.fullmatch(value) else None


def _escaped(text: str, pattern: re.Pattern[str] = _CONTROL) -> str:
    return pattern.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def _exception_text(formatter: logging.Formatter, record: logging.LogRecord) -> str:
    # Not the cached record.exc_text of another formatter: each format renders its own.
    if record.exc_info:
        return formatter.formatException(record.exc_info)
    return record.exc_text or ""


class PlainFormatter(logging.Formatter):
    """The format's line with control characters escaped; a traceback or stack below it,
    indented."""

    def format(self, record: logging.LogRecord) -> str:
        record.message = record.getMessage()
        if self.usesTime():
            record.asctime = self.formatTime(record, self.datefmt)
        line = _escaped(self.formatMessage(record))
        stack = self.formatStack(record.stack_info) if record.stack_info else ""
        for detail in (_exception_text(self, record), stack):
            for part in _escaped(detail, _CONTROL_BUT_NEWLINE).splitlines():
                line += f"\n  {part}"
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object a line: timestamp (UTC), level, logger, message, the bound context
    fields, and ``exception`` (and ``stack``) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        at = dt.datetime.fromtimestamp(record.created, dt.UTC)
        entry: dict[str, Any] = {
            "timestamp": at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **log_context(),
        }
        if exception := _exception_text(self, record):
            entry["exception"] = exception
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str)


class RequestIdMiddleware:
    """Gives every web request an id, binds it (and later the user) for the log lines
    written meanwhile, and returns it in ``X-Request-ID``. First in ``MIDDLEWARE``: the
    other middleware log with it too.

    The id is the proxy's when there is one (``PORTAL_PROXY_COUNT``), which must set the
    header itself (nginx: ``proxy_set_header X-Request-ID $request_id``), and only if
    well-formed; otherwise, and with no proxy (a client's header proves nothing), a new
    one. The fields stay bound until the response is closed (``request_context_clear``):
    Django logs a 4xx or 5xx answer after the middleware has returned it.
    """

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: "HttpRequest") -> "HttpResponse":
        proxied = request.headers.get(REQUEST_ID_HEADER) if settings.PROXY_COUNT else None
        request_id = request_id_or_none(proxied) or uuid.uuid4().hex
        log_context_clear()
        log_context_bind(request_id=request_id)
        response = self.get_response(request)
        response[REQUEST_ID_HEADER] = request_id
        return response

    def process_view(self, request: "HttpRequest", view_func, view_args, view_kwargs) -> None:
        # After every middleware's first half: the session's user is known here. An API
        # caller with a token is bound by its authentication (accounts/authentication.py).
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            log_context_bind(user=user.get_username())


def request_context_clear(**kwargs: object) -> None:
    """``request_finished``: the request's fields go with it (the next request in this
    thread, or a log line between two, must not carry them)."""
    log_context_clear()


# Celery's signals (connected in portal/celery.py).


def celery_logging_setup(**kwargs: object) -> None:
    """``setup_logging``: worker and beat log through ``settings.LOGGING`` as the web tier
    does — the same format, the same escaping — not in Celery's own format."""
    from django.utils.log import configure_logging

    configure_logging(settings.LOGGING_CONFIG, settings.LOGGING)


def request_id_to_task(headers: dict[str, Any] | None = None, **kwargs: object) -> None:
    """``before_task_publish``: a task enqueued by a web request (or by a task that came
    from one) carries the request id in its message headers."""
    request_id = log_context().get("request_id")
    if request_id is not None and headers is not None:
        headers[TASK_HEADER] = request_id


_task_tokens: dict[str, Any] = {}


def task_context_bind(task_id: str, task: "Task", **kwargs: object) -> None:
    """``task_prerun``: the task's id and name, and the request id it came with, bound
    while it runs."""
    request_id = request_id_or_none(getattr(task.request, TASK_HEADER, None))
    _task_tokens[task_id] = log_context_bind(request_id=request_id, task_id=task_id, task=task.name)


def task_context_reset(task_id: str, **kwargs: object) -> None:
    """``task_postrun``: back to what was bound before the task (nothing, in a worker)."""
    token = _task_tokens.pop(task_id, None)
    if token is None:
        return
    try:
        log_context_reset(token)
    except ValueError:  # bound in another context (thread); this one must not keep it
        log_context_clear()
