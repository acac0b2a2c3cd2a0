"""The one module that knows the workers' task names: what the web tier and the
services hand to the workers, fire-and-forget or waited on with a deadline.

Tasks are sent by name, so the services never import ``jobs.tasks`` (which imports the
services' own modules): no import cycle, and ``tests/jobs/test_dispatch.py`` checks that
every name here is a task the workers know.
"""

import contextlib
import logging
import time
import uuid
from typing import Any

from celery import current_app
from django.core.cache import cache
from django.db import transaction
from kombu.exceptions import OperationalError
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)

SUBMIT = "jobs.tasks.job_submit_task"
CONTROL = "jobs.tasks.job_control_task"
START_ESTIMATE = "jobs.tasks.job_start_estimate_task"
OUTPUT = "jobs.tasks.job_output_task"
TASK_NAMES = (SUBMIT, CONTROL, START_ESTIMATE, OUTPUT)


def submit(job_id: int) -> None:
    """Hand a saved job to the workers. A broker that is down is not waited for (a
    request must not hang): the job keeps its hold and the sweeper submits it later."""
    try:
        current_app.send_task(SUBMIT, args=(job_id,), retry=False, ignore_result=True)
    except OperationalError:
        logger.warning("could not enqueue job %s; the sweeper will submit it", job_id)


def control_on_commit(job_id: int, action: str) -> None:
    """Ask the workers to carry out ``action`` (cancel, hold, release) in Slurm once the
    caller's transaction commits."""
    transaction.on_commit(lambda: control(job_id, action))


def control(job_id: int, action: str) -> None:
    current_app.send_task(CONTROL, args=(job_id, action), ignore_result=True)


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
    reply_to = f"jobs:answer:{uuid.uuid4().hex}"
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
