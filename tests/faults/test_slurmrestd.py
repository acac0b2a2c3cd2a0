"""slurmrestd stops under a cluster on the rest backend: the cluster reports itself
unreachable (the adapter's typed error, beat's probe in /healthz, the estimate), and a submission
through it is never half-done: it waits with its hold, nothing reaches Slurm, and it
goes through once slurmrestd is back."""

import time

import pytest

from accounts.models import Allocation, LedgerEntry
from clusters.models import Cluster
from clusters.slurm import SlurmUnavailable, client_for
from jobs.invariants import Findings, invariants_check
from jobs.models import Job
from jobs.services import job_create, job_estimate
from jobs.states import JobState
from tests.conftest import running_worker, through_slurmrestd
from tests.factories import slurm_ids_of, wait_for
from tests.faults.support import (
    Burst,
    assert_in_slurm_once_each,
    quick_job,
    settle,
    stack,
    submitted,
)

pytestmark = [pytest.mark.fault, pytest.mark.slurm, pytest.mark.django_db(transaction=True)]


HEALTH_TOKEN = "slurmrestd-fault-test"


def unhealthy_clusters(client) -> list[str]:
    health = client.get("/healthz", HTTP_AUTHORIZATION=f"Bearer {HEALTH_TOKEN}")
    assert health.status_code == 200  # one cluster down never fails the portal
    return health.json()["unhealthy_clusters"]


def test_a_cluster_whose_slurmrestd_is_down_is_unavailable_and_submits_once_it_returns(
    client, settings, make_project, dev_cluster, alice, workdir
):
    settings.HEALTH_TOKEN = HEALTH_TOKEN  # /healthz's detail, as a monitoring system gets it
    # The account and its limit are set through the CLI: 22.05's REST API cannot set limits.
    project = make_project(members={alice: "pi"})
    rest_cluster = through_slurmrestd(dev_cluster)
    allocation = Allocation.objects.get(project=project)
    # The CLI sees Slurm itself, which stays up: the truth about what reached it.
    cli = client_for(Cluster(name=rest_cluster.name, backend=Cluster.Backend.CLI))
    with running_worker(beat=True, PORTAL_JOB_SUBMIT_CLAIM_S="20"):
        stack("stop", "slurmrestd")
        try:
            with pytest.raises(SlurmUnavailable, match="cannot reach slurmrestd"):
                client_for(rest_cluster).ping()
            wait_for(
                lambda: unhealthy_clusters(client) == ["portal-dev"],
                timeout_s=15,
                what="beat's probe to find the cluster down",
            )
            estimate = job_estimate(user=alice, request=quick_job(project, workdir, 0))
            assert estimate.expected_start is None and estimate.fits

            job = job_create(user=alice, request=quick_job(project, workdir, 0))
            wait_for(
                lambda: Job.objects.filter(pk=job.pk, reason__startswith="Slurm is not").exists(),
                timeout_s=30,
                what="the submission to find slurmrestd gone",
            )
            job.refresh_from_db()
            assert job.state in (JobState.NEW, JobState.SUBMITTING)
            assert job.slurm_job_id is None
            assert slurm_ids_of(job, client=cli) == []
            allocation.refresh_from_db()
            assert allocation.held_gpu_seconds == job.requested_gpu_seconds
            assert not LedgerEntry.objects.filter(kind="release", reference=job.hold_reference)
        finally:
            stack("start", "slurmrestd")
        wait_for(
            lambda: unhealthy_clusters(client) == [],
            timeout_s=15,
            what="beat's probe to find the cluster back",
        )
        settle([job.pk], timeout_s=90)

    job.refresh_from_db()
    assert job.state == JobState.COMPLETED
    assert job.submit_attempts >= 2
    assert slurm_ids_of(job, client=cli) == [job.slurm_job_id]
    assert_in_slurm_once_each(rest_cluster, project, [job.pk])
    assert LedgerEntry.objects.filter(kind="release", reference=job.hold_reference).count() == 1
    assert invariants_check(cluster=rest_cluster) == Findings()


def test_slurmrestd_restarted_under_a_burst_submits_every_job_once_within_a_minute(
    make_project, dev_cluster, alice, workdir
):
    """40 submissions through slurmrestd, which is stopped and started again in the middle:
    every job reaches Slurm exactly once, within a minute of slurmrestd's return, and
    the retries' token look-ups (the owner's jobs since each was saved) keep it free
    to answer everything else."""
    project = make_project(members={alice: "pi"}, gpu_hours=100)
    rest_cluster = through_slurmrestd(dev_cluster)
    with running_worker(beat=True, PORTAL_JOB_SUBMIT_CLAIM_S="20"):
        with Burst(user=alice, project=project, workdir=workdir, count=40, every_s=0.1) as burst:
            wait_for(lambda: submitted(burst.ids) >= 5, timeout_s=60, what="the first submissions")
            stack("stop", "slurmrestd")
            try:
                time.sleep(3)  # the burst goes on while it is down
            finally:
                stack("start", "slurmrestd")
            back = time.monotonic()
        ids = burst.ids
        assert len(ids) == 40
        wait_for(
            lambda: submitted(ids) == len(ids),
            timeout_s=60,
            interval_s=0.5,
            what="every job to reach Slurm within a minute of slurmrestd's return",
        )
        print(f"all 40 in Slurm {time.monotonic() - back:.1f} s after slurmrestd returned")
        settle(ids, timeout_s=120)
    assert Job.objects.filter(pk__in=ids, state=JobState.COMPLETED).count() == len(ids)
    assert Job.objects.filter(pk__in=ids, submit_attempts__gt=1).exists()
    assert_in_slurm_once_each(rest_cluster, project, ids)
    assert invariants_check(cluster=rest_cluster) == Findings()
