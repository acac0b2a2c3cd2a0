"""The whole pipeline with a real worker: form → script → Slurm → queue → accounting → ledger."""

import pytest

from accounts.models import LedgerEntry
from accounts.selectors import project_balance
from jobs.models import AccountingRecord, Job
from jobs.selectors import job_output
from jobs.services import job_create
from jobs.states import JobState
from jobs.sync import accounting_sync
from tests.conftest import DEV_CLUSTER
from tests.factories import request_for, run_to_the_end, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]


def test_a_job_runs_as_its_owner_and_is_charged_what_it_used(
    celery_worker, make_project, alice, workdir
):
    project = make_project(members={alice: "pi"}, gpu_hours=10)
    job = job_create(
        user=alice,
        request=request_for(
            project,
            workdir,
            gpus_per_node=2,
            script='sleep 3\necho "hello from $(id -un) in $PWD with $CUDA_VISIBLE_DEVICES"\n',
        ),
    )
    # The worker submits it once the transaction commits.
    wait_for(lambda: Job.objects.get(pk=job.pk).slurm_job_id, what="the worker to submit the job")
    run_to_the_end(job)

    assert [event.state for event in job.events.all()] == [
        JobState.NEW,
        JobState.SUBMITTING,
        JobState.PENDING,
        JobState.RUNNING,
        JobState.COMPLETED,
    ]
    assert job.exit_code == 0
    assert job.started_at and job.ended_at and job.started_at <= job.ended_at

    record = AccountingRecord.objects.get(job=job)
    assert record.user == "alice" and record.account == project.slurm_account
    assert record.allocated_gpus == 2
    assert record.elapsed_s >= 3
    assert job.used_gpu_seconds == record.allocated_gpus * record.elapsed_s  # weight 1
    charge = LedgerEntry.objects.get(kind="charge", reference=f"{DEV_CLUSTER}:{job.slurm_job_id}")
    assert -charge.gpu_seconds == job.used_gpu_seconds
    assert charge.user == alice

    balance = project_balance(project)
    assert balance.held_gpu_seconds == 0  # the hold went with the charge
    assert balance.used_gpu_seconds == job.used_gpu_seconds

    text = job_output(job).text
    assert f"hello from alice in {workdir}" in text

    # Reading accounting again changes nothing.
    accounting_sync(cluster=job.cluster)
    assert LedgerEntry.objects.filter(kind="charge", reference=charge.reference).count() == 1
    assert project_balance(project) == balance


def test_a_failing_job_ends_failed_with_its_exit_code(celery_worker, make_project, alice, workdir):
    project = make_project(members={alice: "pi"}, gpu_hours=10)
    job = job_create(
        user=alice, request=request_for(project, workdir, gpus_per_node=0, script="exit 3\n")
    )
    wait_for(lambda: Job.objects.get(pk=job.pk).slurm_job_id, what="the job to be submitted")
    run_to_the_end(job)
    assert job.state == JobState.FAILED
    assert job.exit_code == 3
    assert job.used_gpu_seconds == 0
    assert project_balance(project).held_gpu_seconds == 0


def test_an_array_is_charged_per_task_and_released_when_all_tasks_end(
    celery_worker, make_project, alice, workdir
):
    project = make_project(members={alice: "pi"}, gpu_hours=10)
    job = job_create(
        user=alice,
        request=request_for(project, workdir, array="0-2", script="sleep 1\necho task\n"),
    )
    assert job.requested_gpu_seconds == 3 * 5 * 60
    wait_for(lambda: Job.objects.get(pk=job.pk).slurm_job_id, what="the array to be submitted")
    run_to_the_end(job)
    assert job.state == JobState.COMPLETED
    records = AccountingRecord.objects.filter(job=job)
    assert records.count() == 3
    assert job.used_gpu_seconds == sum(r.allocated_gpus * r.elapsed_s for r in records)
    assert project_balance(project).held_gpu_seconds == 0
    assert "task" in job_output(job, array_task=1).text
