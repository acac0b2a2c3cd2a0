"""Time of one queue-sync cycle: a 10,000-job queue listing applied to 1,000,000 jobs.

In a database of its own (`portal_bench_sync` on 127.0.0.1:5432, dropped and
recreated at the start, dropped at the end; the dev data is never touched) it
inserts 1,000,000 jobs (INSERT … SELECT generate_series), all but 10,000 of
them finished; the 10,000 unfinished ones (half pending, half running) are in
Slurm. It builds a queue snapshot of those 10,000 jobs in exactly the text the
cli adapter reads from `squeue` (its SQUEUE_FORMAT, fields and records split by
its separators), in which 1,000 differ from the database: 500 pending jobs
started running, 500 pending jobs have a new reason. Then it measures, each
the median of several rounds (one of each kind per round, so a change in the
machine's load hits all alike), the changed jobs reset and vacuumed (as
autovacuum would) before each apply:

- parse: `parse_squeue(text)` alone;
- apply: `queue_apply(cluster, entries)` alone, with the queries it issues and
  the plans of its comparison of the listing with the unfinished jobs (the partial
  index job_unfinished) and of its UPDATE;
- cycle: parse and apply, one after the other;
- apply once more right after a cycle, when nothing has changed (what most
  syncs of a quiet queue cost);
- the whole `queue_sync` of the snapshot's text (a client whose listing is the text,
  read from a file), with the cluster's status not due and due (no nodes), its
  queries, and the peak memory (RSS) of one such sync in a fresh process.

On each dev cluster whose slurmctld is up (portal-dev on the host's Slurm, portal-next
on the other Debian release's, `bench/dev_clusters.py`) it also times a real `squeue` in
the adapter's format on whatever that cluster has queued, for reference only.

With `--live` it also queues as many held jobs on each of those clusters (as root, in
an account of its own, cancelled at the end), moves as many of the database's unfinished
jobs to a cluster row of that name with the live jobs' Slurm ids, and times, round after
round, the raw `squeue` listing of them (the issue's baseline, per Slurm version) beside
whole `queue_sync` runs through the cli adapter: a tenth of the jobs changed (half of
them a new state and event), with the status due and not, and nothing changed; with the
queries of one sync and the peak RSS of one sync in a fresh process. The dev clusters
hold up to 110,000 jobs (`MaxJobCount` in `dev/slurm/slurm.conf.in` and
`dev/slurm-next/`), room for `--queued 100000` (10 to 20 minutes of `sbatch` per cluster);
a queue that does not fit under a cluster's `MaxJobCount` (a cluster set up before it
was raised: `dev/stack stop && dev/stack start` applies it; a bench must not restart the
shared stack's slurmctld itself) is skipped, and `--listing-ms` then gives the raw
listing's time for the ratio. Every figure is printed against the issue's targets with
the load average at the start and at the end.

    .venv/bin/python bench/sync.py [--jobs 1000000] [--queued 10000] [--changed 1000] [--repeat 7]
                                   [--profile]  (cProfile of one whole sync)  [--live]
                                   [--listing-ms MS]

Needs only PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth).
"""

import argparse
import contextlib
import cProfile
import datetime as dt
import gc
import hashlib
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import own_database

BENCH_DATABASE = "portal_bench_sync"
own_database.use(BENCH_DATABASE)

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.utils import timezone  # noqa: E402

from accounts.services import membership_set, project_create, user_create  # noqa: E402
from bench.dev_clusters import DevCluster, dev_clusters  # noqa: E402
from clusters.locks import association_changes  # noqa: E402
from clusters.models import Cluster, ClusterStatus, Partition  # noqa: E402
from clusters.services import cluster_register  # noqa: E402
from clusters.slurm.parsing import (  # noqa: E402
    FIELD_SEPARATOR,
    RECORD_SEPARATOR,
    SQUEUE_FORMAT,
    parse_slurm_time,
    parse_squeue,
    parse_squeue_stream,
)
from clusters.slurm.protocol import SlurmClient  # noqa: E402
from clusters.slurm.types import QueueEntry  # noqa: E402
from jobs.models import Job, JobEvent  # noqa: E402
from jobs.queue_sync import QueueSyncResult, queue_apply, queue_sync  # noqa: E402
from jobs.states import IN_SLURM  # noqa: E402

TARGET_APPLY_S = 1.0
# The targets: the whole sync at most 1.5 times the raw listing at 10,000
# queued, twice at 100,000; one sync's peak memory at 100,000 at most 200 MB.
TARGET_RATIO_10K = 1.5
TARGET_RATIO_100K = 2.0
TARGET_PEAK_RSS_MB = 200
ACCOUNT, PARTITION, USER = "bench", "gpu", "bench"
# Every time in the snapshot is a whole second after this one (squeue prints seconds).
BASE = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
# Jobs are submitted in bursts (scripts, sweeps): five share a submit second.
BURST = 5

