"""slurmrestd stops under a cluster on the rest backend: the cluster reports itself
unreachable (the adapter's typed error, /healthz, the estimate), and a submission
through it is never half-done: it waits with its hold, nothing reaches Slurm, and it
goes through once slurmrestd is back."""

import subprocess

import pytest

from accounts.models import Allocation, LedgerEntry
from clusters.models import Cluster
from clusters.slurm import SlurmUnavailable, client_for
from jobs.invariants import invariants_check
from jobs.models import Job
from jobs.services import job_create, job_estimate
from jobs.states import JobState
from tests.conftest import REPO, running_worker
from tests.factories import wait_for
from tests.faults.support import assert_in_slurm_once_each, quick_job, settle, stack

pytestmark = [pytest.mark.fault, pytest.mark.slurm, pytest.mark.django_db(transaction=True)]


def stack_value(name: str) -> str:
    output = subprocess.run(
        [str(REPO / "dev" / "stack"), "env"], capture_output=True, text=True, check=True
    ).stdout
    return dict(line.split("=", 1) for line in output.splitlines())[name]


def through_slurmrestd(cluster: Cluster) -> Cluster:
    """The cluster, reached through slurmrestd with JWTs the portal mints."""
    Cluster.objects.filter(pk=cluster.pk).update(
        backend=Cluster.Backend.REST,
        rest_url=stack_value("SLURM_REST_URL"),
        jwt_key_file=stack_value("SLURM_JWT_KEY_FILE"),
    )
    cluster.refresh_from_db()
    return cluster


def test_a_cluster_whose_slurmrestd_is_down_is_unavailable_and_submits_once_it_returns(
    client, make_project, dev_cluster, alice, workdir
):
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
            health = client.get("/healthz")
            assert health.status_code == 503
            assert health.json()["clusters"]["portal-dev"]["ok"] is False
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
            assert cli.find_by_comment(job.comment) == []
            allocation.refresh_from_db()
            assert allocation.held_gpu_seconds == job.requested_gpu_seconds
            assert not LedgerEntry.objects.filter(kind="release", reference=job.hold_reference)
        finally:
            stack("start", "slurmrestd")
        assert client.get("/healthz").json()["clusters"]["portal-dev"]["ok"] is True
        settle([job.pk], timeout_s=90)

    job.refresh_from_db()
    assert job.state == JobState.COMPLETED
    assert job.submit_attempts >= 2
    assert cli.find_by_comment(job.comment) == [job.slurm_job_id]
    assert_in_slurm_once_each(rest_cluster, project, [job.pk])
    assert LedgerEntry.objects.filter(kind="release", reference=job.hold_reference).count() == 1
    assert invariants_check(cluster=rest_cluster) == []
