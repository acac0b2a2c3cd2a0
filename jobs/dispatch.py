"""The one module that knows the workers' task names: what the web tier and the
services hand to the workers, fire-and-forget or waited on with a deadline.

Tasks are sent by name, so the services never import ``jobs.tasks`` (which imports the
services' own modules): no import cycle, and ``tests/jobs/test_dispatch.py`` checks that
every name here is a task the workers know.
"""

import logging

from celery import current_app
from django.db import transaction
from kombu.exceptions import OperationalError

from clusters.workers import ask, reply

__all__ = ["ask", "reply"]  # the web tier's questions to the workers, and their answers

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