# Job g (0-based) has Slurm id g + 1 and submit token md5(g). The last `queued`
# jobs are unfinished: with k = g - (jobs - queued), even k pend (reason
# Priority), odd k run since BASE + 1 h + k // BURST; the rest ended in one of
# the terminal states. md5 gives unique tokens the snapshot can recompute.
FILL_SQL = (
    """
INSERT INTO jobs_job ("""
    + own_database.JOB_COLUMNS
    + """)
SELECT
    %(owner)s, %(project)s, %(cluster)s, %(partition)s, NULL,
    'train-' || g, 1, 1, 8, 32, 60,
    '/home/bench/runs', 'slurm-%%j.out', 'slurm-%%j.out', '{}'::jsonb, '', 1,
    'python train.py --epochs 10' || chr(10), %(rendered)s, md5(g::text)::uuid, '', 1,
    NULL, '', NULL,
    g + 1, u.state, u.slurm_state, u.reason, u.exit_code,
    1.000, 3600, u.used,
    t.submitted, t.submitted, u.started, u.ended, t.submitted
FROM generate_series(0, %(jobs)s - 1) AS g
CROSS JOIN LATERAL (SELECT g - (%(jobs)s - %(queued)s) AS k) AS q
CROSS JOIN LATERAL (
    SELECT
        q.k,
        -- Finished jobs are older than the queue: one a minute before BASE.
        CASE WHEN q.k >= 0 THEN %(base)s::timestamptz + make_interval(secs => q.k / %(burst)s)
             ELSE %(base)s::timestamptz - make_interval(mins => %(jobs)s - g) END AS submitted
) AS t
CROSS JOIN LATERAL (
    SELECT
        CASE WHEN t.k < 0 THEN (ARRAY['completed', 'completed', 'completed', 'completed',
                                      'completed', 'completed', 'failed', 'cancelled',
                                      'timeout', 'out_of_memory'])[g %% 10 + 1]
             WHEN t.k %% 2 = 0 THEN 'pending' ELSE 'running' END AS state,
        CASE WHEN t.k < 0 THEN (ARRAY['COMPLETED', 'COMPLETED', 'COMPLETED', 'COMPLETED',
                                      'COMPLETED', 'COMPLETED', 'FAILED', 'CANCELLED',
                                      'TIMEOUT', 'OUT_OF_MEMORY'])[g %% 10 + 1]
             WHEN t.k %% 2 = 0 THEN 'PENDING' ELSE 'RUNNING' END AS slurm_state,
        CASE WHEN t.k >= 0 AND t.k %% 2 = 0 THEN 'Priority' ELSE '' END AS reason,
        CASE WHEN t.k < 0 THEN (g %% 10 >= 6)::int END AS exit_code,
        CASE WHEN t.k < 0 THEN 600 END AS used,
        CASE WHEN t.k < 0 THEN t.submitted + interval '1 minute'
             WHEN t.k %% 2 = 1 THEN %(base)s::timestamptz + interval '1 hour'
                                    + make_interval(secs => t.k / %(burst)s) END AS started,
        CASE WHEN t.k < 0 THEN t.submitted + interval '11 minutes' END AS ended
) AS u
"""
)
RENDERED = (
    "#!/bin/bash\n#SBATCH --job-name=train\n#SBATCH --account=bench\n#SBATCH --partition=gpu\n"
    "#SBATCH --nodes=1\n#SBATCH --gpus-per-node=1\n#SBATCH --time=60\n"
    "#SBATCH --chdir=/home/bench/runs\n#SBATCH --output=slurm-%j.out\n"
    "python train.py --epochs 10\n"
)


