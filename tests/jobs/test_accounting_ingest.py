"""accounting_ingest with recorded Slurm records: charges once, finishes jobs, notes the rest."""

import datetime as dt
import uuid
from decimal import Decimal

import pytest
from django.utils import timezone

from accounts.ledger import allocation_grant, ledger_hold
from accounts.models import LedgerEntry
from accounts.selectors import project_balance
from accounts.services import membership_set, project_create
from clusters.models import Cluster, Partition
from clusters.slurm.states import SlurmJobState
from clusters.slurm.types import AccountingEntry
from jobs.accounting import accounting_ingest
from jobs.models import AccountingRecord, Job
from jobs.states import JobState

NOW = timezone.now().replace(microsecond=0)
TODAY = dt.date.today()


@pytest.fixture
def cluster(db):
    cluster = Cluster.objects.create(name="recorded")
    Partition.objects.create(
        cluster=cluster, name="gpu", gpus_per_node=8, nodes=1, billing_weight=Decimal("1.5")
    )
    return cluster


@pytest.fixture
def project(cluster, alice):
    project = project_create(slug="vision", name="Vision", slurm_account="vision")
    membership_set(project=project, user=alice, role="pi")
    allocation_grant(
        project=project,
        cluster=cluster,
        gpu_hours=10,
        starts_on=TODAY - dt.timedelta(days=1),
        ends_on=TODAY + dt.timedelta(days=30),
        actor=None,
        reason="test",
    )
    return project


def entry(job_id: int, **fields) -> AccountingEntry:
    values = {
        "job_id": job_id,
        "array_job_id": None,
        "array_task": None,
        "name": "train",
        "user": "alice",
        "account": "vision",
        "partition": "gpu",
        "state": SlurmJobState.COMPLETED,
        "exit_code": 0,
        "signal": 0,
        "allocated_gpus": 2,
        "elapsed_s": 600,
        "submitted_at": NOW - dt.timedelta(minutes=20),
        "started_at": NOW - dt.timedelta(minutes=10),
        "ended_at": NOW,
        "comment": "",
        **fields,
    }
    return AccountingEntry(**values)


def portal_job(project, cluster, alice, *, slurm_job_id: int, array: str = "", tasks: int = 1):
    job = Job.objects.create(
        owner=alice,
        project=project,
        cluster=cluster,
        partition=cluster.partitions.get(name="gpu"),
        name="train",
        time_limit_minutes=10,
        gpus_per_node=2,
        working_directory="/home/alice",
        output_path="/home/alice/slurm-%j.out",
        error_path="/home/alice/slurm-%j.out",
        script="true\n",
        rendered_script="#!/bin/bash\ntrue\n",
        billing_weight=Decimal("1.5"),
        requested_gpu_seconds=2 * 600 * tasks * 3 // 2,
        array=array,
        array_tasks=tasks,
        slurm_job_id=slurm_job_id,
        state=JobState.RUNNING,
        submit_token=uuid.uuid4(),
    )
    ledger_hold(
        allocation=project.allocations.get(),
        reference=job.hold_reference,
        gpu_seconds=job.requested_gpu_seconds,
        user=alice,
    )
    # Saved before Slurm ran it: a run submitted before its portal job was saved is not
    # that job's (jobs.accounting.is_run_of).
    Job.objects.filter(pk=job.pk).update(created_at=NOW - dt.timedelta(minutes=30))
    job.refresh_from_db()
    return job


def test_work_outside_the_portal_is_charged_to_its_project_once(cluster, project, alice):
    records = [entry(501)]
    first = accounting_ingest(cluster=cluster, entries=records)
    again = accounting_ingest(cluster=cluster, entries=records)
    assert (first.charged, again.charged) == (1, 0)
    charge = LedgerEntry.objects.get(kind="charge", reference__startswith="recorded:501@")
    assert charge.gpu_seconds == -(2 * 600 * 3 // 2)  # GPUs x elapsed x the partition's weight
    assert charge.user == alice
    assert charge.partition.name == "gpu"
    assert project_balance(project).used_gpu_seconds == 1800
    record = AccountingRecord.objects.get(slurm_job_id=501)
    assert record.job is None and record.charged_gpu_seconds == 1800


def test_a_running_record_is_stored_and_charged_only_when_it_ends(cluster, project):
    running = entry(502, state=SlurmJobState.RUNNING, ended_at=None, exit_code=None, elapsed_s=60)
    assert accounting_ingest(cluster=cluster, entries=[running]).charged == 0
    assert AccountingRecord.objects.get(slurm_job_id=502).charged_gpu_seconds is None
    assert accounting_ingest(cluster=cluster, entries=[entry(502)]).charged == 1
    assert project_balance(project).used_gpu_seconds == 1800


def test_an_unknown_account_is_noted_not_charged(cluster, project):
    result = accounting_ingest(cluster=cluster, entries=[entry(503, account="elsewhere")])
    assert result.charged == 0
    record = AccountingRecord.objects.get(slurm_job_id=503)
    assert record.charged_gpu_seconds == 0
    assert "not a portal project" in record.charge_note
    assert not LedgerEntry.objects.filter(kind="charge").exists()


def test_a_portal_job_that_left_the_queue_is_finished_by_accounting(cluster, project, alice):
    job = portal_job(project, cluster, alice, slurm_job_id=600)
    accounting_ingest(
        cluster=cluster,
        entries=[entry(600, state=SlurmJobState.OUT_OF_MEMORY, exit_code=0, signal=9)],
    )
    job.refresh_from_db()
    assert job.state == JobState.OUT_OF_MEMORY
    assert job.used_gpu_seconds == 1800
    assert job.ended_at == NOW
    assert project_balance(project).held_gpu_seconds == 0
    assert job.events.last().state == JobState.OUT_OF_MEMORY
    # The same records again: no second charge, no second event.
    accounting_ingest(cluster=cluster, entries=[entry(600, state=SlurmJobState.OUT_OF_MEMORY)])
    assert LedgerEntry.objects.filter(kind="charge").count() == 1
    assert job.events.filter(state=JobState.OUT_OF_MEMORY).count() == 1


def test_an_array_keeps_its_hold_until_every_task_has_ended(cluster, project, alice):
    job = portal_job(project, cluster, alice, slurm_job_id=700, array="0-9", tasks=10)
    task = {"array_job_id": 700}
    accounting_ingest(
        cluster=cluster,
        entries=[
            entry(700, array_task="0", **task),
            entry(701, array_task="1", **task),
            entry(702, array_task="[2-9]", state=SlurmJobState.PENDING, ended_at=None, **task),
        ],
    )
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    assert project_balance(project).held_gpu_seconds == job.requested_gpu_seconds
    # The pending rest was cancelled before it started: one record for tasks 2-9.
    accounting_ingest(
        cluster=cluster,
        entries=[
            entry(
                702, array_task="[2-9]", state=SlurmJobState.CANCELLED, allocated_gpus=0,
                elapsed_s=0, started_at=None, **task,
            )
        ],
    )  # fmt: skip
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    assert job.used_gpu_seconds == 2 * 1800
    assert project_balance(project).held_gpu_seconds == 0


def test_a_comment_that_only_looks_like_a_portal_token_is_ignored(cluster, project):
    result = accounting_ingest(cluster=cluster, entries=[entry(504, comment="portal:not-a-uuid")])
    assert result.charged == 1  # charged as outside work of its account
    assert AccountingRecord.objects.get(slurm_job_id=504).job is None
