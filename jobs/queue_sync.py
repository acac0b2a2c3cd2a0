"""What Slurm's queue says, applied to the portal every few seconds.

The queue sync reads one listing per cluster, copies it to PostgreSQL and compares
it there with the stored jobs; it writes only the jobs whose state, Slurm state,
reason, start, expected start or queue place changed, with their events — the same
few statements however many jobs there are. A job that left the queue is not
assumed to have finished: accounting (``jobs.accounting``) says how it ended.

What users write (names, comments) is data to the listing, never structure
(``clusters.slurm.parsing``); still, a record the parser could not read, and every
record of a job id listed twice, is set aside and reported (``RefusedRecord``), and a
portal job with such an id is left as it is: neither updated from either record nor
taken for gone. The rest of the listing is applied.

The same comparison finds the jobs whose owner made them dearer in Slurm (``scontrol
update`` of a pending job's partition, GPUs or time limit); their holds are raised after
the sync's transaction, one small transaction each (``jobs.hold_follow``).
"""

import datetime as dt
import logging
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from django.db import connection, transaction
from django.utils import timezone

from clusters.models import Cluster, Partition, RefusedRecord
from clusters.selectors import cluster_status_due
from clusters.services import (
    cluster_status_failed,
    cluster_status_record,
    refused_records_report,
)
from clusters.slurm import SlurmClient, SlurmError, shared_client_for
from clusters.slurm.states import SlurmJobState
from clusters.slurm.types import QueueEntry, Refused, queue_checked
from clusters.status import array_task_count
from jobs.hold_follow import ListedRequest, job_hold_follow
from jobs.metrics import start_observed
from jobs.models import ClusterSync, Job, JobEvent
from jobs.states import IN_SLURM, PORTAL_VALUE_OF, TERMINAL_VALUES, JobState

logger = logging.getLogger(__name__)

_ARRAY_ORDER = (JobState.RUNNING, JobState.PENDING, JobState.SUSPENDED)


@dataclass
class QueueSyncResult:
    changed: int = 0
    vanished: list[int] = field(default_factory=list)  # portal job ids no longer queued
    # The records set aside (unreadable, or a job id listed twice), as reported.
    refused: list[Refused] = field(default_factory=list)
    holds_raised: list[int] = field(default_factory=list)  # portal job ids that grew


class _Reasons(dict[str, str]):
    """A pending reason as the portal stores it, by Slurm's: each one a listing repeats
    (most say "Priority", "Resources" or "None") is worked out once."""

    def __missing__(self, reason: str) -> str:
        self[reason] = stored = "" if reason in ("None", "") else reason[:200]
        return stored


# Each Slurm state's portal state and its own name (an Enum's value is a property: a
# look-up here costs less, once per listed job).
_STATE_VALUES = {state: (PORTAL_VALUE_OF[state], state.value) for state in SlurmJobState}


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
        self.pending[entry.partition].append(self._key(entry))

    def discard(self, entry: QueueEntry) -> None:
        """Not count ``entry`` after all (a record refused once the listing was read)."""
        counted = self.pending[entry.partition]
        if self._key(entry) in counted:
            counted.remove(self._key(entry))

    @staticmethod
    def _key(entry: QueueEntry) -> tuple[int, int]:
        tasks = array_task_count(entry.array_task) if entry.array_task else 1
        return -entry.priority, tasks

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


class _PartitionIds(dict[str, int | None]):
    """The id of the portal's partition a listing names, for the listing's rows (an int
    is what the comparison needs, and the cheapest thing to copy): None for a name the
    portal does not know. A pending job may name several (``gpu,debug``, after its owner's
    ``scontrol update partition=gpu,debug``: it starts in the first that can run it) and
    is priced at the dearest; each listed name is resolved once."""

    def __init__(self, cluster: Cluster) -> None:
        partitions = Partition.objects.filter(cluster=cluster).values_list(
            "name", "id", "billing_weight", "cpu_hour_rate"
        )
        self._dearness = {name: (weight, rate, pk) for name, pk, weight, rate in partitions}
        super().__init__((name, pk) for name, (_, _, pk) in self._dearness.items())

    def __missing__(self, listed: str) -> int | None:
        known = [self._dearness[name] for name in listed.split(",") if name in self._dearness]
        self[listed] = pk = max(known)[2] if known else None
        return pk


