"""queue_apply against accounting finishing the same job at the same time.

The queue sync and the accounting ingest run under different locks, so each
interleaving of the two is driven here in threads, each with its own database
connection, in an order fixed by events.
"""

import datetime as dt
import threading

import pytest
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from accounts import ledger
from accounts.selectors import project_balance
from clusters.slurm.errors import SlurmUnavailable
from clusters.slurm.states import SlurmJobState
from clusters.slurm.types import QueueEntry
from jobs import queue_sync
from jobs.accounting import accounting_ingest
from jobs.models import ClusterSync, Job, JobEvent
from jobs.queue_sync import queue_apply
from jobs.states import JobState
from tests.clusters.test_cli_stream import cli, record, stand_in_squeue
from tests.factories import (
    blocked_on_a_lock,
    bulk_jobs,
    in_thread,
    project_with_allocation,
    recorded_cluster,
)
from tests.jobs.test_accounting_ingest import NOW, entry, portal_job

pytestmark = pytest.mark.usefixtures("transactional_db")


@pytest.fixture
def cluster():
    return recorded_cluster()


@pytest.fixture
def project(cluster, alice):
    return project_with_allocation(cluster, pi=alice)


def running(slurm_job_id: int) -> QueueEntry:
    """The job as a listing read just before it ended shows it."""
    return QueueEntry(
        job_id=slurm_job_id, array_job_id=None, array_task=None, name="train", user="alice",
        account="vision", partition="gpu", state=SlurmJobState.RUNNING, reason="None",
        comment="", submitted_at=NOW, started_at=NOW, time_limit_minutes=10,
    )  # fmt: skip


def assert_finished_once(job: Job, project) -> None:
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED
    assert job.ended_at == NOW
    assert list(job.events.values_list("state", flat=True)) == [JobState.COMPLETED]
    assert project_balance(project).held_gpu_seconds == 0
    # The next ingest reads the same record again (the overlap): nothing more happens.
    again = accounting_ingest(cluster=job.cluster, entries=[entry(job.slurm_job_id)])
    assert again.finished_jobs == 0
    assert job.events.filter(state=JobState.COMPLETED).count() == 1


def test_a_job_accounting_finished_after_the_queue_was_read_stays_finished(
    cluster, project, alice, monkeypatch
):
    job = portal_job(project, cluster, alice, slurm_job_id=800)
    Job.objects.filter(pk=job.pk).update(state=JobState.PENDING)
    read, written = threading.Event(), threading.Event()
    update_jobs = queue_sync._update_jobs

    def after_the_read(rows, *, now):
        read.set()
        assert written.wait(timeout=30)
        return update_jobs(rows, now=now)

    monkeypatch.setattr(queue_sync, "_update_jobs", after_the_read)
    errors: list = []
    results = []
    queue = in_thread(
        lambda: results.append(queue_apply(cluster=cluster, entries=[running(800)])), errors
    )
    assert read.wait(timeout=30)
    # Accounting finishes the job and commits while the queue sync holds its stale read.
    assert accounting_ingest(cluster=cluster, entries=[entry(800)]).finished_jobs == 1
    written.set()
    queue.join(timeout=30)
    assert errors == []
    assert_finished_once(job, project)
    assert results[0].changed == 0


def test_a_queue_update_that_waited_for_accountings_lock_leaves_the_job_finished(
    cluster, project, alice, monkeypatch
):
    job = portal_job(project, cluster, alice, slurm_job_id=801)
    Job.objects.filter(pk=job.pk).update(state=JobState.PENDING)
    locked, go = threading.Event(), threading.Event()
    release = ledger.ledger_release

    def holding_the_lock(**kwargs):
        released = release(**kwargs)
        locked.set()
        assert go.wait(timeout=30)
        return released

    monkeypatch.setattr(ledger, "ledger_release", holding_the_lock)
    errors: list = []
    results = []
    accounting = in_thread(lambda: accounting_ingest(cluster=cluster, entries=[entry(801)]), errors)
    assert locked.wait(timeout=30)
    # Accounting has finished the job in its transaction, not committed yet: the queue
    # sync reads the job as pending and its UPDATE waits for the row.
    queue = in_thread(
        lambda: results.append(queue_apply(cluster=cluster, entries=[running(801)])), errors
    )
    blocked_on_a_lock(
        queue, "%UPDATE%unnest%", errors, what="the queue sync's UPDATE to wait for the job's row"
    )
    go.set()
    accounting.join(timeout=30)
    queue.join(timeout=30)
    monkeypatch.undo()
    assert errors == []
    assert_finished_once(job, project)
    assert results[0].changed == 0


def pending(
    slurm_job_id: int,
    *,
    priority: int,
    partition: str = "gpu",
    array_job_id: int | None = None,
    array_task: str | None = None,
    **fields,
) -> QueueEntry:
    return QueueEntry(
        job_id=slurm_job_id, array_job_id=array_job_id, array_task=array_task, name="x",
        user="bob", account="other", partition=partition, state=SlurmJobState.PENDING,
        reason="Priority", comment="", submitted_at=NOW, started_at=None,
        time_limit_minutes=10, priority=priority, **fields,
    )  # fmt: skip


