"""What Slurm's queue says, applied to the portal every few seconds.

The queue sync reads one listing per cluster and writes only the jobs whose
state, Slurm state, reason or start time changed — one UPDATE for all of them
and one INSERT for their events, however many jobs there are. A job that left
the queue is not assumed to have finished: accounting (``jobs.accounting``) says
how it ended.
"""

import datetime as dt
import logging
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import connection, transaction
from django.db.models import BigIntegerField
from django.db.models.functions import Cast, Extract
from django.utils import timezone

from clusters.models import Cluster
from clusters.selectors import cluster_status_due
from clusters.services import cluster_status_failed, cluster_status_record
from clusters.slurm import SlurmClient, SlurmError, shared_client_for
from clusters.slurm.states import SlurmJobState
from clusters.slurm.types import QueueEntry
from clusters.status import array_task_count
from jobs.metrics import start_observed
from jobs.models import ClusterSync, Job, JobEvent
from jobs.states import IN_SLURM, PORTAL_VALUE_OF, TERMINAL_VALUES, JobState

logger = logging.getLogger(__name__)

_ARRAY_ORDER = (JobState.RUNNING, JobState.PENDING, JobState.SUSPENDED)


@dataclass
class QueueSyncResult:
    changed: int = 0
    vanished: list[int] = field(default_factory=list)  # portal job ids no longer queued


def _reason(entry: QueueEntry) -> str:
    return "" if entry.reason in ("None", "") else entry.reason[:200]


def _array_view(entries: list[QueueEntry]) -> QueueEntry | None:
    """One entry standing for an array: running if a task runs, else pending; None when
    no task is queued or running (how it ended is accounting's to say)."""
    for wanted in _ARRAY_ORDER:
        for entry in entries:
            if PORTAL_VALUE_OF[entry.state] == wanted:
                return entry
    return None


class _QueuePlaces:
    """Where a pending job stands among the pending jobs of its partition, by Slurm's
    priority: 1 + how many have a higher one (an array's pending tasks count one each;
    ties are not counted as ahead), as the status page counts them. A partition's
    priorities are sorted once, and only if a portal job pends there."""

    def __init__(self) -> None:
        self.pending: dict[str, list[tuple[int, int]]] = defaultdict(list)
        self._ranked: dict[str, tuple[list[int], list[int]]] = {}

    def add(self, entry: QueueEntry) -> None:
        tasks = array_task_count(entry.array_task) if entry.array_task else 1
        self.pending[entry.partition].append((-entry.priority, tasks))

    def place(self, entry: QueueEntry) -> int:
        ranked = self._ranked.get(entry.partition)
        if ranked is None:
            keys, ahead = [], [0]
            for key, tasks in sorted(self.pending[entry.partition]):
                keys.append(key)
                ahead.append(ahead[-1] + tasks)
            ranked = self._ranked[entry.partition] = (keys, ahead)
        keys, ahead = ranked
        return ahead[bisect_left(keys, -entry.priority)] + 1


def _epoch_s(at: dt.datetime | None) -> int | None:
    return int(at.timestamp()) if at else None


def _from_epoch_s(seconds: int | None) -> dt.datetime | None:
    return dt.datetime.fromtimestamp(seconds, dt.UTC) if seconds is not None else None