@dataclass
class _Snapshot:
    """The listing as ``_differing`` copies it (``rows``), the records of job ids it lists
    twice (``repeated``, refused) and the Slurm ids of the portal jobs those concern."""

    rows: list[tuple]
    repeated: list[Refused]
    repeated_ids: set[int]


def _snapshot(entries: Iterable[QueueEntry], partition_ids: _PartitionIds) -> _Snapshot:
    """The listing as the rows ``_differing`` copies to the database: one per plain job
    and one per array that has a task queued or running (its ``_array_view``), keyed by
    Slurm id and whether it is an array; what the portal would store of it (state, Slurm
    state, reason, start, and for a pending job its expected start and place), and what
    it asks for now (partition, GPUs, time limit: for an array, its pending tasks', which
    their owner may still change).

    A job id listed twice is believed in neither record (``queue_checked``): a stream
    cannot take back what it gave, so the repeats are found here, where each record
    is kept by its id anyway, and taken out before the rows are made."""
    plain: dict[int, QueueEntry] = {}
    tasks_by_id: dict[int, QueueEntry] = {}
    arrays: dict[int, list[QueueEntry]] = defaultdict(list)
    extra: list[QueueEntry] = []  # a second (third…) record of an id already listed
    places = _QueuePlaces()
    pending_state = SlurmJobState.PENDING
    keep_plain, keep_task = plain.setdefault, tasks_by_id.setdefault
    for entry in entries:
        if entry.array_job_id is None:
            if keep_plain(entry.job_id, entry) is not entry:
                extra.append(entry)
        else:
            arrays[entry.array_job_id].append(entry)
            if keep_task(entry.job_id, entry) is not entry:
                extra.append(entry)
        if entry.state is pending_state:
            places.add(entry)
    # An array task's id listed as a plain job too: a repeat as well.
    crossed = [job_id for job_id in tasks_by_id if job_id in plain]
    repeated: list[Refused] = []
    repeated_ids: set[int] = set()
    if extra or crossed:
        repeated, repeated_ids = _repeats_taken_out(
            extra, crossed, plain=plain, tasks_by_id=tasks_by_id, arrays=arrays, places=places
        )
    rows: list[tuple] = []
    append, values, reasons = rows.append, _STATE_VALUES, _Reasons()
    pending_value = str(JobState.PENDING)

    def row(slurm_job_id: int, array: bool, entry: QueueEntry, asked: QueueEntry) -> tuple:
        state, slurm_state = values[entry.state]
        if state == pending_value:
            expected, place = entry.expected_start_at, places.place(entry)
        else:
            expected = place = None
        return (
            slurm_job_id, array, state, slurm_state, reasons[entry.reason], entry.started_at,
            expected, place, partition_ids[asked.partition],
            asked.gpus if asked.gpus_known else None, asked.time_limit_minutes,
        )  # fmt: skip

    # The plain jobs are most of a queue: their rows are made here rather than by row(),
    # a call less for each.
    for slurm_job_id, entry in plain.items():
        state, slurm_state = values[entry.state]
        if state == pending_value:
            expected, place = entry.expected_start_at, places.place(entry)
        else:
            expected = place = None
        append(
            (slurm_job_id, False, state, slurm_state, reasons[entry.reason], entry.started_at,
             expected, place, partition_ids[entry.partition],
             entry.gpus if entry.gpus_known else None, entry.time_limit_minutes)
        )  # fmt: skip
    for array_job_id, tasks in arrays.items():
        view = _array_view(tasks)
        if view is not None:
            asked = next((task for task in tasks if task.state is pending_state), view)
            append(row(array_job_id, True, view, asked))
    return _Snapshot(rows, repeated, repeated_ids)


def _repeats_taken_out(
    extra: list[QueueEntry],
    crossed: list[int],
    *,
    plain: dict[int, QueueEntry],
    tasks_by_id: dict[int, QueueEntry],
    arrays: dict[int, list[QueueEntry]],
    places: _QueuePlaces,
) -> tuple[list[Refused], set[int]]:
    """Take every record of a repeated job id out of the listing (``_snapshot``'s
    collections, changed in place): the refusals, and the Slurm ids of the jobs they
    concern (the repeated ids, and the arrays of repeated tasks)."""
    ids = {entry.job_id for entry in extra} | set(crossed)
    same = [
        *(plain.pop(job_id) for job_id in ids if job_id in plain),
        *(tasks_by_id[job_id] for job_id in ids if job_id in tasks_by_id),
        *extra,
    ]
    for entry in same:
        if entry.array_job_id is not None:
            tasks = arrays[entry.array_job_id]
            if entry in tasks:
                tasks.remove(entry)
        if entry.state is SlurmJobState.PENDING:
            places.discard(entry)
    refused = queue_checked(same).refused  # none of them is kept: each shares its id
    concerned = ids | {entry.array_job_id for entry in same if entry.array_job_id is not None}
    return refused, concerned