def slurm_time(at: dt.datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S")


def snapshot(jobs: int, queued: int, changed: int) -> tuple[str, list[int]]:
    """squeue's text for the unfinished jobs as the cli adapter reads it, `changed` of them
    different from the database (half started, half with a new reason); and the Slurm
    ids of the changed ones."""
    first = jobs - queued
    step = queued // changed  # every step-th pending job changes
    records, differ = [], []
    for k in range(queued):
        g = first + k
        submitted = BASE + dt.timedelta(seconds=k // BURST)
        token = uuid.UUID(hashlib.md5(str(g).encode()).hexdigest())  # noqa: S324 - not security
        if k % 2:
            state, reason = "RUNNING", "None"
            start = slurm_time(BASE + dt.timedelta(hours=1, seconds=k // BURST))
        elif k % (2 * step) == 0:  # started since the last sync
            state, reason = "RUNNING", "None"
            start = slurm_time(BASE + dt.timedelta(hours=2, seconds=k // BURST))
            differ.append(g + 1)
        else:
            state, start = "PENDING", "N/A"
            reason = "Resources" if k % (2 * step) == 2 else "Priority"
            if reason == "Resources":
                differ.append(g + 1)
        fields = (
            str(g + 1), str(g + 1), "N/A", USER, ACCOUNT, PARTITION, state, reason,
            slurm_time(submitted), start, "1:00:00", str(10_000 + k % 500), "gres:gpu:1", "1",
            "" if state == "PENDING" else f"gpu{k % 64:02d}", f"portal:{token}", f"train-{g}",
        )  # fmt: skip
        records.append(FIELD_SEPARATOR.join(fields) + RECORD_SEPARATOR + "\n")
    return "".join(records), differ


def reset(cluster: Cluster, slurm_ids: list[int]) -> None:
    """Put the changed jobs back as they were before the snapshot and drop their events.

    Then VACUUM, as autovacuum would between syncs: without it every repeat on the same
    1,000 rows adds two dead versions of each, and the runs slow down one after another.
    """
    Job.objects.filter(cluster=cluster, slurm_job_id__in=slurm_ids).update(
        state=Job.State.PENDING, slurm_state="PENDING", reason="Priority", started_at=None
    )
    JobEvent.objects.filter(job__cluster=cluster, job__slurm_job_id__in=slurm_ids).delete()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM jobs_job, jobs_jobevent")


def timed(action: Callable[[], object], repeat: int, before: Callable[[], object]) -> list[float]:
    # As timeit does: the collector is off while a step runs, so a collection that
    # the previous step's garbage triggers is not billed to this one.
    times = []
    for _ in range(repeat):
        before()
        gc.collect()
        gc.disable()
        try:
            started = time.perf_counter()
            action()
            times.append(time.perf_counter() - started)
        finally:
            gc.enable()
    return times


def explain(sql: str) -> tuple[list[str], float]:
    """The plan of a statement Django ran, with its WAL, rolled back."""
    return own_database.explain(sql, options="ANALYZE, BUFFERS, WAL", rollback=True)


def explain_with_listing(
    entries: list[QueueEntry], sql: str, params: dict | None = None
) -> tuple[list[str], float]:
    """The plan of one of queue_apply's statements on the listing (``queue_listing``,
    copied first as it copies it), with its WAL; rolled back."""
    from jobs import queue_sync as module

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(module._LISTING_TABLE)
        cursor.execute("DELETE FROM queue_listing")
        with cursor.copy("COPY queue_listing FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(module._LISTING_TYPES)
            for row in module._snapshot(entries):
                copy.write_row(row)
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, WAL) {sql}", params)
        lines = [row[0] for row in cursor.fetchall()]
        transaction.set_rollback(True)
    execution = next(line for line in lines if line.startswith("Execution Time:"))
    return lines, float(execution.split()[2])


def explain_differing(cluster: Cluster, entries: list[QueueEntry]) -> tuple[list[str], float]:
    """The plan of queue_apply's comparison of the listing with the stored jobs
    (``jobs.queue_sync._DIFFERING_SQL``)."""
    from jobs import queue_sync as module

    sql = module._DIFFERING_SQL.format(jobs="jobs_job")
    params = {"cluster": cluster.pk, "in_slurm": [str(state) for state in IN_SLURM]}
    return explain_with_listing(entries, sql, params)


def captured_apply(cluster: Cluster, entries: list[QueueEntry]) -> tuple[QueueSyncResult, list]:
    with CaptureQueriesContext(connection) as captured:
        result = queue_apply(cluster=cluster, entries=entries)
    return result, captured.captured_queries


def profile(action: Callable[[], object], top: int = 15) -> str:
    profiler = cProfile.Profile()
    profiler.runcall(action)
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def real_squeue(target: DevCluster, repeat: int) -> dict[str, float]:
    """A dev cluster's own queue, read raw and through the cli adapter."""
    argv = ["squeue", "--noheader", "--all", "--states=all", "-o", SQUEUE_FORMAT]
    raw_s = statistics.median(timed(lambda: target.output(argv), repeat, lambda: None))
    adapter_s = statistics.median(timed(target.tools.queue, repeat, lambda: None))
    return {"jobs": len(target.tools.queue()), "raw_s": raw_s, "adapter_s": adapter_s}


LIVE_ACCOUNT = "benchqueue"


def dev_clusters_up() -> list[DevCluster]:
    """The dev clusters whose controller answers (a fault test may have stopped one)."""
    return [each for each in dev_clusters() if each.run(["sinfo", "--noheader"]).returncode == 0]


def _sbatch_held(target: DevCluster, count: int) -> list[int]:
    argv = ["sbatch", "--parsable", "--hold", f"--account={LIVE_ACCOUNT}",
            f"--partition={target.partition}", "--time=1", "--output=/dev/null", "--chdir=/tmp",
            "--wrap=true"]  # fmt: skip
    return [int(target.output(argv).split(";")[0]) for _ in range(count)]


def max_job_count(target: DevCluster) -> int:
    for line in target.output(["scontrol", "show", "config"]).splitlines():
        if line.startswith("MaxJobCount"):
            return int(line.split("=", 1)[1])
    return 10_000  # Slurm's default


def live_queue(
    target: DevCluster, cluster: Cluster, args: argparse.Namespace
) -> dict[str, float | str]:
    """Fill a dev cluster's queue with ``--queued`` held jobs (root, an account of their
    own), time the raw squeue listing, the adapter's queue() and whole queue syncs of
    them (``live_cycle``), then cancel them. A queue that does not fit under the
    cluster's MaxJobCount (a slurmctld restart is needed to raise it) is not filled."""
    room = max_job_count(target) - len(target.tools.queue()) - 100
    if args.queued > room:
        return {"skipped": f"MaxJobCount: room for {room:,} more jobs"}
    with association_changes(target.name):
        target.run(["sacctmgr", "-i", "add", "account", LIVE_ACCOUNT])
        target.run(["sacctmgr", "-i", "add", "user", "root", f"account={LIVE_ACCOUNT}"])
    started = time.perf_counter()
    try:
        # sbatch is mostly waiting for slurmctld: a few at a time fill the queue faster.
        with ThreadPoolExecutor(max_workers=8) as pool:
            counts = [args.queued // 8 + (i < args.queued % 8) for i in range(8)]
            slurm_ids = sorted(
                i for ids in pool.map(lambda n: _sbatch_held(target, n), counts) for i in ids
            )
        fill_s = time.perf_counter() - started
        return {**live_cycle(target, cluster, slurm_ids, args), "fill_s": fill_s}
    finally:
        cancel_live_jobs(target)


def cancel_live_jobs(target: DevCluster) -> None:
    """Cancel the bench's jobs on the cluster by id, 500 a command, 8 commands at once:
    ``scancel --account`` alone, or 5,000 ids a command one after another, slows to about
    ten jobs a second after a first burst at 100,000 queued (over an hour) with both cores
    idle; 8 commands of 500 cancelled 43,000 in about 40 s."""
    listed = target.run(["squeue", "--noheader", f"--account={LIVE_ACCOUNT}", "--format=%i"])
    ids = listed.stdout.split()
    chunks = [ids[start : start + 500] for start in range(0, len(ids), 500)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda chunk: target.run(["scancel", *chunk]), chunks))
    target.run(["scancel", f"--account={LIVE_ACCOUNT}"])  # any it did not list


def live_cycle(
    target: DevCluster, bench: Cluster, slurm_ids: list[int], args: argparse.Namespace
) -> dict[str, float | str]:
    """Whole queue syncs (``queue_sync``: the adapter's listing and parse, the apply, the
    events, the status when due) of the live queue, beside its raw listing.

    As many of the bench's unfinished jobs as the live queue holds move to a cluster row
    of their own and take the live jobs' Slurm ids; a first sync makes them agree with
    Slurm (held, pending). Before each measured sync, a tenth of them are put back as
    they were before a change: half as running (the sync writes them pending, with an
    event), half with another reason."""
    cluster = cluster_register(name=f"live-{target.name}")
    moved = list(
        Job.objects.filter(cluster=bench, state__in=IN_SLURM)
        .order_by("id")
        .values_list("id", "slurm_job_id")[: len(slurm_ids)]
    )
    job_ids = [job_id for job_id, _ in moved]
    move = (
        "UPDATE jobs_job SET cluster_id = %s, slurm_job_id = m.slurm"
        " FROM unnest(%s::bigint[], %s::bigint[]) AS m(id, slurm) WHERE jobs_job.id = m.id"
    )
    with connection.cursor() as cursor:
        cursor.execute(move, [cluster.pk, job_ids, slurm_ids])
    try:
        return _live_cycle(target, cluster, job_ids, args)
    finally:  # back as they were, for the next cluster
        with connection.cursor() as cursor:
            cursor.execute(move, [bench.pk, job_ids, [slurm_id for _, slurm_id in moved]])


def _live_cycle(
    target: DevCluster, cluster: Cluster, job_ids: list[int], args: argparse.Namespace
) -> dict[str, float | str]:
    client = target.tools
    queue_sync(cluster=cluster, client=client)  # agree with Slurm; the status is made
    every = len(job_ids) // (args.changed or 1)
    changed = job_ids[::every][: args.changed]
    flipped, new_reason = changed[::2], changed[1::2]

    def reset_live() -> None:
        Job.objects.filter(pk__in=flipped).update(
            state=Job.State.RUNNING, slurm_state="RUNNING", reason="", queue_place=None,
            expected_start_at=None,
        )  # fmt: skip
        Job.objects.filter(pk__in=new_reason).update(reason="Priority")
        JobEvent.objects.filter(job_id__in=flipped).delete()
        with connection.cursor() as cursor:
            cursor.execute("VACUUM jobs_job, jobs_jobevent")

    def status_fresh() -> None:
        ClusterStatus.objects.filter(cluster=cluster).update(taken_at=timezone.now())

    def status_due() -> None:
        ClusterStatus.objects.filter(cluster=cluster).update(taken_at=BASE)

    def sync() -> QueueSyncResult:
        return queue_sync(cluster=cluster, client=client)

    reset_live()
    status_fresh()
    with CaptureQueriesContext(connection) as captured:
        result = sync()
    assert result.changed == len(changed) and not result.vanished, result
    queries = len(captured.captured_queries)
    reset_live()
    status_due()
    with CaptureQueriesContext(connection) as captured:
        sync()
    status_queries = len(captured.captured_queries)
    raw_argv = ["squeue", "--noheader", "--all", "--states=all", "-o", SQUEUE_FORMAT]
    steps: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {
        "raw": (lambda: target.output(raw_argv), lambda: None),
        "adapter": (client.queue, lambda: None),
        "cycle": (sync, lambda: (reset_live(), status_fresh())),
        "cycle_status": (sync, lambda: (reset_live(), status_due())),
        "unchanged": (sync, status_fresh),
    }
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.repeat):
        for name, (action, before) in steps.items():
            times[name] += timed(action, 1, before)
    reset_live()
    status_fresh()
    return {
        "jobs": len(client.queue()),
        **{f"{name}_s": statistics.median(values) for name, values in times.items()},
        "queries": queries,
        "status_queries": status_queries,
        "peak_rss_mb": one_sync_peak_rss_mb(cluster.name, target.name),
    }


def one_sync_peak_rss_mb(cluster: str, target: str) -> float:
    """The peak memory (RSS) of a fresh process that makes one queue sync of the cluster:
    what a worker needs for it, Django and the portal loaded included."""
    output = subprocess.run(
        [sys.executable, __file__, "--one-sync", cluster, "--target", target],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return float(json.loads(output.splitlines()[-1])["peak_rss_mb"])


def one_sync(cluster_name: str, target: str) -> None:
    cluster = Cluster.objects.get(name=cluster_name)
    client: SlurmClient
    if target.startswith("file:"):
        client = SnapshotClient(Path(target[5:]))
    else:
        client = dev_clusters(target)[0].tools
    loaded = peak_rss_mb()
    queue_sync(cluster=cluster, client=client)
    print(json.dumps({"loaded_rss_mb": round(loaded, 1), "peak_rss_mb": round(peak_rss_mb(), 1)}))


def peak_rss_mb() -> float:
    """This process's peak RSS since its exec (VmHWM). Not getrusage's ru_maxrss: Linux
    keeps that across fork and exec, so a child would report its parent's peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


class SnapshotClient:
    """A client whose queue is a snapshot's text, as squeue would print it (for a queue
    larger than a dev cluster's MaxJobCount); it has no nodes."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def queue(self) -> list[QueueEntry]:
        return parse_squeue(self.path.read_text())

    @contextlib.contextmanager
    def queue_stream(self) -> Iterator[Iterator[QueueEntry]]:
        with self.path.open() as text:
            yield parse_squeue_stream(iter(lambda: text.read(1 << 16), ""))

    def nodes(self) -> list:
        return []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--queued", type=int, default=10_000)
    parser.add_argument("--changed", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--profile", action="store_true", help="print a profile of one apply")
    parser.add_argument(
        "--live",
        action="store_true",
        help="also queue --queued held jobs on each running dev cluster and time the real "
        "listing of them",
    )
    parser.add_argument(
        "--listing-ms",
        type=float,
        help="the raw squeue listing of --queued jobs, measured (or scaled) elsewhere, for a "
        "queue larger than the dev clusters' MaxJobCount: the ratio is then estimated as "
        "(listing + the snapshot's queue_sync) / listing",
    )
    parser.add_argument("--one-sync", metavar="CLUSTER", help=argparse.SUPPRESS)
    parser.add_argument("--target", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_sync:  # the child that one_sync_peak_rss_mb starts, in the bench's database
        one_sync(args.one_sync, args.target)
        return
    if not 0 < args.changed <= args.queued // 2 <= args.jobs // 2:
        parser.error("need 0 < changed <= queued / 2 <= jobs / 2")

    own_database.fresh(BENCH_DATABASE, lambda: run(args))


def fill(args: argparse.Namespace) -> tuple[Cluster, float]:
    cluster = cluster_register(name="bench")
    partition = Partition.objects.create(
        cluster=cluster, name=PARTITION, is_default=True, nodes=100, gpus_per_node=8
    )
    project = project_create(slug=ACCOUNT, name="Bench", slurm_account=ACCOUNT)
    owner = user_create(username=USER, password="bench-pass-1234", posix_username=USER)  # noqa: S106
    membership_set(project=project, user=owner, role="pi")
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            FILL_SQL,
            {
                "owner": owner.pk,
                "project": project.pk,
                "cluster": cluster.pk,
                "partition": partition.pk,
                "rendered": RENDERED,
                "jobs": args.jobs,
                "queued": args.queued,
                "base": BASE,
                "burst": BURST,
            },
        )
        cursor.execute("VACUUM ANALYZE")  # visibility map and statistics: no autovacuum mid-run
    return cluster, time.perf_counter() - started


def run(args: argparse.Namespace) -> None:
    start_load = os.getloadavg()
    started = time.perf_counter()
    call_command("migrate", verbosity=0)
    migrate_s = time.perf_counter() - started
    cluster, fill_s = fill(args)
    jobs_in_db = Job.objects.count()
    unfinished_in_db = Job.objects.filter(state__in=["pending", "running"]).count()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_total_relation_size('jobs_job'), pg_relation_size('job_unfinished')"
        )
        table_bytes, index_bytes = cursor.fetchone()

    text, differ = snapshot(args.jobs, args.queued, args.changed)
    entries = parse_squeue(text)
    assert len(entries) == args.queued and len(differ) == args.changed

    def reset_changed() -> None:
        reset(cluster, differ)

    # A first apply creates the cluster's sync row; the ones measured find it.
    reset_changed()
    queue_apply(cluster=cluster, entries=entries)
    # One apply to check the snapshot: exactly the changed jobs are written, nothing
    # vanishes; its queries, then those of an apply that finds nothing changed.
    reset_changed()
    result, queries = captured_apply(cluster, entries)
    assert result.changed == args.changed, result
    assert not result.vanished, len(result.vanished)
    events = JobEvent.objects.filter(job__cluster=cluster).count()
    unchanged, unchanged_queries = captured_apply(cluster, entries)
    assert unchanged.changed == 0, unchanged
    select_sql = next((q["sql"] for q in queries if q["sql"].startswith('SELECT "jobs_job"')), "")
    # The write of the changed jobs and their events (one statement, WITH written AS …).
    update_sql = next((q["sql"] for q in queries if "UPDATE jobs_job" in q["sql"]), "")
    # The whole sync (queue_sync) of the snapshot's text, as if squeue had printed it:
    # the portal's own cost of a cycle, status included when due.
    snapshot_file = Path(tempfile.mkdtemp()) / "squeue.txt"
    snapshot_file.write_text(text)
    snapshot_client = SnapshotClient(snapshot_file)

    def status_at(at: dt.datetime) -> Callable[[], object]:
        return lambda: ClusterStatus.objects.filter(cluster=cluster).update(taken_at=at)

    def sync_snapshot() -> QueueSyncResult:
        return queue_sync(cluster=cluster, client=snapshot_client)

    reset_changed()
    sync_snapshot()  # the status row is made
    reset_changed()
    status_at(timezone.now())()
    with CaptureQueriesContext(connection) as captured:
        sync_snapshot()
    sync_queries = len(captured.captured_queries)

    def parse_cold() -> None:
        parse_slurm_time.cache_clear()  # a worker's first sync, before the cache knows the times
        parse_squeue(text)

    # Round after round, each kind once, so a change in the machine's load hits all alike.
    steps: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {
        "parse": (lambda: parse_squeue(text), lambda: None),
        "parse_cold": (parse_cold, lambda: None),
        "apply": (lambda: queue_apply(cluster=cluster, entries=entries), reset_changed),
        "cycle": (lambda: queue_apply(cluster=cluster, entries=parse_squeue(text)), reset_changed),
        # Right after a cycle nothing has changed: what most syncs of a quiet queue cost.
        "unchanged": (lambda: queue_apply(cluster=cluster, entries=entries), lambda: None),
        "sync": (sync_snapshot, lambda: (reset_changed(), status_at(timezone.now())())),
        "sync_status": (sync_snapshot, lambda: (reset_changed(), status_at(BASE)())),
    }
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.repeat):
        for name, (action, before) in steps.items():
            times[name] += timed(action, 1, before)
    medians = {name: statistics.median(values) for name, values in times.items()}
    parse_s, parse_cold_s = medians["parse"], medians["parse_cold"]
    apply_s, cycle_s, unchanged_s = medians["apply"], medians["cycle"], medians["unchanged"]
    sync_s, sync_status_s = medians["sync"], medians["sync_status"]
    reset_changed()
    plan, plan_ms = explain(select_sql) if select_sql else explain_differing(cluster, entries)
    update_plan, update_ms = explain_with_listing(entries, update_sql) if update_sql else ([], 0.0)
    profiled = ""
    if args.profile:
        status_at(BASE)()
        profiled = profile(sync_snapshot, top=30)
        reset_changed()
    status_at(BASE)()
    snapshot_rss = json.loads(
        subprocess.run(
            [sys.executable, __file__, "--one-sync", cluster.name,
             "--target", f"file:{snapshot_file}"],
            capture_output=True, text=True, check=True,
        ).stdout.splitlines()[-1]
    )  # fmt: skip
    reset_changed()
    targets = dev_clusters_up()
    references = {target.name: real_squeue(target, args.repeat) for target in targets}
    lives = (
        {target.name: live_queue(target, cluster, args) for target in targets} if args.live else {}
    )
    versions = {target.name: target.version() for target in targets}
    ratio = cycle_s / parse_s

    load = os.getloadavg()
    rows = [
        ("load average (1, 5 min) at the start", f"{start_load[0]:.2f}, {start_load[1]:.2f}"),
        ("load average (1, 5 min) at the end", f"{load[0]:.2f}, {load[1]:.2f}"),
        ("migrate", f"{migrate_s:.2f} s"),
        ("fill (INSERT … SELECT, VACUUM ANALYZE)", f"{fill_s:.2f} s"),
        ("jobs in the database", f"{jobs_in_db:,}"),
        ("  of them unfinished (pending/running)", f"{unfinished_in_db:,}"),
        ("jobs table with indexes", f"{table_bytes / 2**20:,.0f} MiB"),
        ("partial index job_unfinished", f"{index_bytes / 2**10:,.0f} KiB"),
        ("queue snapshot: jobs", f"{len(entries):,}"),
        ("queue snapshot: size", f"{len(text.encode()) / 2**10:,.0f} KiB"),
        ("queue snapshot: changed", f"{len(differ):,}"),
        ("jobs written by apply / events", f"{result.changed:,} / {events:,}"),
        (f"SQL queries of one apply, {len(differ):,} changed", f"{len(queries)}"),
        ("SQL queries of one apply, none changed", f"{len(unchanged_queries)}"),
        (f"parse, median of {args.repeat}", f"{parse_s * 1000:.1f} ms"),
        ("parse, time cache cleared", f"{parse_cold_s * 1000:.1f} ms"),
        (f"apply, median of {args.repeat}", f"{apply_s * 1000:.1f} ms"),
        (
            f"  apply target (< {TARGET_APPLY_S:g} s)",
            "met" if apply_s < TARGET_APPLY_S else "MISSED",
        ),
        ("  unfinished jobs read and compared (plan execution)", f"{plan_ms:.1f} ms"),
        ("  jobs UPDATE (plan execution)", f"{update_ms:.1f} ms"),
        ("apply, nothing changed", f"{unchanged_s * 1000:.1f} ms"),
        (f"cycle (parse + apply), median of {args.repeat}", f"{cycle_s * 1000:.1f} ms"),
        ("cycle / parse ratio", f"{ratio:.2f}"),
        (
            "whole sync of the snapshot's text (queue_sync), status not due",
            f"{sync_s * 1000:.1f} ms",
        ),
        ("  the same, status due (nodes: none)", f"{sync_status_s * 1000:.1f} ms"),
        ("  SQL queries of one sync, status not due", f"{sync_queries}"),
        (
            f"  peak RSS of one sync, a fresh process (target <= {TARGET_PEAK_RSS_MB} MB at 100k)",
            f"{snapshot_rss['peak_rss_mb']:.0f} MB "
            + ("PASS" if snapshot_rss["peak_rss_mb"] <= TARGET_PEAK_RSS_MB else "over"),
        ),
        ("    of it Django and the portal loaded", f"{snapshot_rss['loaded_rss_mb']:.0f} MB"),
    ]
    for name, reference in references.items():
        rows += [
            (f"{name}'s own queue ({reference['jobs']:.0f} jobs), reference only", ""),
            ("  raw squeue", f"{reference['raw_s'] * 1000:.1f} ms"),
            ("  cli adapter queue() (squeue + parse)", f"{reference['adapter_s'] * 1000:.1f} ms"),
        ]
    if not references:
        rows.append(("the dev clusters' own queues", "slurmctld down"))
    target_ratio = TARGET_RATIO_10K if args.queued <= 10_000 else TARGET_RATIO_100K
    estimated_ratio = None
    if args.listing_ms:
        listing_s = args.listing_ms / 1000
        estimated_ratio = (listing_s + sync_s) / listing_s
        rows += [
            (f"raw listing of {args.queued:,} given (--listing-ms)", f"{args.listing_ms:.0f} ms"),
            (
                f"  estimated (listing + queue_sync) / listing (target <= {target_ratio:g})",
                f"{estimated_ratio:.2f} " + ("PASS" if estimated_ratio <= target_ratio else "over"),
            ),
            (
                "  the same, status due",
                f"{(listing_s + sync_status_s) / listing_s:.2f}",
            ),
        ]
    for name, live in lives.items():
        if "skipped" in live:
            rows.append((f"live queue of {args.queued:,} on {name}", str(live["skipped"])))
            continue
        # The baseline: the raw queue listing of as many jobs; the cycle is a
        # whole queue_sync of them (adapter listing and parse, apply, events, status).
        rows += [
            (f"live queue: {live['jobs']:.0f} held jobs on {name} ({versions[name]})", ""),
            ("  filled in", f"{live['fill_s']:.1f} s"),
            ("  raw squeue listing (the baseline)", f"{live['raw_s'] * 1000:.1f} ms"),
            ("  cli adapter queue() (squeue + parse)", f"{live['adapter_s'] * 1000:.1f} ms"),
            (f"  queue_sync, {args.changed:,} changed", f"{live['cycle_s'] * 1000:.1f} ms"),
            (
                f"  queue_sync / raw listing (target <= {target_ratio:g})",
                f"{live['cycle_s'] / live['raw_s']:.2f} "
                + ("PASS" if live["cycle_s"] / live["raw_s"] <= target_ratio else "over"),
            ),
            ("  queue_sync with the status due", f"{live['cycle_status_s'] * 1000:.1f} ms"),
            ("    / raw listing", f"{live['cycle_status_s'] / live['raw_s']:.2f}"),
            ("  queue_sync, nothing changed", f"{live['unchanged_s'] * 1000:.1f} ms"),
            ("    / raw listing", f"{live['unchanged_s'] / live['raw_s']:.2f}"),
            (
                "  SQL queries of one sync (status not due / due)",
                f"{live['queries']} / {live['status_queries']}",
            ),
            ("  peak RSS of one sync, a fresh process", f"{live['peak_rss_mb']:.0f} MB"),
        ]
    width = max(len(label) for label, _ in rows) + 2
    for label, value in rows:
        print(f"{label:<{width}}{value:>16}")
    print()
    print(f"the SQL of one apply with {len(differ):,} changed (ms, statement):")
    for query in queries:
        sql = " ".join(query["sql"].split())
        print(f"  {float(query['time']) * 1000:7.1f}  {sql[:110]}{'…' if len(sql) > 110 else ''}")
    print()
    print("the unfinished jobs, as apply reads (and compares) them:")
    print("\n".join(f"  {line}" for line in plan))
    print()
    print("the changed jobs, as apply writes them (rolled back):")
    print("\n".join(f"  {line}" for line in update_plan))
    if args.profile:
        print()
        print(profiled)
    figures: dict[str, float | int] = {
        "jobs_in_db": jobs_in_db,
        "queue_entries": len(entries),
        "changed": len(differ),
        "parse_s": round(parse_s, 4),
        "parse_cold_s": round(parse_cold_s, 4),
        "apply_s": round(apply_s, 4),
        "apply_unchanged_s": round(unchanged_s, 4),
        "sync_cycle_s": round(cycle_s, 4),
        "sync_vs_parse_ratio": round(ratio, 2),
        "apply_queries": len(queries),
        "apply_unchanged_queries": len(unchanged_queries),
        "unfinished_read_plan_ms": round(plan_ms, 1),
        "update_plan_ms": round(update_ms, 1),
        "snapshot_sync_s": round(sync_s, 4),
        "snapshot_sync_status_s": round(sync_status_s, 4),
        "sync_queries": sync_queries,
        "snapshot_sync_peak_rss_mb": snapshot_rss["peak_rss_mb"],
        "loaded_rss_mb": snapshot_rss["loaded_rss_mb"],
        "apply_target_s": TARGET_APPLY_S,
        "ratio_target": target_ratio,
        "peak_rss_target_mb": TARGET_PEAK_RSS_MB,
        "estimated_sync_vs_listing_ratio": round(estimated_ratio, 2) if estimated_ratio else 0,
        "load_average_1min_start": round(start_load[0], 2),
        "load_average_1min_end": round(load[0], 2),
    }
    for name, reference in references.items():
        key = name.replace("-", "_")
        figures[f"{key}_squeue_jobs"] = int(reference["jobs"])
        figures[f"{key}_squeue_raw_s"] = round(reference["raw_s"], 4)
        figures[f"{key}_squeue_adapter_s"] = round(reference["adapter_s"], 4)
    for name, live in lives.items():
        if "skipped" in live:
            continue
        key = name.replace("-", "_")
        figures[f"{key}_live_queue_jobs"] = int(live["jobs"])
        figures[f"{key}_live_squeue_raw_s"] = round(live["raw_s"], 4)
        figures[f"{key}_live_adapter_queue_s"] = round(live["adapter_s"], 4)
        figures[f"{key}_live_sync_cycle_s"] = round(live["cycle_s"], 4)
        figures[f"{key}_live_sync_status_s"] = round(live["cycle_status_s"], 4)
        figures[f"{key}_live_sync_unchanged_s"] = round(live["unchanged_s"], 4)
        figures[f"{key}_sync_vs_listing_ratio"] = round(live["cycle_s"] / live["raw_s"], 2)
        figures[f"{key}_sync_status_vs_listing_ratio"] = round(
            live["cycle_status_s"] / live["raw_s"], 2
        )
        figures[f"{key}_sync_queries"] = int(live["queries"])
        figures[f"{key}_sync_peak_rss_mb"] = live["peak_rss_mb"]
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
