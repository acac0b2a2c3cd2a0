"""What Slurm's queue says, applied to the portal every few seconds.

The queue sync reads one listing per cluster, copies it to PostgreSQL and compares
it there with the stored jobs; it writes only the jobs whose state, Slurm state,
reason, start, expected start or queue place changed, with their events — the same
few statements however many jobs there are. A job that left the queue is not
assumed to have finished: accounting (``jobs.accounting``) says how it ended.
"""

import datetime as dt
import logging
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from django.db import connection, transaction
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


def _snapshot(entries: Iterable[QueueEntry]) -> list[tuple]:
    """The listing as the rows ``_differing`` copies to the database: one per plain job
    and one per array that has a task queued or running (its ``_array_view``), keyed by
    Slurm id and whether it is an array; what the portal would store of it (state, Slurm
    state, reason, start, and for a pending job its expected start and place)."""
    plain: dict[int, QueueEntry] = {}
    arrays: dict[int, list[QueueEntry]] = defaultdict(list)
    places = _QueuePlaces()
    pending_state = SlurmJobState.PENDING
    for entry in entries:
        if entry.array_job_id is None:
            plain[entry.job_id] = entry
        else:
            arrays[entry.array_job_id].append(entry)
        if entry.state is pending_state:
            places.add(entry)
    keyed = [(slurm_job_id, False, entry) for slurm_job_id, entry in plain.items()]
    for array_job_id, tasks in arrays.items():
        view = _array_view(tasks)
        if view is not None:
            keyed.append((array_job_id, True, view))
    rows: list[tuple] = []
    append, portal_value, pending_value = rows.append, PORTAL_VALUE_OF, str(JobState.PENDING)
    for slurm_job_id, array, entry in keyed:
        state = portal_value[entry.state]
        if state == pending_value:
            expected, place = entry.expected_start_at, places.place(entry)
        else:
            expected = place = None
        append(
            (slurm_job_id, array, state, entry.state.value, _reason(entry), entry.started_at,
             expected, place)
        )  # fmt: skip
    return rows


def queue_apply(*, cluster: Cluster, entries: Iterable[QueueEntry]) -> QueueSyncResult:
    """Apply one queue listing to the cluster's unfinished portal jobs. ``entries`` is read
    inside the transaction, after the listing's table is ready: a listing still being
    read (``SlurmClient.queue_stream``) is parsed as it comes, and if it fails part way
    nothing is applied."""
    now = timezone.now()
    result = QueueSyncResult()
    updates: list[tuple[int, str]] = []
    starts: dict[int, tuple[dt.datetime | None, dt.datetime]] = {}  # job id → (submitted, started)
    with transaction.atomic():
        with connection.cursor() as cursor:
            # Derived from Slurm and written again by the next sync if lost: a crash may
            # drop this commit, so it need not wait for the disk (the ledger's commits do).
            cursor.execute("SET LOCAL synchronous_commit = off")
            cursor.execute(_LISTING_TABLE)
            # Empty already, unless a listing was copied earlier in the same transaction.
            cursor.execute("DELETE FROM queue_listing")
        snapshot = _snapshot(entries)
        for job_id, listed, read_state, state, started_at, unstarted, submitted_at in _differing(
            cluster, snapshot
        ):
            if not listed:
                result.vanished.append(job_id)
                continue
            if unstarted and started_at is not None and state != JobState.PENDING:
                starts[job_id] = (submitted_at, started_at)
            updates.append((job_id, read_state))
        updated = _update_jobs(updates, now=now)
        if not ClusterSync.objects.filter(cluster=cluster).update(queue_synced_at=now):
            ClusterSync.objects.get_or_create(cluster=cluster, defaults={"queue_synced_at": now})
    for job_id in updated & starts.keys():
        submitted_at, started_at = starts[job_id]
        start_observed(cluster=cluster.name, submitted_at=submitted_at, started_at=started_at)
    result.changed = len(updated)
    return result


# The listing goes in by a binary COPY to a temporary table (the session's own, emptied
# at commit), and one statement compares it with the cluster's unfinished jobs: only the
# jobs that differ (with what they would become) and those no longer listed come back;
# the unchanged ones are neither sent to Python nor touched. Times are compared to the
# second, Slurm's own resolution. The listing's key makes a look-up in it an index probe
# whatever the planner believes of the cluster's rows (a cluster newer than the table's
# statistics is estimated at one job).
_LISTING_TABLE = """
CREATE TEMPORARY TABLE IF NOT EXISTS queue_listing (
    slurm_job_id bigint NOT NULL,
    is_array boolean NOT NULL,
    state text NOT NULL,
    slurm_state text NOT NULL,
    reason text NOT NULL,
    started_at timestamptz,
    expected_start_at timestamptz,
    queue_place integer,
    PRIMARY KEY (slurm_job_id, is_array)
) ON COMMIT DELETE ROWS
"""
_LISTING_TYPES = ["int8", "bool", "text", "text", "text", "timestamptz", "timestamptz", "int4"]
_DIFFERING_SQL = """
SELECT job.id, listed.slurm_job_id IS NOT NULL, job.state, listed.state,
       COALESCE(listed.started_at, job.started_at), job.started_at IS NULL, job.submitted_at
FROM {jobs} AS job
LEFT JOIN queue_listing AS listed
    ON listed.slurm_job_id = job.slurm_job_id AND listed.is_array = (job."array" <> '')
WHERE job.cluster_id = %(cluster)s AND job.state = ANY(%(in_slurm)s)
  AND job.slurm_job_id IS NOT NULL
  AND (listed.slurm_job_id IS NULL
       OR (job.state, job.slurm_state, job.reason, date_trunc('second', job.started_at),
           date_trunc('second', job.expected_start_at), job.queue_place)
          IS DISTINCT FROM
          (listed.state, listed.slurm_state, listed.reason,
           date_trunc('second', COALESCE(listed.started_at, job.started_at)),
           date_trunc('second', listed.expected_start_at), listed.queue_place))
"""