def queue_apply(
    *, cluster: Cluster, entries: Iterable[QueueEntry], refused: Sequence[Refused] = ()
) -> QueueSyncResult:
    """Apply one queue listing to the cluster's unfinished portal jobs. ``entries`` is read
    inside the transaction, after the listing's table is ready: a listing still being
    read (``SlurmClient.queue_stream``) is parsed as it comes, and if it fails part way
    nothing is applied. ``refused``, the records its parser set aside, is read once
    ``entries`` has been (a stream's ``refused`` fills as it is read); they are reported
    with the records of job ids listed twice, after the transaction, and the portal jobs
    with those ids are left as they are. Then the holds of the jobs that grew in Slurm
    are raised (``jobs.hold_follow``)."""
    now = timezone.now()
    result = QueueSyncResult()
    updates: list[tuple[int, str]] = []
    starts: dict[int, tuple[dt.datetime | None, dt.datetime]] = {}  # job id → (submitted, started)
    grown: dict[int, ListedRequest] = {}
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(_SYNC_SETTINGS)
            cursor.execute(_LISTING_TABLE)
            # Empty already, unless a listing was copied earlier in the same transaction.
            cursor.execute("DELETE FROM queue_listing")
        snapshot = _snapshot(entries, _PartitionIds(cluster))
        result.refused = [*refused, *snapshot.repeated]
        untouched = snapshot.repeated_ids | {r.job_id for r in refused if r.job_id is not None}
        for (
            job_id, listed, read_state, state, started_at, unstarted, submitted_at, changed,
            grew, partition_id, gpus, time_limit,
        ) in _differing(cluster, snapshot.rows, untouched=untouched):  # fmt: skip
            if not listed:
                result.vanished.append(job_id)
                continue
            if grew:
                grown[job_id] = ListedRequest(partition_id, gpus, time_limit)
            if not changed:
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
    refused_records_report(
        cluster=cluster, listing=RefusedRecord.Listing.QUEUE, refused=result.refused
    )
    for job_id, listed_request in grown.items():
        if job_hold_follow(job_id=job_id, listed=listed_request) is not None:
            result.holds_raised.append(job_id)
    return result


# For the sync's transaction only. What it writes is derived from Slurm and written again
# by the next sync if lost: a crash may drop its commit, so the commit need not wait for
# the disk (the ledger's commits do). Its comparison of a large queue is one hash join of
# the listing: kept in memory (the default 4 MB spills it to disk in two batches at
# 100,000 queued; it takes 10 MB) and not compiled first (the planner's cost of 100,000
# jobs crosses jit_above_cost, and compiling takes 35 ms, more than it saves).
_SYNC_SETTINGS = """
SELECT set_config('synchronous_commit', 'off', true), set_config('jit', 'off', true),
       set_config('work_mem', '32MB', true)
"""

# The listing goes in by a binary COPY to a temporary table (the session's own, emptied
# at commit), and one statement compares it with the cluster's unfinished jobs: only the
# jobs that differ (with what they would become), those that grew (their listed request
# costs more than they requested) and those no longer listed come back; the unchanged
# ones are neither sent to Python nor touched. Times are compared to the second, Slurm's
# own resolution. The listing's key makes a look-up in it an index probe whatever the
# planner believes of the cluster's rows (a cluster newer than the table's statistics is
# estimated at one job).
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
    partition_id integer,
    gpus integer,
    time_limit_minutes integer,
    PRIMARY KEY (slurm_job_id, is_array)
) ON COMMIT DELETE ROWS
"""
_LISTING_TYPES = [
    "int8", "bool", "text", "text", "text", "timestamptz", "timestamptz", "int4",
    "int4", "int4", "int4",
]  # fmt: skip
# What a listed request costs, as ``jobs.hold_follow.listed_price`` prices it (that one
# decides: this only finds the jobs to ask it about).
_LISTED_PRICE_SQL = """
SELECT ceil(asked.gpus * asked.seconds * GREATEST(job.billing_weight, moved.billing_weight)
            + asked.cpus * asked.seconds * GREATEST(job.cpu_hour_rate, moved.cpu_hour_rate))
