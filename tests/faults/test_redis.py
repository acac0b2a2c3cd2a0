"""Redis stops and starts while a worker with beat runs and jobs are being created
(tests/jobs/test_submit_faults.py covers Redis down at creation): the worker and beat
reconnect, the sweeper submits what was saved meanwhile or lost with Redis's queue."""

import time
from contextlib import ExitStack

import pytest

from jobs.invariants import Findings, invariants_check
from jobs.models import Job
from jobs.states import JobState
from tests.conftest import redis_shutdown, running_worker
from tests.factories import wait_for
from tests.faults.support import Burst, assert_in_slurm_once_each, settle, stack, submitted

pytestmark = [pytest.mark.fault, pytest.mark.slurm, pytest.mark.django_db(transaction=True)]


def test_the_worker_and_beat_reconnect_and_the_sweeper_finishes_the_work(
    make_project, dev_cluster, alice, workdir
):
    project = make_project(members={alice: "pi"})
    with ExitStack() as workers:
        _, _, worker = workers.enter_context(running_worker(beat=True))
        with Burst(user=alice, project=project, workdir=workdir, count=16, every_s=0.3) as burst:
            wait_for(lambda: submitted(burst.ids) >= 3, timeout_s=30, what="the burst to flow")
            redis_shutdown()  # what was queued is lost too
            try:
                cut_at = len(burst.ids)
                wait_for(lambda: len(burst.ids) >= cut_at + 3, what="jobs saved while it is down")
                time.sleep(1)
            finally:
                stack("start", "redis")
        ids = burst.ids
        assert submitted(ids) < len(ids), "some jobs were saved while Redis was down"
        time.sleep(2)
        if worker.poll() is not None:
            # Celery 5.x sometimes exits ("Unrecoverable error: AttributeError ... 'hostname'",
            # celery/kombu#582) when the broker goes while it restores unacknowledged
            # messages; production runs workers under a supervisor that restarts them.
            workers.enter_context(running_worker(beat=True))
        settle(ids, timeout_s=90)

    assert Job.objects.filter(pk__in=ids, state=JobState.COMPLETED).count() == len(ids)
    assert_in_slurm_once_each(dev_cluster, project, ids)
    assert invariants_check(cluster=dev_cluster) == Findings()
