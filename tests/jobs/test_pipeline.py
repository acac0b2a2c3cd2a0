"""The whole pipeline with a real worker: form → script → Slurm → queue → accounting → ledger."""

import math
from decimal import Decimal

import pytest

from accounts.models import LedgerEntry
from accounts.selectors import project_balance
from clusters.models import Partition
from jobs.accounting import accounting_sync
from jobs.models import AccountingRecord, Job
from jobs.pricing import charge_gpu_seconds
from jobs.selectors import job_output
from jobs.services import job_create, job_estimate
from jobs.states import JobState
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
    assert record.allocated_gpus == 2 and record.allocated_cpus == 1
    assert record.elapsed_s >= 3
    # Weight 1 for the GPUs, 0.01 GPU-hours a CPU-hour for its CPU, rounded up once.
    assert job.used_gpu_seconds == math.ceil(2 * record.elapsed_s + record.elapsed_s / 100)
    charge = LedgerEntry.objects.get(
        kind="charge", reference__startswith=f"{DEV_CLUSTER}:{job.slurm_job_id}@"
    )
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
    record = AccountingRecord.objects.get(job=job)
    assert job.used_gpu_seconds == math.ceil(record.allocated_cpus * record.elapsed_s / 100)
    assert project_balance(project).held_gpu_seconds == 0


def test_a_cpu_only_job_is_charged_its_cpus_at_the_partitions_rate(
    celery_worker, make_project, alice, workdir
):
    project = make_project(members={alice: "pi"}, gpu_hours=10)
    # A rate high enough that seconds of one CPU cost whole GPU-seconds.
    Partition.objects.filter(cluster__name=DEV_CLUSTER, name="debug").update(
        cpu_hour_rate=Decimal("2.5")
    )
    request = request_for(project, workdir, gpus_per_node=0, script="sleep 3\n")
    estimate = job_estimate(user=alice, request=request)
    # One CPU for the 5-minute limit at 2.5: 300 * 2.5 GPU-seconds.
    assert (estimate.gpu_hours, estimate.cpu_hours) == (0, 5 / 60)
    assert estimate.requested_gpu_hours == pytest.approx(750 / 3600) and estimate.fits
    job = job_create(user=alice, request=request)
    assert job.requested_gpu_seconds == 750 and job.cpu_hour_rate == Decimal("2.5")
    wait_for(lambda: Job.objects.get(pk=job.pk).slurm_job_id, what="the job to be submitted")
    run_to_the_end(job)
    assert job.state == JobState.COMPLETED

    record = AccountingRecord.objects.get(job=job)
    assert (record.allocated_gpus, record.allocated_cpus) == (0, 1) and record.elapsed_s >= 3
    used = charge_gpu_seconds(
        allocated_gpus=0,
        allocated_cpus=record.allocated_cpus,
        elapsed_s=record.elapsed_s,
        billing_weight=job.billing_weight,
        cpu_hour_rate=job.cpu_hour_rate,
    )
    assert used == math.ceil(record.elapsed_s * 2.5) >= 8
    assert job.used_gpu_seconds == record.charged_gpu_seconds == used
    charge = LedgerEntry.objects.get(
        kind="charge", reference__startswith=f"{DEV_CLUSTER}:{job.slurm_job_id}@"
    )
    assert -charge.gpu_seconds == used
    balance = project_balance(project)
    assert (balance.used_gpu_seconds, balance.held_gpu_seconds) == (used, 0)


def test_an_array_is_charged_per_task_and_released_when_all_tasks_end(
    celery_worker, make_project, alice, workdir
):
    project = make_project(members={alice: "pi"}, gpu_hours=10)
    job = job_create(
        user=alice,
        request=request_for(project, workdir, array="0-2", script="sleep 1\necho task\n"),
    )
    assert job.requested_gpu_seconds == 3 * 5 * 60 + 9  # and each task's CPU at 0.01
    wait_for(lambda: Job.objects.get(pk=job.pk).slurm_job_id, what="the array to be submitted")
    run_to_the_end(job)
    assert job.state == JobState.COMPLETED
    records = AccountingRecord.objects.filter(job=job)
    assert records.count() == 3
    assert job.used_gpu_seconds == sum(r.charged_gpu_seconds for r in records)
    assert all(
        r.charged_gpu_seconds == math.ceil(r.allocated_gpus * r.elapsed_s + r.elapsed_s / 100)
        for r in records
    )
    assert project_balance(project).held_gpu_seconds == 0
    assert "task" in job_output(job, array_task=1).text
