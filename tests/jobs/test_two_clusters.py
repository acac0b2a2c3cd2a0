"""Two clusters in one portal: portal-dev (the host's Slurm) and portal-next (the other
Debian release's, in a root of its own). A job goes where its partition is, runs there
as its owner, and is charged to the project's allocation on that cluster alone."""

import pytest

from accounts.models import LedgerEntry
from accounts.selectors import project_balance
from clusters.slurm import client_for
from jobs.errors import JobInvalid
from jobs.models import AccountingRecord, Job
from jobs.requests import JobRequest
from jobs.selectors import job_output
from jobs.services import job_create, job_estimate
from jobs.states import JobState
from tests.conftest import through_slurmrestd
from tests.factories import request_for, run_to_the_end, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("backend", ["cli", "rest"])
def test_a_job_for_portal_next_runs_there_as_its_owner_and_is_charged_to_that_allocation(
    celery_worker, make_project, dev_cluster, next_cluster, alice, workdir, backend
):
    # Over rest the reconciler sets the account's limits, the worker submits and the
    # syncs read the queue and accounting through 24.11's slurmrestd.
    if backend == "rest":
        through_slurmrestd(next_cluster)
    project = make_project(
        members={alice: "pi"}, gpu_hours=10, clusters=(dev_cluster, next_cluster)
    )
    job = job_create(
        user=alice,
        request=request_for(
            project,
            workdir,
            partition="short",  # portal-next's alone: it names the cluster
            gpus_per_node=2,
            script='sleep 2\necho "hello from $(id -un) on $SLURMD_NODENAME of $SLURM_CLUSTER_NAME '
            'with $CUDA_VISIBLE_DEVICES"\n',
        ),
    )
    assert job.cluster == next_cluster and job.partition.cluster == next_cluster
    wait_for(lambda: Job.objects.get(pk=job.pk).slurm_job_id, what="the worker to submit the job")
    run_to_the_end(job)

    assert job.state == JobState.COMPLETED and job.exit_code == 0
    # Two of the node's four GPUs: which two depends on the other tests' jobs there.
    said = job_output(job).text
    assert "hello from alice on next1 of portal-next with " in said
    devices = said.rsplit("with ", 1)[1].split()[0].split(",")
    assert len(devices) == 2 and set(devices) <= {"0", "1", "2", "3"}
    record = AccountingRecord.objects.get(job=job)
    assert (record.cluster, record.user, record.account) == (
        next_cluster,
        "alice",
        project.slurm_account,
    )
    assert record.allocated_gpus == 2
    charge = LedgerEntry.objects.get(
        kind="charge", reference__startswith=f"portal-next:{job.slurm_job_id}@"
    )
    assert charge.allocation.cluster == next_cluster
    assert -charge.gpu_seconds == job.used_gpu_seconds > 0

    on_next = project_balance(project, cluster=next_cluster)
    on_dev = project_balance(project, cluster=dev_cluster)
    assert on_next.used_gpu_seconds == job.used_gpu_seconds and on_next.held_gpu_seconds == 0
    assert on_dev.used_gpu_seconds == 0 and on_dev.held_gpu_seconds == 0
    # portal-dev's Slurm never saw it; portal-next's accounting has it under alice.
    assert (
        client_for(dev_cluster).find_by_comment(
            job.comment, user="alice", account=project.slurm_account, since=job.created_at
        )
        == []
    )
    assert client_for(next_cluster).find_by_comment(
        job.comment, user="alice", account=project.slurm_account, since=job.created_at
    ) == [job.slurm_job_id]


def test_the_partition_names_the_cluster_and_an_ambiguous_request_says_to_choose(
    make_project, dev_cluster, next_cluster, alice, workdir
):
    project = make_project(
        members={alice: "pi"}, clusters=(dev_cluster, next_cluster), in_slurm=False
    )
    with pytest.raises(JobInvalid) as refused:
        job_estimate(
            user=alice, request=JobRequest(project=project.slug, script="true\n", partition=None)
        )
    assert "Choose a cluster" in str(refused.value.fields["cluster"])

    with pytest.raises(JobInvalid) as refused:
        job_estimate(
            user=alice,
            request=request_for(project, workdir, cluster=next_cluster.name, partition="debug"),
        )
    message = str(refused.value.fields["partition"])
    assert "no partition 'debug' on portal-next" in message and "batch" in message


def test_a_project_without_an_allocation_on_portal_next_cannot_submit_there(
    make_project, dev_cluster, next_cluster, alice, workdir
):
    project = make_project(members={alice: "pi"}, in_slurm=False)  # portal-dev only
    with pytest.raises(JobInvalid) as refused:
        job_create(
            user=alice,
            request=request_for(project, workdir, cluster=next_cluster.name, partition="short"),
        )
    assert "no active GPU-hour allocation on portal-next" in str(refused.value.fields["project"])
    assert not Job.objects.exists()
