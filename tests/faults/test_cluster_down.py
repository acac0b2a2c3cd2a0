"""One cluster down, the other unaffected: with portal-next's whole root stopped, jobs on
portal-dev are submitted, synced and charged as usual; health names portal-next without
failing the portal; the composer says portal-next is unreachable; and when it returns,
the job that waited for it reaches its Slurm exactly once and is charged there."""

import subprocess

import pytest

from accounts.models import LedgerEntry
from accounts.selectors import project_balance
from clusters.selectors import cluster_status
from jobs.invariants import Findings, invariants_check
from jobs.models import Job
from jobs.services import job_create, job_estimate
from jobs.states import JobState
from portal.devstack import CLUSTER_NEXT
from tests.conftest import running_worker
from tests.factories import request_for, wait_for
from tests.faults.support import assert_in_slurm_once_each, settle

pytestmark = [pytest.mark.fault, pytest.mark.slurm, pytest.mark.django_db(transaction=True)]


def cluster_next(command: str) -> None:
    subprocess.run([str(CLUSTER_NEXT), command], check=True, capture_output=True, timeout=120)


def test_portal_dev_goes_on_while_portal_next_is_down_and_its_job_goes_through_once_after(
    make_project, dev_cluster, next_cluster, alice, manny, workdir, client
):
    project = make_project(
        members={alice: "pi"}, gpu_hours=10, clusters=(dev_cluster, next_cluster)
    )
    client.force_login(manny)
    with running_worker(beat=True, PORTAL_SLURM_COMMAND_TIMEOUT_S="5"):
        cluster_next("stop")
        try:
            wait_for(
                lambda: not cluster_status(next_cluster)["ok"],
                timeout_s=30,
                what="the workers' probe to find portal-next down",
            )
            health = client.get("/healthz")
            assert health.status_code == 200, "one cluster down does not fail the portal"
            report = health.json()
            assert report["unhealthy_clusters"] == ["portal-next"]
            assert report["clusters"]["portal-dev"]["ok"]

            on_next = request_for(project, workdir, name="next", partition="short")
            assert job_estimate(user=alice, request=on_next).cluster_unreachable
            assert not job_estimate(
                user=alice, request=request_for(project, workdir, partition="debug")
            ).cluster_unreachable
            waiting = job_create(user=alice, request=on_next)
            dev_jobs = [
                job_create(user=alice, request=request_for(project, workdir, name=f"dev{i}"))
                for i in range(3)
            ]
            settle([job.pk for job in dev_jobs], timeout_s=90)
            waiting.refresh_from_db()
            assert waiting.slurm_job_id is None
            assert waiting.state in (JobState.NEW, JobState.SUBMITTING)
        finally:
            cluster_next("start")
        settle([waiting.pk], timeout_s=120)

    assert Job.objects.filter(state=JobState.COMPLETED).count() == 4
    assert_in_slurm_once_each(next_cluster, project, [waiting.pk])
    assert_in_slurm_once_each(dev_cluster, project, [job.pk for job in dev_jobs])
    waiting.refresh_from_db()
    charges = LedgerEntry.objects.filter(kind="charge")
    assert charges.get(
        reference__startswith=f"portal-next:{waiting.slurm_job_id}@"
    ).allocation.cluster == (next_cluster)
    assert charges.filter(allocation__cluster=dev_cluster).count() == 3
    for cluster in (dev_cluster, next_cluster):
        assert project_balance(project, cluster=cluster).held_gpu_seconds == 0
        assert invariants_check(cluster=cluster) == Findings()
