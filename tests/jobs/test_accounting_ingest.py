"""accounting_ingest with recorded Slurm records: charges once, finishes jobs, notes the rest."""

import datetime as dt
import uuid
from decimal import Decimal

import pytest
from django.utils import timezone

from accounts.ledger import allocation_grant, ledger_hold
from accounts.models import LedgerEntry
from accounts.selectors import project_balance
from accounts.services import membership_remove, membership_set, project_create
from clusters.models import Cluster, Partition, RefusedRecord
from clusters.slurm.states import SlurmJobState
from clusters.slurm.types import AccountingEntry
from jobs.accounting import REQUEUE_WINDOW, accounting_ingest
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


# --- every run, at what it ran on (issue 33) -------------------------------------------


def charges(cluster, slurm_job_id: int) -> list[int]:
    return sorted(
        -gpu_seconds
        for gpu_seconds in LedgerEntry.objects.filter(
            kind="charge", reference__startswith=f"{cluster.name}:{slurm_job_id}@"
        ).values_list("gpu_seconds", flat=True)
    )


def requeued_run(slurm_job_id: int, **fields) -> AccountingEntry:
    """The first run of a job Slurm requeued after 300 s: ended, submitted again after."""
    return entry(
        slurm_job_id, state=SlurmJobState.REQUEUED, elapsed_s=300, exit_code=0,
        submitted_at=NOW - dt.timedelta(minutes=20), started_at=NOW - dt.timedelta(minutes=19),
        ended_at=NOW - dt.timedelta(minutes=14), **fields,
    )  # fmt: skip


def second_run(slurm_job_id: int, **fields) -> AccountingEntry:
    return entry(
        slurm_job_id, submitted_at=NOW - dt.timedelta(minutes=14),
        started_at=NOW - dt.timedelta(minutes=10), **fields,
    )  # fmt: skip