def test_a_pending_job_gets_its_place_in_its_partition_and_slurms_expected_start(
    cluster, project, alice
):
    job = portal_job(project, cluster, alice, slurm_job_id=50)
    Job.objects.filter(pk=job.pk).update(state=JobState.PENDING)
    expected = NOW + dt.timedelta(hours=2)
    queue = [
        pending(40, priority=900),  # ahead
        pending(41, priority=700),  # ahead
        pending(42, priority=500),  # the same priority: not counted as ahead
        pending(46, priority=800, array_job_id=46, array_task="0-3%1"),  # 4 tasks ahead
        pending(43, priority=100),  # behind
        pending(44, priority=9999, partition="debug"),  # another partition's
        running(45),  # not waiting
        pending(50, priority=500, expected_start_at=expected),
    ]

    assert queue_apply(cluster=cluster, entries=queue).changed == 1
    job.refresh_from_db()
    assert (job.queue_place, job.expected_start_at) == (7, expected)
    assert job.events.count() == 0  # a new place is no new state
    # Nothing changed, nothing written; one ahead started: one place up.
    assert queue_apply(cluster=cluster, entries=queue).changed == 0
    queue[0] = running(40)
    assert queue_apply(cluster=cluster, entries=queue).changed == 1
    job.refresh_from_db()
    assert job.queue_place == 6

    queue[-1] = running(50)
    queue_apply(cluster=cluster, entries=queue)
    job.refresh_from_db()
    assert (job.state, job.queue_place, job.expected_start_at) == (JobState.RUNNING, None, None)


def statements(captured: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in captured.captured_queries if q["sql"] not in ("BEGIN", "COMMIT")]


@pytest.mark.parametrize("jobs", [4, 400])
def test_a_sync_takes_the_same_few_queries_however_many_jobs_it_writes(
    cluster, project, alice, jobs
):
    bulk_jobs(
        owner=alice, project=project, count=jobs, state=JobState.PENDING,
        partition=cluster.partitions.first(),
    )  # fmt: skip
    Job.objects.filter(cluster=cluster).update(slurm_job_id=F("id") + 10_000)
    ids = sorted(Job.objects.filter(cluster=cluster).values_list("slurm_job_id", flat=True))
    started, waiting, gone = ids[: jobs // 2], ids[jobs // 2 : -1], ids[-1]
    listing = [running(i) for i in started] + [pending(i, priority=i) for i in waiting]
    ClusterSync.objects.create(cluster=cluster)

    with CaptureQueriesContext(connection) as captured:
        result = queue_apply(cluster=cluster, entries=listing)
    # The cluster's partitions (to name the one each job is listed in); the listing
    # copied into a temporary table (made if missing, emptied, one COPY) and compared
    # with the stored jobs in one statement; one more writes the jobs and their events;
    # the time of the sync (and the transaction's settings).
    assert len(statements(captured)) == 8, statements(captured)
    assert result.changed == len(started) + len(waiting)  # started, or given a place
    assert result.vanished == [Job.objects.get(slurm_job_id=gone).pk]
    assert JobEvent.objects.filter(job__cluster=cluster, state=JobState.RUNNING).count() == len(
        started
    )
    assert list(
        Job.objects.filter(slurm_job_id__in=waiting).order_by("-slurm_job_id")
        .values_list("queue_place", flat=True)
    ) == list(range(1, len(waiting) + 1))  # fmt: skip

    with CaptureQueriesContext(connection) as captured:
        again = queue_apply(cluster=cluster, entries=listing)
    assert len(statements(captured)) == 7, statements(captured)  # nothing to write
    assert again.changed == 0
    assert JobEvent.objects.filter(job__cluster=cluster).count() == len(started)


def failing_after(entries: list[QueueEntry], error: Exception):
    """A listing read as it comes whose read fails after ``entries``."""
    yield from entries
    raise error


def assert_untouched(job: Job, cluster) -> None:
    job.refresh_from_db()
    assert (job.state, job.slurm_state, job.started_at) == (JobState.PENDING, "", None)
    assert job.events.count() == 0
    assert not ClusterSync.objects.filter(cluster=cluster).exists()


def test_a_listing_that_fails_part_way_applies_nothing(cluster, project, alice):
    # Read as squeue prints it, a listing is applied while it is read: one that fails
    # after some jobs must not apply those, nor take the rest for vanished.
    job = portal_job(project, cluster, alice, slurm_job_id=50)
    other = portal_job(project, cluster, alice, slurm_job_id=51)
    Job.objects.filter(pk__in=[job.pk, other.pk]).update(state=JobState.PENDING)
    gone = SlurmUnavailable("squeue: error: Unable to contact slurm controller")

    with pytest.raises(SlurmUnavailable):
        queue_apply(cluster=cluster, entries=failing_after([running(50)], gone))

    assert_untouched(job, cluster)
    result = queue_apply(cluster=cluster, entries=[running(50), running(51)])  # read whole
    assert (result.changed, result.vanished) == (2, [])


def test_a_sync_whose_squeue_fails_part_way_changes_nothing(cluster, project, alice, tmp_path):
    job = portal_job(project, cluster, alice, slurm_job_id=50)
    Job.objects.filter(pk=job.pk).update(state=JobState.PENDING)
    bin_dir = stand_in_squeue(
        tmp_path, record(50, state="RUNNING"),
        then="echo 'squeue: error: Unable to contact slurm controller' >&2; exit 1",
    )  # fmt: skip

    with pytest.raises(SlurmUnavailable):
        queue_sync.queue_sync(cluster=cluster, client=cli(bin_dir))

    assert_untouched(job, cluster)
    bin_dir = stand_in_squeue(tmp_path, record(50, state="RUNNING"))
    assert queue_sync.queue_sync(cluster=cluster, client=cli(bin_dir)).changed == 1
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
