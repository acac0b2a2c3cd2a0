"""The queue sync sets aside what it cannot believe and applies the rest (issue 33).

A record squeue printed that does not read, and every record of a job id listed twice
(a forged copy of a victim's job beside the real one), is reported (``RefusedRecord``),
and a portal job with such an id is left as it is: not updated from either record, not
taken for gone. The other jobs of the listing are applied as usual.
"""

import datetime as dt

import pytest

from clusters.models import RefusedRecord
from clusters.slurm.parsing import squeue_record
from clusters.slurm.states import SlurmJobState
from clusters.slurm.types import QueueEntry
from jobs.models import Job
from jobs.queue_sync import queue_apply, queue_sync
from jobs.states import JobState
from tests.clusters.test_cli_stream import cli, stand_in_squeue
from tests.factories import project_with_allocation, recorded_cluster
from tests.jobs.test_accounting_ingest import NOW, portal_job

pytestmark = pytest.mark.usefixtures("transactional_db")

STARTED = NOW - dt.timedelta(minutes=5)


@pytest.fixture
def cluster():
    return recorded_cluster()


@pytest.fixture
def project(cluster, alice):
    return project_with_allocation(cluster, pi=alice)


def in_state(job: Job, state: JobState, **fields) -> Job:
    Job.objects.filter(pk=job.pk).update(state=state, **fields)
    job.refresh_from_db()
    return job


def squeue_line(job_id: int, *, state: str, array_job: str = "N/A", task: str = "N/A") -> bytes:
    """One record as squeue prints it in the queue sync's format."""
    fields = [str(job_id), array_job, task, "alice", "vision", "gpu", state, "Priority",
              "2026-12-02T12:46:10", "N/A", "10:00", "7", "gres/gpu:2", "1", ""]  # fmt: skip
    return squeue_record(fields, texts=False)


def entry(job_id: int, state: SlurmJobState, **fields) -> QueueEntry:
    values = {
        "job_id": job_id, "array_job_id": None, "array_task": None, "name": "train",
        "user": "alice", "account": "vision", "partition": "gpu", "state": state,
        "reason": "None", "comment": "", "submitted_at": NOW,
        "started_at": STARTED if state is SlurmJobState.RUNNING else None,
        "time_limit_minutes": 10, "gpus": 2, **fields,
    }  # fmt: skip
    return QueueEntry(**values)


def snapshot(job: Job) -> tuple:
    job.refresh_from_db()
    return (job.state, job.slurm_state, job.reason, job.started_at, job.updated_at,
            job.events.count())  # fmt: skip


def test_an_unreadable_record_leaves_its_job_as_it_is_and_the_rest_is_applied(
    cluster, project, alice, tmp_path
):
    unreadable = in_state(portal_job(project, cluster, alice, slurm_job_id=50), JobState.PENDING)
    starting = in_state(portal_job(project, cluster, alice, slurm_job_id=51), JobState.PENDING)
    gone = portal_job(project, cluster, alice, slurm_job_id=52)  # running, no longer listed
    before = snapshot(unreadable)
    # A state this Slurm does not have: the record cannot be read, whatever else it says.
    bin_dir = stand_in_squeue(
        tmp_path, squeue_line(50, state="GPU"), squeue_line(51, state="RUNNING")
    )

    result = queue_sync(cluster=cluster, client=cli(bin_dir))

    assert snapshot(unreadable) == before
    assert result.vanished == [gone.pk]  # not the job whose record was refused
    starting.refresh_from_db()
    assert starting.state == JobState.RUNNING
    assert result.changed == 1
    refused = RefusedRecord.objects.get(cluster=cluster)
    assert (refused.listing, refused.slurm_job_id, refused.times_seen) == ("queue", 50, 1)
    assert "GPU" in refused.problem
    # Listed the same way again: counted, not a second row, and the job still as it was.
    again = queue_sync(cluster=cluster, client=cli(bin_dir))
    assert (again.changed, again.vanished) == (0, [gone.pk])
    assert RefusedRecord.objects.get(cluster=cluster).times_seen == 2
    assert snapshot(unreadable) == before


def test_a_forged_copy_of_a_victims_running_job_leaves_the_victim_as_it_is(cluster, project, alice):
    # The victim's job has just started; the forged copy would have it held by an admin.
    victim = in_state(portal_job(project, cluster, alice, slurm_job_id=60), JobState.PENDING)
    other = in_state(portal_job(project, cluster, alice, slurm_job_id=61), JobState.PENDING)
    before = snapshot(victim)
    forged = entry(60, SlurmJobState.PENDING, reason="JobHeldAdmin")
    listing = [entry(60, SlurmJobState.RUNNING), forged, entry(61, SlurmJobState.RUNNING)]

    result = queue_apply(cluster=cluster, entries=listing)

    assert snapshot(victim) == before
    assert result.vanished == []
    assert [(r.job_id, "listed 2 times" in r.problem) for r in result.refused] == [
        (60, True),
        (60, True),
    ]
    other.refresh_from_db()
    assert other.state == JobState.RUNNING and result.changed == 1
    reported = RefusedRecord.objects.filter(cluster=cluster, listing="queue")
    assert sorted(reported.values_list("slurm_job_id", "times_seen")) == [(60, 1), (60, 1)]
    # Both still listed at the next sync: counted again, the victim still untouched.
    queue_apply(cluster=cluster, entries=listing)
    assert sorted(reported.values_list("slurm_job_id", "times_seen")) == [(60, 2), (60, 2)]
    assert snapshot(victim) == before
    # Once only the real record is listed, the victim is followed again.
    assert queue_apply(cluster=cluster, entries=[listing[0], listing[2]]).changed == 1
    victim.refresh_from_db()
    assert (victim.state, victim.started_at) == (JobState.RUNNING, STARTED)


def test_an_array_task_id_listed_as_a_plain_job_too_leaves_the_array_as_it_is(
    cluster, project, alice
):
    array = in_state(
        portal_job(project, cluster, alice, slurm_job_id=70, array="0-3", tasks=4),
        JobState.PENDING,
    )
    before = snapshot(array)
    task = entry(71, SlurmJobState.RUNNING, array_job_id=70, array_task="1")
    forged = entry(71, SlurmJobState.RUNNING)  # the task's id, as a job of its own

    result = queue_apply(cluster=cluster, entries=[task, forged])

    assert snapshot(array) == before  # not started, not gone
    assert result.vanished == [] and result.changed == 0
    assert sorted(r.job_id for r in result.refused) == [71, 71]
    # Without the forged copy the array is seen running.
    assert queue_apply(cluster=cluster, entries=[task]).changed == 1
    array.refresh_from_db()
    assert array.state == JobState.RUNNING