def test_each_run_of_a_requeued_portal_job_is_charged_once_and_the_hold_goes_with_the_last(
    cluster, project, alice
):
    job = portal_job(project, cluster, alice, slurm_job_id=900)
    held = project_balance(project).held_gpu_seconds
    first = accounting_ingest(cluster=cluster, entries=[requeued_run(900)])
    assert first.charged == 1
    assert charges(cluster, 900) == [2 * 300 * 3 // 2]
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.used_gpu_seconds is None
    # Requeued, the job may run whole again: its hold stays beside the first run's charge.
    assert project_balance(project).held_gpu_seconds == held
    both = [requeued_run(900), second_run(900)]
    assert accounting_ingest(cluster=cluster, entries=both).charged == 1
    assert charges(cluster, 900) == [900, 1800]
    job.refresh_from_db()
    assert (job.state, job.used_gpu_seconds) == (JobState.COMPLETED, 2700)
    assert project_balance(project).held_gpu_seconds == 0
    assert "requeued 1 time, every run charged" in job.events.last().detail
    assert AccountingRecord.objects.filter(job=job).count() == 2
    # The same runs again: nothing more.
    assert accounting_ingest(cluster=cluster, entries=both).charged == 0
    assert charges(cluster, 900) == [900, 1800]


def test_a_job_requeued_after_it_ended_is_followed_again_and_charged_again(cluster, project, alice):
    job = portal_job(project, cluster, alice, slurm_job_id=901)
    done = entry(901, ended_at=NOW - dt.timedelta(minutes=14))
    accounting_ingest(cluster=cluster, entries=[done])
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED
    again = entry(
        901, state=SlurmJobState.PENDING, submitted_at=NOW - dt.timedelta(minutes=13),
        started_at=None, ended_at=None, elapsed_s=0, exit_code=None, allocated_gpus=0,
    )  # fmt: skip
    accounting_ingest(cluster=cluster, entries=[done, again])
    job.refresh_from_db()
    assert (job.state, job.ended_at) == (JobState.PENDING, None)
    assert "requeued after it ended" in job.events.last().detail
    ended = again._replace(
        state=SlurmJobState.COMPLETED, started_at=NOW - dt.timedelta(minutes=5), ended_at=NOW,
        elapsed_s=300, exit_code=0, allocated_gpus=2,
    )  # fmt: skip
    accounting_ingest(cluster=cluster, entries=[done, ended])
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED
    assert charges(cluster, 901) == [900, 1800] and job.used_gpu_seconds == 2700


def test_a_run_of_a_recorded_id_that_is_not_the_jobs_own_is_work_outside_the_portal(
    cluster, project, alice, bob
):
    membership_set(project=project, user=bob, role="member")
    job = portal_job(project, cluster, alice, slurm_job_id=902)
    long_after = NOW + REQUEUE_WINDOW + dt.timedelta(hours=2)
    Job.objects.filter(pk=job.pk).update(state=JobState.COMPLETED, ended_at=NOW)
    runs = [
        # Another user's job under the same id (Slurm's ids wrapped, or were reset).
        entry(902, user="bob", submitted_at=NOW - dt.timedelta(minutes=1)),
        # Before the portal job was saved.
        entry(902, submitted_at=NOW - dt.timedelta(hours=2), ended_at=NOW - dt.timedelta(hours=1)),
    ]
    accounting_ingest(cluster=cluster, entries=runs[:1])
    accounting_ingest(cluster=cluster, entries=runs[1:])
    # Long after the job ended: an id reused, not a requeue.
    later = entry(
        902, submitted_at=long_after, started_at=long_after,
        ended_at=long_after + dt.timedelta(minutes=10),
    )  # fmt: skip
    accounting_ingest(cluster=cluster, entries=[later])
    assert not AccountingRecord.objects.filter(job=job).exists()
    assert AccountingRecord.objects.filter(slurm_job_id=902).count() == 3
    assert len(charges(cluster, 902)) == 3  # each charged to the account it ran under


def test_a_job_moved_to_a_dearer_partition_pays_it_and_to_a_cheaper_one_its_quote(
    cluster, project, alice
):
    Partition.objects.create(
        cluster=cluster, name="big", gpus_per_node=8, nodes=1, billing_weight=Decimal("4")
    )
    Partition.objects.create(
        cluster=cluster, name="cheap", gpus_per_node=8, nodes=1, billing_weight=Decimal("0.5")
    )
    dearer = portal_job(project, cluster, alice, slurm_job_id=903)
    cheaper = portal_job(project, cluster, alice, slurm_job_id=904)
    accounting_ingest(
        cluster=cluster,
        entries=[
            entry(903, partition="big", allocated_gpus=4, time_limit_minutes=30),
            entry(904, partition="cheap"),
        ],
    )
    assert charges(cluster, 903) == [4 * 600 * 4]  # what it ran on: 4 GPUs at 4
    assert charges(cluster, 904) == [2 * 600 * 3 // 2]  # its quote, 1.5, not 0.5
    note = AccountingRecord.objects.get(slurm_job_id=903).charge_note
    assert "partition gpu -> big" in note and "GPUs 2 -> 4" in note
    assert "time limit 10 -> 30 min" in note
    assert any("partition gpu -> big" in e.detail for e in dearer.events.all())
    assert "partition gpu -> cheap" in AccountingRecord.objects.get(slurm_job_id=904).charge_note
    cheaper.refresh_from_db()
    assert cheaper.used_gpu_seconds == 1800


def test_work_of_a_user_the_project_does_not_have_is_not_charged_and_is_reported(
    cluster, project, charlie
):
    result = accounting_ingest(cluster=cluster, entries=[entry(905, user="charlie")])
    assert result.charged == 0
    record = AccountingRecord.objects.get(slurm_job_id=905)
    assert record.charged_gpu_seconds == 0 and "not a member of vision" in record.charge_note
    assert charges(cluster, 905) == []
    refused = RefusedRecord.objects.get(slurm_job_id=905)
    assert refused.listing == RefusedRecord.Listing.ACCOUNTING


def test_a_member_who_left_after_the_run_was_submitted_is_still_charged(
    cluster, project, alice, bob
):
    membership_set(project=project, user=bob, role="member")
    membership_remove(project=project, user=bob)
    assert accounting_ingest(cluster=cluster, entries=[entry(906, user="bob")]).charged == 1


def test_a_run_listed_twice_or_an_id_listed_for_two_users_charges_nothing(cluster, project):
    twice = [entry(907), entry(907, elapsed_s=6000)]
    two_users = [entry(908), entry(908, user="bob", submitted_at=NOW - dt.timedelta(minutes=5))]
    result = accounting_ingest(cluster=cluster, entries=[*twice, *two_users, entry(909)])
    assert result.charged == 1  # 909 only: the rest of the listing goes on
    assert not AccountingRecord.objects.filter(slurm_job_id__in=[907, 908]).exists()
    refused = RefusedRecord.objects.filter(slurm_job_id__in=[907, 908])
    # 907's two copies read alike (what stays the same of a run): kept once.
    assert sorted(refused.values_list("slurm_job_id", flat=True)) == [907, 908, 908]
    assert {r.problem for r in refused if r.slurm_job_id == 907} == {
        "listed 2 times; none of them is taken"
    }


def test_texts_longer_than_their_columns_do_not_stop_the_ingest(cluster, project):
    long = entry(
        910, partition="gpu," * 100, array_task="[" + ",".join(map(str, range(200))) + "]",
        array_job_id=910, state=SlurmJobState.CANCELLED, elapsed_s=0, allocated_gpus=0,
        started_at=None, name="n" * 300, comment="c" * 300,
    )  # fmt: skip
    assert accounting_ingest(cluster=cluster, entries=[long, entry(911)]).charged == 1
    record = AccountingRecord.objects.get(slurm_job_id=910)
    assert len(record.partition) == 200 and len(record.array_task) == 200


def test_a_listing_read_before_the_run_ended_does_not_make_it_run_again(cluster, project, alice):
    """Two ingests at once (two beats): the one that read accounting before the job ended
    is applied after the one that read it ended. The run stays ended, the job finished
    once, with one event of each state."""
    job = portal_job(project, cluster, alice, slurm_job_id=990)
    stale = entry(990, state=SlurmJobState.RUNNING, ended_at=None, exit_code=None, elapsed_s=60)
    accounting_ingest(cluster=cluster, entries=[entry(990)])
    accounting_ingest(cluster=cluster, entries=[stale])
    record = AccountingRecord.objects.get(slurm_job_id=990)
    assert (record.state, record.ended_at) == ("COMPLETED", NOW)
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED and job.used_gpu_seconds == 1800
    assert [e.state for e in job.events.all()] == [JobState.COMPLETED]
    assert charges(cluster, 990) == [1800]


def test_a_job_the_queue_saw_end_is_not_reopened_by_accounting_that_lags(cluster, project, alice):
    """squeue lists a job COMPLETED a moment before slurmdbd hears of its end: the run
    accounting still calls running is the one that ended, not Slurm running it again."""
    job = portal_job(project, cluster, alice, slurm_job_id=991)
    Job.objects.filter(pk=job.pk).update(state=JobState.COMPLETED, ended_at=NOW)
    lagging = entry(991, state=SlurmJobState.RUNNING, ended_at=None, exit_code=None, elapsed_s=60)
    accounting_ingest(cluster=cluster, entries=[lagging])
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED and not job.events.exists()
    accounting_ingest(cluster=cluster, entries=[entry(991)])
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED and job.used_gpu_seconds == 1800
    assert charges(cluster, 991) == [1800]