FROM (SELECT gpus, seconds,
             CASE WHEN job.cpus_per_gpu > 0 AND gpus > 0 THEN gpus * job.cpus_per_gpu
                  ELSE job.nodes END AS cpus
      FROM (SELECT COALESCE(listed.gpus, job.nodes * job.gpus_per_node)::numeric AS gpus,
                   COALESCE(listed.time_limit_minutes, job.time_limit_minutes)::numeric
                   * 60 * job.array_tasks AS seconds) AS listed_request) AS asked
LEFT JOIN {partitions} AS moved ON moved.id = listed.partition_id
"""
# A job may have grown only if it lists more GPUs, a longer limit or another partition
# than it asked for (integer comparisons, made for every listed job); only then is its
# listed request priced and compared with what it requested. A job whose hold was raised
# requests the new price, so the same listing finds it no more.
_DIFFERING_SQL = """
SELECT * FROM (
    SELECT job.id, listed.slurm_job_id IS NOT NULL AS is_listed, job.state, listed.state,
           COALESCE(listed.started_at, job.started_at), job.started_at IS NULL,
           job.submitted_at,
           (job.state, job.slurm_state, job.reason, date_trunc('second', job.started_at),
            date_trunc('second', job.expected_start_at), job.queue_place)
           IS DISTINCT FROM
           (listed.state, listed.slurm_state, listed.reason,
            date_trunc('second', COALESCE(listed.started_at, job.started_at)),
            date_trunc('second', listed.expected_start_at), listed.queue_place) AS changed,
           CASE WHEN listed.gpus > job.nodes * job.gpus_per_node
                     OR listed.time_limit_minutes > job.time_limit_minutes
                     OR listed.partition_id <> job.partition_id
                THEN job.requested_gpu_seconds < ({listed_price})
                ELSE false END AS grown,
           listed.partition_id, listed.gpus, listed.time_limit_minutes
    FROM {jobs} AS job
    LEFT JOIN queue_listing AS listed
        ON listed.slurm_job_id = job.slurm_job_id AND listed.is_array = (job."array" <> '')
    WHERE job.cluster_id = %(cluster)s AND job.state = ANY(%(in_slurm)s)
      AND job.slurm_job_id IS NOT NULL AND job.slurm_job_id <> ALL(%(untouched)s::bigint[])
) AS compared
WHERE NOT is_listed OR changed OR grown
"""


def _differing_statement() -> str:
    """``_DIFFERING_SQL`` with the names of its tables (ours)."""
    return _DIFFERING_SQL.format(
        jobs=Job._meta.db_table,
        listed_price=_LISTED_PRICE_SQL.format(partitions=Partition._meta.db_table),
    )


def _differing(cluster: Cluster, rows: list[tuple], *, untouched: set[int]) -> list[tuple]:
    """The cluster's unfinished jobs that the listing changes, makes dearer or no longer
    lists (see ``_DIFFERING_SQL``), but none whose Slurm id is in ``untouched`` (its
    records were refused); inside the caller's transaction, its ``queue_listing`` made and
    empty (the listing lives until the commit)."""
    with connection.cursor() as cursor:
        with cursor.copy("COPY queue_listing FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(_LISTING_TYPES)
            for row in rows:
                copy.write_row(row)
        cursor.execute(
            _differing_statement(),
            {
                "cluster": cluster.pk,
                "in_slurm": [str(state) for state in IN_SLURM],
                "untouched": sorted(untouched),
            },
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
        result = queue_apply(cluster=cluster, entries=read, refused=listing.refused)
    if status_due:
        try:
            nodes = client.nodes()
        except SlurmError as error:
            # The queue was applied; the status keeps its last snapshot and says why.
            logger.warning("status of %s: %s", cluster.name, error)
            cluster_status_failed(cluster=cluster, error=str(error))
        else:
            if result.refused:
                # A job id listed twice counts in the status no more than in the jobs.
                refused = {record.job_id for record in result.refused}
                entries = [entry for entry in entries if entry.job_id not in refused]
            cluster_status_record(cluster=cluster, nodes=nodes, queue=entries)
    return result


def _kept(entries: Iterable[QueueEntry], into: list[QueueEntry]) -> Iterator[QueueEntry]:
    for entry in entries:
        into.append(entry)
        yield entry
