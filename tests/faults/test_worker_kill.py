"""A worker SIGKILLed in the middle of the accounting ingest — some charges written,
the next one waiting — while it also submits a burst, and a new worker started:
nothing lost, nothing twice (tests/jobs/test_submit_faults.py covers a kill right after
sbatch)."""

import psycopg
import pytest
from django.db import connection

from accounts.models import Allocation, LedgerEntry
from clusters.slurm import client_for
from jobs.invariants import Findings, invariants_check
from jobs.models import AccountingRecord, Job
from jobs.services import job_create
from jobs.tasks import accounting_ingest_task
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
NO_BEAT_INGEST = {"PORTAL_ACCOUNTING_INTERVAL_S": "86400"}


def waiting_on_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0] > 0


def ended_in_accounting(cluster, slurm_ids: list[int]) -> int:
    """How many of the Slurm jobs accounting reports ended."""
    entries = client_for(cluster).accounting_since(cluster.created_at)
    return sum(1 for e in entries if e.job_id in slurm_ids and e.ended_at is not None)


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
        # Beat runs everything but the ingest, which the test starts once all six jobs
        # have ended: it then meets them all in one run, charging from the highest Slurm
        # id down. (Run by beat as they end, one run could meet a first project's job
        # ended and the second's not yet, and wait on the lock before charging them.)
        with running_worker(beat=True, **FAST_CLAIM, **NO_BEAT_INGEST) as (_, _, worker):
            # The first project's jobs reach Slurm first and so get the lower Slurm ids.
            # (Created together, two worker processes could submit one of them later.)
            ids = submit_three(alice, first, workdir) + submit_three(alice, second, workdir)
            slurm_ids = list(Job.objects.filter(pk__in=ids).values_list("slurm_job_id", flat=True))
            wait_for(
                lambda: ended_in_accounting(dev_cluster, slurm_ids) == 6,
                what="the six jobs to run and end in Slurm",
                timeout_s=150,  # slow on a loaded machine: they may wait for GPUs
            )
            locker.execute(
                "SELECT 1 FROM accounts_allocation WHERE project_id = %s FOR UPDATE", [first.pk]
            )
            accounting_ingest_task.delay(dev_cluster.pk)
            wait_for(
                lambda: (
                    AccountingRecord.objects.filter(
                        job__project=second, charged_gpu_seconds__isnull=False
                    ).count()
                    == 3
                ),
                what="the ingest to charge the second project's jobs",
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
