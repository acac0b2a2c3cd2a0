"""slurmdbd stops while jobs finish: accounting lags — nothing is charged, nothing is
marked wrongly — and when it returns the portal catches up exactly: each job charged
once, its hold released, the ledger's sums right."""

import pytest
from django.db.models import Count

from accounts.models import Allocation, LedgerEntry
from clusters.slurm import client_for
from jobs.accounting import accounting_sync
from jobs.invariants import Findings, invariants_check
from jobs.models import AccountingRecord, Job, JobEvent
from jobs.services import job_create
from jobs.states import IN_SLURM, JobState, portal_state
from tests.conftest import running_worker
from tests.factories import wait_for
from tests.faults.support import quick_job, settle, stack, worker_log

pytestmark = [pytest.mark.fault, pytest.mark.slurm, pytest.mark.django_db(transaction=True)]

FAILED_INGEST = "accounting ingest of portal-dev"


def test_accounting_lags_while_slurmdbd_is_down_and_catches_up_exactly(
    make_project, dev_cluster, alice, workdir
):
    project = make_project(members={alice: "pi"})
    allocation = Allocation.objects.get(project=project)
    # A short overlap stands for an outage longer than the real one (300 s): the
    # watermark alone must not be what finds the jobs that ended meanwhile.
    with running_worker(beat=True, PORTAL_ACCOUNTING_OVERLAP_S="1") as (queue, _, _):
        jobs = [
            job_create(user=alice, request=quick_job(project, workdir, i, script="sleep 2\n"))
            for i in range(4)
        ]
        ids = [job.pk for job in jobs]
        wait_for(
            lambda: Job.objects.filter(pk__in=ids, state=JobState.RUNNING).count() == 4,
            what="the jobs to run",
        )
        requested = sum(job.requested_gpu_seconds for job in jobs)
        slurm_ids = set(Job.objects.filter(pk__in=ids).values_list("slurm_job_id", flat=True))
        log = worker_log(queue)
        stack("stop", "slurmdbd")
        try:
            failures = log.read_text().count(FAILED_INGEST)

            def ended_in_slurm() -> bool:
                queue = client_for(dev_cluster).queue()
                queued = {e.job_id for e in queue if portal_state(e.state) in IN_SLURM}
                return not slurm_ids & queued

            wait_for(ended_in_slurm, timeout_s=30, what="the jobs to end in Slurm")
            wait_for(
                lambda: log.read_text().count(FAILED_INGEST) > failures,
                timeout_s=30,
                what="an accounting ingest to find slurmdbd gone",
            )
            # Lagging, not wrong: no charge, the hours still held, no job called failed.
            allocation.refresh_from_db()
            assert allocation.used_gpu_seconds == 0
            assert allocation.held_gpu_seconds == requested
            assert not LedgerEntry.objects.filter(allocation=allocation, kind="charge").exists()
            for job in Job.objects.filter(pk__in=ids):
                assert job.used_gpu_seconds is None
                assert job.state in (*IN_SLURM, JobState.COMPLETED), job.state
        finally:
            stack("start", "slurmdbd")
        settle(ids, timeout_s=90)

    assert accounting_sync(cluster=dev_cluster).charged == 0  # a repeat charges nothing
    allocation.refresh_from_db()
    charges = LedgerEntry.objects.filter(allocation=allocation, kind="charge")
    assert charges.count() == 4, (
        list(
            AccountingRecord.objects.filter(job_id__in=ids).values_list(
                "slurm_job_id", "state", "account", "user", "elapsed_s", "allocated_gpus",
                "charged_gpu_seconds", "charge_note",
            )
        ),
        list(LedgerEntry.objects.values_list("allocation_id", "kind", "reference", "gpu_seconds")),
    )  # fmt: skip
    for job in Job.objects.filter(pk__in=ids):
        assert job.state == JobState.COMPLETED
        record = AccountingRecord.objects.get(job=job)
        charge = charges.get(reference__startswith=f"{dev_cluster.name}:{job.slurm_job_id}@")
        assert job.used_gpu_seconds == record.charged_gpu_seconds == -charge.gpu_seconds >= 2
    assert allocation.used_gpu_seconds == sum(-c.gpu_seconds for c in charges)
    assert allocation.held_gpu_seconds == 0
    assert LedgerEntry.objects.filter(allocation=allocation, kind="release").count() == 4
    assert not (
        JobEvent.objects.filter(job_id__in=ids)
        .values("job_id", "state")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .exists()
    ), "no state is recorded twice for a job"
    assert invariants_check(cluster=dev_cluster) == Findings()
