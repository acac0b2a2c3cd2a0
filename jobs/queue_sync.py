"""What Slurm's queue says, applied to the portal every few seconds.

The queue sync reads one listing per cluster and writes only the jobs whose
state, Slurm state, reason or start time changed — one UPDATE for all of them
and one INSERT for their events, however many jobs there are. A job that left
the queue is not assumed to have finished: accounting (``jobs.accounting``) says
how it ended.
"""

import datetime as dt
import logging
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
from clusters.slurm.types import QueueEntry
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


def queue_apply(*, cluster: Cluster, entries: Iterable[QueueEntry]) -> QueueSyncResult:
    """Apply one queue listing to the cluster's unfinished portal jobs."""
    now = timezone.now()
    plain: dict[int, QueueEntry] = {}
    arrays: dict[int, list[QueueEntry]] = defaultdict(list)
    entry: QueueEntry | None
    for entry in entries:
        if entry.array_job_id is None:
            plain[entry.job_id] = entry
        else:
            arrays[entry.array_job_id].append(entry)

    # The start time is read as whole epoch seconds (Slurm's own resolution): turning
    # 10,000 timestamps into aware datetimes costs more than the query itself.
    unfinished = (
        Job.objects.filter(cluster=cluster, state__in=IN_SLURM, slurm_job_id__isnull=False)
        .order_by()
        .annotate(started_s=Cast(Extract("started_at", "epoch"), BigIntegerField()))
        .values_list("id", "slurm_job_id", "state", "slurm_state", "reason", "started_s", "array")
    )
    result = QueueSyncResult()
    updates: list[tuple] = []
    events: list[JobEvent] = []
    for job_id, slurm_job_id, state, slurm_state, reason, started_s, array in unfinished:
        assert slurm_job_id is not None  # filtered on
        entry = _array_view(arrays.get(slurm_job_id, [])) if array else plain.get(slurm_job_id)
        if entry is None:
            result.vanished.append(job_id)
            continue
        new_state = PORTAL_VALUE_OF[entry.state]
        if array and new_state in TERMINAL_VALUES:
            continue
        entry_s = int(entry.started_at.timestamp()) if entry.started_at else None
        new = (new_state, str(entry.state), _reason(entry), entry_s or started_s)
        if new == (state, slurm_state, reason, started_s):
            continue
        started_at = entry.started_at or (
            dt.datetime.fromtimestamp(started_s, dt.UTC) if started_s is not None else None
        )
        ended_at = now if new_state in TERMINAL_VALUES else None
        updates.append((job_id, state, *new[:3], started_at, ended_at))
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
                updated_at = %s
            FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::text[], %s::text[],
                        %s::timestamptz[], %s::timestamptz[])
                AS change(id, read_state, state, slurm_state, reason, started_at, ended_at)
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
