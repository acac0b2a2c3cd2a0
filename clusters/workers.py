"""Asking the workers a question and waiting, with a deadline, for the answer.

Any app's web-tier code that needs something only a worker can find out (Slurm's
expected start, a job's output, whether a Unix login exists where jobs are submitted)
asks through here; the task answers with ``reply``.
"""

import contextlib
import logging
import time
import uuid
from typing import Any

from celery import current_app
from django.core.cache import cache
from kombu.exceptions import OperationalError
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)

# How long an answer waits in the cache for its asker, who has given up by then.
ANSWER_KEPT_S = 60


def ask(name: str, *, deadline_s: float, **kwargs: Any) -> Any:
    """The task's answer within ``deadline_s`` seconds, or None.

    The task gets ``reply_to``, a cache key, and puts its answer (JSON) there with
    ``reply``; the asker polls the key. No result backend: nothing in the web tier
    subscribes to Redis, so a Redis restart breaks no web process. None whatever the
    reason (no worker free, the broker down, the task failed): the caller answers without
    it. A task no worker started by the deadline is dropped (``expires``), so a backlog
    never runs stale questions."""
    reply_to = f"workers:answer:{uuid.uuid4().hex}"
    deadline = time.monotonic() + deadline_s
    try:
        current_app.send_task(
            name, kwargs={**kwargs, "reply_to": reply_to}, expires=deadline_s,
            retry=False, ignore_result=True,
        )  # fmt: skip
    except OperationalError:
        logger.warning("could not ask a worker for %s: the broker does not answer", name)
        return None
    pause = 0.01
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(pause, left))
        pause = min(pause * 1.5, 0.1)
        try:
            answer = cache.get(reply_to)
        except RedisError:
            continue
        if answer is not None:
            with contextlib.suppress(RedisError):
                cache.delete(reply_to)
            return answer
    logger.info("no worker answered %s within %.1fs", name, deadline_s)
    return None


def reply(reply_to: str, answer: Any) -> None:
    """A worker's answer to ``ask`` (JSON-able, not None)."""
    with contextlib.suppress(RedisError):
        cache.set(reply_to, answer, timeout=ANSWER_KEPT_S)