def queue_apply(*, cluster: Cluster, entries: Iterable[QueueEntry]) -> QueueSyncResult:
    """Apply one queue listing to the cluster's unfinished portal jobs."""
    now = timezone.now()
    plain: dict[int, QueueEntry] = {}
    arrays: dict[int, list[QueueEntry]] = defaultdict(list)
    places = _QueuePlaces()
    entry: QueueEntry | None
    for entry in entries:
        if entry.array_job_id is None:
            plain[entry.job_id] = entry
        else:
            arrays[entry.array_job_id].append(entry)
        if entry.state is SlurmJobState.PENDING:
            places.add(entry)

    # Times are read as whole epoch seconds (Slurm's own resolution): turning 10,000
    # timestamps into aware datetimes costs more than the query itself.
    unfinished = (
        Job.objects.filter(cluster=cluster, state__in=IN_SLURM, slurm_job_id__isnull=False)
        .order_by()
        .annotate(
            started_s=Cast(Extract("started_at", "epoch"), BigIntegerField()),
            expected_s=Cast(Extract("expected_start_at", "epoch"), BigIntegerField()),
            submitted_s=Cast(Extract("submitted_at", "epoch"), BigIntegerField()),
        )
        .values_list(
            "id", "slurm_job_id", "state", "slurm_state", "reason", "started_s", "array",
            "expected_s", "queue_place", "submitted_s",
        )
    )  # fmt: skip
    result = QueueSyncResult()
    updates: list[tuple] = []
    events: list[JobEvent] = []
    starts: dict[int, tuple[int | None, dt.datetime]] = {}  # job id → (submitted_s, started)
    for (
        job_id, slurm_job_id, state, slurm_state, reason, started_s, array, expected_s, place,
        submitted_s,
    ) in unfinished:  # fmt: skip
        assert slurm_job_id is not None  # filtered on
        entry = _array_view(arrays.get(slurm_job_id, [])) if array else plain.get(slurm_job_id)
        if entry is None:
            result.vanished.append(job_id)
            continue
        new_state = PORTAL_VALUE_OF[entry.state]
        if array and new_state in TERMINAL_VALUES:
            continue
        pending = new_state == JobState.PENDING
        new = (
            new_state,
            str(entry.state),
            _reason(entry),
            _epoch_s(entry.started_at) or started_s,
            _epoch_s(entry.expected_start_at) if pending else None,
            places.place(entry) if pending else None,
        )
        if new == (state, slurm_state, reason, started_s, expected_s, place):
            continue
        ended_at = now if new_state in TERMINAL_VALUES else None
        if started_s is None and entry.started_at is not None and not pending:
            starts[job_id] = (submitted_s, entry.started_at)
        updates.append(
            (job_id, state, *new[:3], entry.started_at or _from_epoch_s(started_s), ended_at,
             _from_epoch_s(new[4]), new[5])
        )  # fmt: skip
        if new_state != state:
            detail = f"Slurm: {entry.state}" + (f" ({new[2]})" if new[2] else "")
            # An event is dated when the portal saw the change (Slurm's own times are on
            # the job): the timeline then never runs backwards.
            events.append(JobEvent(job_id=job_id, at=now, state=new_state, detail=detail))
    with transaction.atomic():
        updated = _update_jobs(updates, now=now)
        JobEvent.objects.bulk_create(
            [event for event in events if event.job_id in updated], batch_size=2000
        )
        if not ClusterSync.objects.filter(cluster=cluster).update(queue_synced_at=now):
            ClusterSync.objects.get_or_create(cluster=cluster, defaults={"queue_synced_at": now})
    for job_id in updated & starts.keys():
        submitted_s, started_at = starts[job_id]
        start_observed(
            cluster=cluster.name, submitted_at=_from_epoch_s(submitted_s), started_at=started_at
        )
    result.changed = len(updated)
    return result


def _update_jobs(rows: list[tuple], *, now: dt.datetime) -> set[int]:
    """One UPDATE … FROM unnest(…) for every changed job; Django's bulk_update would
    build a CASE per column and row, which is slower by an order of magnitude.

    Each row carries the state the listing was compared with, and a job is changed only
    while it still has that state: accounting finishes jobs under its own lock, and a
    job it ended between the read and this UPDATE must not go back to running (and be
    finished a second time). PostgreSQL re-checks the condition on the row accounting
    committed, so a job locked meanwhile is skipped too. The ids changed are returned."""
    if not rows:
        return set()
    columns = [list(column) for column in zip(*rows, strict=True)]
    table = Job._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE {table} AS job SET
                state = change.state,
                slurm_state = change.slurm_state,
                reason = change.reason,
                started_at = change.started_at,
                ended_at = COALESCE(job.ended_at, change.ended_at),
                expected_start_at = change.expected_start_at,
                queue_place = change.queue_place,
                updated_at = %s
            FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::text[], %s::text[],
                        %s::timestamptz[], %s::timestamptz[], %s::timestamptz[], %s::int[])
                AS change(id, read_state, state, slurm_state, reason, started_at, ended_at,
                          expected_start_at, queue_place)
            WHERE job.id = change.id AND job.state = change.read_state
            RETURNING job.id
            """,  # noqa: S608 — the table name is ours, every value a parameter
            [now, *columns],
        )
        return {row[0] for row in cursor.fetchall()}


def queue_sync(*, cluster: Cluster, client: SlurmClient | None = None) -> QueueSyncResult:
    """Read the cluster's queue (one call) and apply it. When the cluster's status is due
    (``PORTAL_CLUSTER_STATUS_INTERVAL_S``) the nodes are read too (one more call) and the
    status is made from them and the same queue listing."""
    client = client or shared_client_for(cluster)
    status_due = cluster_status_due(cluster)
    entries = client.queue()
    result = queue_apply(cluster=cluster, entries=entries)
    if status_due:
        try:
            nodes = client.nodes()
        except SlurmError as error:
            # The queue was applied; the status keeps its last snapshot and says why.
            logger.warning("status of %s: %s", cluster.name, error)
            cluster_status_failed(cluster=cluster, error=str(error))
        else:
            cluster_status_record(cluster=cluster, nodes=nodes, queue=entries)
    return result