def _differing(cluster: Cluster, snapshot: list[tuple]) -> list[tuple]:
    """The cluster's unfinished jobs that the listing changes or no longer lists (see
    ``_DIFFERING_SQL``); inside the caller's transaction, its ``queue_listing`` made and
    empty (the listing lives until the commit)."""
    with connection.cursor() as cursor:
        with cursor.copy("COPY queue_listing FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(_LISTING_TYPES)
            for row in snapshot:
                copy.write_row(row)
        cursor.execute(
            _DIFFERING_SQL.format(jobs=Job._meta.db_table),  # the table name is ours
            {"cluster": cluster.pk, "in_slurm": [str(state) for state in IN_SLURM]},
        )
        return cursor.fetchall()


def _update_jobs(rows: list[tuple[int, str]], *, now: dt.datetime) -> set[int]:
    """Write the changed jobs (id, state compared with) as the listing, still in
    ``queue_listing``, has them, and an event for each whose state changed: one
    statement, however many jobs.

    Each row carries the state the listing was compared with, and a job is changed only
    while it still has that state: accounting finishes jobs under its own lock, and a
    job it ended between the read and this UPDATE must not go back to running (and be
    finished a second time). PostgreSQL re-checks the condition on the row accounting
    committed, so a job locked meanwhile is skipped too. The ids changed are returned."""
    if not rows:
        return set()
    ids, read_states = (list(column) for column in zip(*rows, strict=True))
    with connection.cursor() as cursor:
        cursor.execute(
            _UPDATE_SQL.format(jobs=Job._meta.db_table, events=JobEvent._meta.db_table),
            {
                "ids": ids, "read_states": read_states, "now": now,
                "terminal": sorted(TERMINAL_VALUES),
            },
        )  # fmt: skip
        return {row[0] for row in cursor.fetchall()}


_UPDATE_SQL = """
WITH written AS (
    UPDATE {jobs} AS job SET
        state = listed.state,
        slurm_state = listed.slurm_state,
        reason = listed.reason,
        started_at = COALESCE(listed.started_at, job.started_at),
        ended_at = COALESCE(job.ended_at,
                            CASE WHEN listed.state = ANY(%(terminal)s) THEN %(now)s END),
        expected_start_at = listed.expected_start_at,
        queue_place = listed.queue_place,
        updated_at = %(now)s
    FROM unnest(%(ids)s::bigint[], %(read_states)s::text[]) AS change(id, read_state),
         queue_listing AS listed
    WHERE job.id = change.id AND job.state = change.read_state
      AND listed.slurm_job_id = job.slurm_job_id AND listed.is_array = (job."array" <> '')
    RETURNING job.id, change.read_state, listed.state, listed.slurm_state, listed.reason
), events AS (
    -- An event is dated when the portal saw the change (Slurm's own times are on the
    -- job): the timeline then never runs backwards.
    INSERT INTO {events} (job_id, at, state, detail)
    SELECT id, %(now)s, state,
           'Slurm: ' || slurm_state || CASE WHEN reason <> '' THEN ' (' || reason || ')'
                                            ELSE '' END
    FROM written WHERE state <> read_state
)
SELECT id FROM written
"""


def queue_sync(*, cluster: Cluster, client: SlurmClient | None = None) -> QueueSyncResult:
    """Read the cluster's queue (one call) and apply it. When the cluster's status is due
    (``PORTAL_CLUSTER_STATUS_INTERVAL_S``) the nodes are read too (one more call) and the
    status is made from them and the same queue listing."""
    client = client or shared_client_for(cluster)
    entries: list[QueueEntry] = []  # the listing as read, kept only for a status due
    with client.queue_stream() as listing:
        # Slurm prepares the listing meanwhile.
        status_due = cluster_status_due(cluster)
        read = _kept(listing, entries) if status_due else listing
        result = queue_apply(cluster=cluster, entries=read)
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


def _kept(entries: Iterable[QueueEntry], into: list[QueueEntry]) -> Iterator[QueueEntry]:
    for entry in entries:
        into.append(entry)
        yield entry
