"""A worker SIGKILLed in the middle of the accounting ingest — some charges written,
the next one waiting — while it also submits a burst, and a new worker started:
nothing lost, nothing twice (tests/jobs/test_submit_faults.py covers a kill right after
sbatch)."""

import psycopg
import pytest
from django.db import connection

from accounts.models import Allocation, LedgerEntry
from jobs.invariants import Findings, invariants_check
from jobs.models import AccountingRecord
from jobs.services import job_create
from tests.conftest import running_worker
from tests.factories import wait_for
from tests.faults.support import (
    Burst,
    assert_in_slurm_once_each,
    quick_job,
    settle,
    sigkill_worker,
    submitted,
)

# It kills only the worker it started: it runs beside the other tests.
pytestmark = [
    pytest.mark.fault(own_processes=True),
    pytest.mark.slurm,
    pytest.mark.django_db(transaction=True),
]

FAST_CLAIM = {"PORTAL_SLURM_COMMAND_TIMEOUT_S": "5", "PORTAL_JOB_SUBMIT_CLAIM_S": "20"}


def waiting_on_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0] > 0


def submit_three(user, project, workdir) -> list[int]:
    """Three quick jobs of the project, returned once all three are in Slurm."""
    ids = [job_create(user=user, request=quick_job(project, workdir, i)).pk for i in range(3)]
    wait_for(lambda: submitted(ids) == 3, what=f"{project.slurm_account}'s jobs to be submitted")
    return ids


def test_a_worker_killed_mid_ingest_and_mid_burst_loses_nothing_and_does_nothing_twice(
    make_project, dev_cluster, alice, workdir
):
    first = make_project(members={alice: "pi"})
    second = make_project(members={alice: "pi"})
    db = connection.settings_dict
    locker = psycopg.connect(
        host=db["HOST"],
        port=db["PORT"],
        user=db["USER"],
        password=db["PASSWORD"],
        dbname=db["NAME"],
    )
    # Closed whatever happens: a transaction left open holds the row lock, and the
    # test database's flush after the test would wait on it for good.
    try:
        with running_worker(beat=True, **FAST_CLAIM) as (_, _, worker):
            # The first project's jobs reach Slurm first and so get the lower Slurm ids; the
            # ingest charges the highest first, so it charges the second project's and then
            # waits for the first's. (Created together, two worker processes could submit
            # a first project's job after a second's: the ingest would wait on it before
            # charging them all.)
            ids = submit_three(alice, first, workdir) + submit_three(alice, second, workdir)
            locker.execute(
                "SELECT 1 FROM accounts_allocation WHERE project_id = %s FOR UPDATE", [first.pk]
            )
            wait_for(
                lambda: (
                    AccountingRecord.objects.filter(
                        job__project=second, charged_gpu_seconds__isnull=False
                    ).count()
                    == 3
                ),
                what="the ingest to charge the second project's jobs",
                timeout_s=150,  # the jobs run and end first; slow on a loaded machine
            )
            wait_for(
                waiting_on_a_lock, what="the ingest to wait for the first project's allocation"
            )
            with Burst(user=alice, project=second, workdir=workdir, count=6, every_s=0.1) as burst:
                wait_for(lambda: submitted(burst.ids) >= 2, what="the burst to flow")
                sigkill_worker(worker)
            burst_ids = burst.ids
            assert submitted(burst_ids) < len(burst_ids), "the worker died mid-burst"
    finally:
        locker.close()
    assert not AccountingRecord.objects.filter(
        job__project=first, charged_gpu_seconds__isnull=False
    ).exists(), "the worker died before charging the first project"

    with running_worker(beat=True, **FAST_CLAIM):
        settle(ids + burst_ids, timeout_s=90)

    for project, count in ((first, 3), (second, 9)):
        allocation = Allocation.objects.get(project=project)
        charges = LedgerEntry.objects.filter(allocation=allocation, kind="charge")
        assert charges.count() == count
        assert LedgerEntry.objects.filter(allocation=allocation, kind="release").count() == count
        assert allocation.held_gpu_seconds == 0
    assert_in_slurm_once_each(dev_cluster, second, [*ids[3:], *burst_ids])
    assert invariants_check(cluster=dev_cluster) == Findings()
