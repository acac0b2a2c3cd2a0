"""Time of one queue-sync cycle: a 10,000-job queue listing applied to 1,000,000 jobs,
with the listing as the cli adapter reads it now and as it read it before issue 33.

Since issue 33 the cli adapter reads the queue two ways: the queue sync
(``queue_stream``) reads only the fields no user writes, a record a line
(``parsing.SQUEUE_FORMAT``: no name, no comment), and ``queue()`` (the token look-up,
the invariants check) reads the comment and the name too, at fixed widths, before them
(``SQUEUE_TEXTS_FORMAT``). Before, one listing held all (``bench/listing_before.py``).
The sync's figures here are the real sync's: its listing, its parse
(``texts=False``), its apply.

In a database of its own (`portal_bench_sync` on 127.0.0.1:5432, dropped and
recreated at the start, dropped at the end; the dev data is never touched) it
inserts 1,000,000 jobs (INSERT … SELECT generate_series), all but 10,000 of
them finished; the 10,000 unfinished ones (half pending, half running) are in
Slurm. It builds a queue snapshot of those 10,000 jobs in exactly the bytes the
cli adapter reads from `squeue` (``parsing.squeue_record``), in which 1,000 differ from
the database: 500 pending jobs started running, 500 pending jobs have a new reason; in
three layouts:

- the sync's (``texts=False``): what ``queue_sync`` reads and applies below;
- queue()'s, with each job's comment (a submit token "portal:<uuid>") and name at fixed
  widths, every 32nd job's crafted as issue 33's researcher crafts them (separators,
  newlines, bytes that are no UTF-8, whole forged records of both formats): it must
  read them as data, at the same cost (checked, and its parse timed, with and without
  the crafted texts);
- the format read before issue 33 (fields and records split by separators, name and
  comment last; the crafted texts' separators replaced, as that format cannot carry
  them): what the sync read before.

Then it measures, each the median of several rounds (one of each kind per round, so a
change in the machine's load hits all alike), the changed jobs reset and vacuumed (as
autovacuum would) before each apply:

- parse: the sync's `parse_squeue(output, texts=False)` alone, before (the old one's
  text decoded first, as the old adapter decoded it), and queue()'s listing, with and
  without its crafted texts;
- apply: `queue_apply(cluster, entries)` alone, with the queries it issues and
  the plans of its comparison of the listing with the unfinished jobs (the partial
  index job_unfinished) and of its UPDATE;
- cycle: parse and apply, one after the other, now and before;
- apply once more right after a cycle, when nothing has changed (what most
  syncs of a quiet queue cost);
- the whole `queue_sync` of the snapshot (a client whose listing is the snapshot,
  read from a file), now and before, with the cluster's status not due and due (no
  nodes), its queries, and the peak memory (RSS) of one such sync in a fresh process.

On each dev cluster whose slurmctld is up (portal-dev on the host's Slurm, portal-next
on the other Debian release's, `bench/dev_clusters.py`) it also times a real `squeue` in
the three formats on whatever that cluster has queued, for reference only.

With `--live` it also queues as many held jobs on each of those clusters (as root, in
an account of its own, each named and with a submit token as a portal job is, cancelled
at the end, the account removed), moves as many of the database's unfinished jobs to a
cluster row of that name with the live jobs' Slurm ids, and times, round after round:
the raw `squeue` listing the sync reads (the issue's baseline, per Slurm version),
queue()'s listing with the texts, and the old listing, each parsed; the adapter's reads
(the sync's stream read whole, and queue()); and whole `queue_sync` runs through the cli
adapter and through the old listing and parser (the same sync and apply; only the
listing differs): `--changed` jobs changed (half of them a new state and event),
with the status due and not, and nothing changed; with the queries of one sync and the
peak RSS of one sync in a fresh process, both ways. Then it crafts the names and
comments of every 32nd live job (``scontrol update``), checks that queue() reads them
as written, times both listings and the sync again (which must not notice), and says
what the old parser makes of that queue. The dev clusters hold up to 110,000 jobs
(`MaxJobCount` in `dev/slurm/slurm.conf.in` and `dev/slurm-next/`), room for
`--queued 100000` (10 to 20 minutes of `sbatch` per cluster); a queue that does not fit
under a cluster's `MaxJobCount` (a cluster set up before it was raised: `dev/stack stop
&& dev/stack start` applies it; a bench must not restart the shared stack's slurmctld
itself) is skipped, and `--listing-ms` then gives the raw listing's time for the ratio.
Every figure is printed against the issue's targets with the load average at the start
and at the end.

    .venv/bin/python bench/sync.py [--jobs 1000000] [--queued 10000] [--changed 1000] [--repeat 7]
                                   [--profile]  (cProfile of one whole sync)  [--live]
                                   [--listing-ms MS]

Needs only PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth).
"""

import argparse
import atexit
import contextlib
import cProfile
import datetime as dt
import gc
import hashlib
import io
import json
import os
import pstats
import shutil
import signal
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
from bench import listing_before as before  # noqa: E402
from bench.before_after import NAN, compared_row, ms, print_compared  # noqa: E402
from bench.dev_clusters import DevCluster, dev_clusters  # noqa: E402
from clusters.locks import association_changes  # noqa: E402
from clusters.models import Cluster, ClusterStatus, Partition  # noqa: E402
from clusters.services import cluster_register  # noqa: E402
from clusters.slurm.errors import SlurmOutputInvalid  # noqa: E402
from clusters.slurm.parsing import (  # noqa: E402
    SQUEUE_FORMAT,
    SQUEUE_TEXTS_FORMAT,
    TEXT_WIDTH,
    parse_slurm_time,
    parse_squeue,
    parse_squeue_stream,
    squeue_record,
)
from clusters.slurm.protocol import SlurmClient  # noqa: E402
from clusters.slurm.types import ListingStream, QueueEntry  # noqa: E402
from jobs.models import Job, JobEvent  # noqa: E402
from jobs.queue_sync import QueueSyncResult, queue_apply, queue_sync  # noqa: E402
from jobs.states import IN_SLURM  # noqa: E402

TARGET_APPLY_S = 1.0
# Issue 24's targets: the whole sync at most 1.5 times the raw listing at 10,000
# queued, twice at 100,000; one sync's peak memory at 100,000 at most 200 MB. Issue 33's:
# reading users' texts as data costs no more than the listing read before it did.
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


# Every CRAFTED_EVERY-th job of a queue has a crafted comment and name (a few hundred
# of 10,000), as issue 33's researcher writes them: Slurm takes every byte but NUL.
CRAFTED_EVERY = 32
_FORGED = [
    "987650001", "987650001", "N/A", "olga", "genomics", "gpu", "SUSPENDED", "None",
    "2026-01-01T00:00:00", "2026-01-01T00:00:00", "1:00:00", "1", "gres:gpu:8", "1", "gpu01",
]  # fmt: skip


def crafted_texts(k: int, token: bytes) -> tuple[bytes, bytes]:
    """The ``k``-th crafted (comment, name): separators, newlines, bytes that are no
    UTF-8, a character cut by the width, and whole forged records of the old format
    (queue and accounting shapes) and of the new; longer than the width, some."""
    old_separator = before.FIELD_SEPARATOR.encode()
    old_queue = b"\x1e\n" + old_separator.join(f.encode() for f in _FORGED) + b"\x1e"
    old_sacct = b"inj\n" + old_separator.join(
        b"987650001 987650001 olga genomics gpu COMPLETED 0:0 gres/gpu=8 360000".split()
    )
    new_queue = b"\n" + squeue_record(_FORGED, comment=token, name=b"forged")
    shapes = [
        (token, old_queue),
        (token + b"\n" + new_queue, old_sacct),
        (b"\x1f\x1e\n" * 30, new_queue),
        (token, bytes(range(1, 65))),
        (bytes(range(128, 192)), bytes(range(192, 256))),
        (token, "€".encode() * 30),  # 90 bytes: the width cuts its 22nd character
        (b"\n" * TEXT_WIDTH, b"\n" * (TEXT_WIDTH + 1)),
        (token + b"\xff", b"x" * (TEXT_WIDTH - 1) + b"\n" + new_queue),
    ]
    return shapes[(k // CRAFTED_EVERY) % len(shapes)]


def crafted_for_the_old_format(text: bytes) -> bytes:
    """A crafted text as the old format can carry it without forging or stopping the
    listing (that was issue 33): its separators replaced, cut as the new one cuts it."""
    return text[:TEXT_WIDTH].replace(b"\x1e", b"?").replace(b"\x1f", b"?")


def as_read(text: bytes) -> str:
    """What a listing should read of a comment or a name as written: cut to the width,
    squeue's padding off, bytes that are no UTF-8 replaced (``parsing._user_text``)."""
    return text[:TEXT_WIDTH].rstrip(b" ").decode("utf-8", errors="replace")


class Snapshot:
    """A queue of the database's unfinished jobs as squeue prints it now: in the sync's
    layout (``output``: the fields no user writes), in queue()'s with the comments and
    names (``texts_output``; ``plain_texts_output`` without the crafted ones) and in the
    old format (``before_output``); `changed` of them different from the database (half
    started, half with a new reason); the Slurm ids of the changed ones (``differ``) and
    of the crafted ones."""

    def __init__(self, jobs: int, queued: int, changed: int) -> None:
        first = jobs - queued
        step = queued // changed  # every step-th pending job changes
        synced, texts, plain, old = [], [], [], []
        self.differ: list[int] = []
        self.crafted: dict[int, tuple[bytes, bytes]] = {}
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
                self.differ.append(g + 1)
            else:
                state, start = "PENDING", "N/A"
                reason = "Resources" if k % (2 * step) == 2 else "Priority"
                if reason == "Resources":
                    self.differ.append(g + 1)
            fields = [
                str(g + 1), str(g + 1), "N/A", USER, ACCOUNT, PARTITION, state, reason,
                slurm_time(submitted), start, "1:00:00", str(10_000 + k % 500), "gres:gpu:1",
                "1", "" if state == "PENDING" else f"gpu{k % 64:02d}",
            ]  # fmt: skip
            synced.append(squeue_record(fields, texts=False))
            comment, name = f"portal:{token}".encode(), f"train-{g}".encode()
            plain.append(squeue_record(fields, comment=comment, name=name))
            if k % CRAFTED_EVERY == CRAFTED_EVERY - 1:
                comment, name = self.crafted[g + 1] = crafted_texts(k, comment)
                comment_old = crafted_for_the_old_format(comment)
                name_old = crafted_for_the_old_format(name)
            else:
                comment_old, name_old = comment, name
            texts.append(squeue_record(fields, comment=comment, name=name))
            old.append(before.squeue_record(fields, comment=comment_old, name=name_old))
        self.output = b"".join(synced)
        self.texts_output, self.plain_texts_output = b"".join(texts), b"".join(plain)
        self.before_output = b"".join(old)

    def check(self, queued: int, changed: int) -> list[QueueEntry]:
        """The entries the sync reads, checked: every job once, none refused, no texts;
        queue()'s listing reads the same jobs, its crafted texts as written; so does the
        old parser (the texts aside: it cannot carry the crafted ones)."""
        entries = parse_squeue(self.output, texts=False)
        assert not entries.refused, entries.refused[:3]
        assert len(entries) == queued and len(self.differ) == changed
        assert not any(entry.comment or entry.name for entry in entries)
        with_texts = parse_squeue(self.texts_output)
        assert not with_texts.refused, with_texts.refused[:3]
        for entry in with_texts:
            if entry.job_id in self.crafted:
                comment, name = self.crafted[entry.job_id]
                assert (entry.comment, entry.name) == (as_read(comment), as_read(name)), entry
        old = before.parse_squeue(self.before_output.decode("utf-8", errors="replace"))
        assert [e for e in old if e.job_id not in self.crafted] == [
            e for e in with_texts if e.job_id not in self.crafted
        ]
        for listed in (with_texts, parse_squeue(self.plain_texts_output), old):
            assert [e._replace(comment="", name="") for e in listed] == list(entries)
        return entries


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


def timed(action: Callable[[], object], repeat: int, prepare: Callable[[], object]) -> list[float]:
    # As timeit does: the collector is off while a step runs, so a collection that
    # the previous step's garbage triggers is not billed to this one.
    times = []
    for _ in range(repeat):
        prepare()
        gc.collect()
        gc.disable()
        try:
            started = time.perf_counter()
            action()
            times.append(time.perf_counter() - started)
        finally:
            gc.enable()
    return times


Steps = dict[str, tuple[Callable[[], object], Callable[[], object]]]


def nothing() -> None:
    pass


def in_rounds(steps: Steps, repeat: int) -> tuple[dict[str, float], dict[str, str]]:
    """Each step's median (s), timed round after round, each step once a round, so a
    change in the machine's load hits all alike. A step of the old listing (``*_before``)
    that cannot read the queue (a user's name holding its separators: issue 33's) is
    said, not timed; a failure of any other step stops the bench."""
    times: dict[str, list[float]] = {name: [] for name in steps}
    failed: dict[str, str] = {}
    for _ in range(repeat):
        for name, (action, prepare) in steps.items():
            try:
                times[name] += timed(action, 1, prepare)
            except SlurmOutputInvalid as error:
                if not name.endswith("_before"):
                    raise
                failed[name] = str(error)[:160]
    medians = {name: statistics.median(values) if values else NAN for name, values in times.items()}
    said = {
        name: f"{repeat - len(times[name])} of {repeat} rounds could not read: {error}"
        for name, error in failed.items()
    }
    return medians, said


def explain(sql: str) -> tuple[list[str], float]:
    """The plan of a statement Django ran, with its WAL, rolled back."""
    return own_database.explain(sql, options="ANALYZE, BUFFERS, WAL", rollback=True)


def explain_with_listing(
    cluster: Cluster, entries: list[QueueEntry], sql: str
) -> tuple[list[str], float]:
    """The plan of one of queue_apply's statements as it ran (``sql``, captured with its
    parameters) on the listing (``queue_listing``, copied first as it copies it), with
    its WAL; rolled back."""
    from jobs import queue_sync as module

    rows = module._snapshot(entries, module._PartitionIds(cluster)).rows
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(module._LISTING_TABLE)
        cursor.execute("DELETE FROM queue_listing")
        with cursor.copy("COPY queue_listing FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(module._LISTING_TYPES)
            for row in rows:
                copy.write_row(row)
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, WAL) {sql}")
        lines = [row[0] for row in cursor.fetchall()]
        transaction.set_rollback(True)
    execution = next(line for line in lines if line.startswith("Execution Time:"))
    return lines, float(execution.split()[2])


def captured_apply(cluster: Cluster, entries: list[QueueEntry]) -> tuple[QueueSyncResult, list]:
    with CaptureQueriesContext(connection) as captured:
        result = queue_apply(cluster=cluster, entries=entries)
    return result, captured.captured_queries


def profile(action: Callable[[], object], top: int = 15) -> str:
    profiler = cProfile.Profile()
    profiler.runcall(action)
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(top)
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


# The cli adapter's two listings of the whole queue (``CliClient._squeue_stream``): the
# sync's (the fields no user writes) and queue()'s (the comment and the name too).
SQUEUE_ARGV = ["squeue", "--noheader", "--all", "--states=all", "-o", SQUEUE_FORMAT]
SQUEUE_TEXTS_ARGV = ["squeue", "--noheader", "--all", "--states=all", "-o", SQUEUE_TEXTS_FORMAT]


def old_parse(output: bytes) -> list[QueueEntry]:
    """The old format's output parsed as the old adapter did: decoded, then parsed."""
    return before.parse_squeue(output.decode("utf-8", errors="replace"))


def read_whole(client: SlurmClient | before.BeforeClient) -> list[QueueEntry]:
    """The listing the queue sync reads (``queue_stream``), read to its end."""
    with client.queue_stream() as listing:
        return list(listing)


def real_squeue(target: DevCluster, repeat: int) -> dict:
    """A dev cluster's own queue, read raw and through the cli adapter (the sync's
    stream, and queue() with the texts), now and before."""
    steps: Steps = {
        "raw": (lambda: target.raw_output(SQUEUE_ARGV), nothing),
        "raw_texts": (lambda: target.raw_output(SQUEUE_TEXTS_ARGV), nothing),
        "raw_before": (lambda: target.raw_output(before.SQUEUE_ARGV), nothing),
        "stream": (lambda: read_whole(target.tools), nothing),
        "adapter": (target.tools.queue, nothing),
        "adapter_before": (lambda: before.queue(target.tools), nothing),
    }
    medians, failed = in_rounds(steps, repeat)
    return {
        "jobs": len(target.tools.queue()),
        **{f"{name}_s": value for name, value in medians.items()},
        "failed": failed,
    }


LIVE_ACCOUNT = "benchqueue"


def dev_clusters_up() -> list[DevCluster]:
    """The dev clusters whose controller answers (a fault test may have stopped one)."""
    return [each for each in dev_clusters() if each.run(["sinfo", "--noheader"]).returncode == 0]


def _sbatch_held(target: DevCluster, numbers: range) -> list[int]:
    """Held jobs named and tokened as the portal's are (a name, ``portal:<uuid>``)."""
    ids = []
    for number in numbers:
        argv = ["sbatch", "--parsable", "--hold", f"--account={LIVE_ACCOUNT}",
                f"--partition={target.partition}", "--time=1", "--output=/dev/null",
                "--chdir=/tmp", f"--job-name=train-{number}", f"--comment=portal:{uuid.uuid4()}",
                "--wrap=true"]  # fmt: skip
        ids.append(int(target.output(argv).split(";")[0]))
    return ids


def max_job_count(target: DevCluster) -> int:
    for line in target.output(["scontrol", "show", "config"]).splitlines():
        if line.startswith("MaxJobCount"):
            return int(line.split("=", 1)[1])
    return 10_000  # Slurm's default


def live_queue(target: DevCluster, cluster: Cluster, args: argparse.Namespace) -> dict:
    """Fill a dev cluster's queue with ``--queued`` held jobs (root, an account of their
    own), time the raw squeue listings, the adapter's reads and whole queue syncs of
    them, now and before (``live_cycle``), then cancel them and remove the account,
    whatever happened. A queue that does not fit under the cluster's MaxJobCount (a
    slurmctld restart is needed to raise it) is not filled."""
    room = max_job_count(target) - len(target.tools.queue()) - 100
    if args.queued > room:
        return {"skipped": f"MaxJobCount: room for {room:,} more jobs"}
    started = time.perf_counter()
    try:
        with association_changes(target.name):
            target.run(["sacctmgr", "-i", "add", "account", LIVE_ACCOUNT])
            target.run(["sacctmgr", "-i", "add", "user", "root", f"account={LIVE_ACCOUNT}"])
        # sbatch is mostly waiting for slurmctld: a few at a time fill the queue faster.
        with ThreadPoolExecutor(max_workers=8) as pool:
            shares = [range(i, args.queued, 8) for i in range(8)]
            slurm_ids = sorted(
                i for ids in pool.map(lambda n: _sbatch_held(target, n), shares) for i in ids
            )
        fill_s = time.perf_counter() - started
        return {**live_cycle(target, cluster, slurm_ids, args), "fill_s": fill_s}
    finally:
        cancel_live_jobs(target)
        target.account_remove(LIVE_ACCOUNT)


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
) -> dict:
    """Whole queue syncs (``queue_sync``: the adapter's listing and parse, the apply, the
    events, the status when due) of the live queue, beside its raw listing, now and with
    the old listing and parser.

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
        return _live_cycle(target, cluster, job_ids, slurm_ids, args)
    finally:  # back as they were, for the next cluster
        with connection.cursor() as cursor:
            cursor.execute(move, [bench.pk, job_ids, [slurm_id for _, slurm_id in moved]])


def _live_cycle(
    target: DevCluster,
    cluster: Cluster,
    job_ids: list[int],
    slurm_ids: list[int],
    args: argparse.Namespace,
) -> dict:
    client, before_client = target.tools, before.BeforeClient(target.tools)
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

    def sync_before() -> QueueSyncResult:
        return queue_sync(cluster=cluster, client=before_client)

    def checked(result: QueueSyncResult) -> QueueSyncResult:
        assert result.changed == len(changed) and not result.vanished, result
        assert not {r.job_id for r in result.refused} & set(slurm_ids), result.refused[:3]
        return result

    reset_live()
    status_fresh()
    with CaptureQueriesContext(connection) as captured:
        checked(sync())
    queries = len(captured.captured_queries)
    reset_live()
    status_due()
    with CaptureQueriesContext(connection) as captured:
        sync()
    status_queries = len(captured.captured_queries)
    reset_live()
    status_fresh()
    try:
        checked(sync_before())
    except SlurmOutputInvalid as error:  # another's crafted job queued now: said below
        print(f"{target.name}: the old listing cannot be read: {error}", file=sys.stderr)
    listing = target.raw_output(SQUEUE_ARGV)
    listing_texts = target.raw_output(SQUEUE_TEXTS_ARGV)
    listing_before = target.raw_output(before.SQUEUE_ARGV)
    steps: Steps = {
        "raw": (lambda: target.raw_output(SQUEUE_ARGV), nothing),
        "raw_texts": (lambda: target.raw_output(SQUEUE_TEXTS_ARGV), nothing),
        "raw_before": (lambda: target.raw_output(before.SQUEUE_ARGV), nothing),
        "parse": (lambda: parse_squeue(listing, texts=False), nothing),
        "parse_texts": (lambda: parse_squeue(listing_texts), nothing),
        "parse_before": (lambda: old_parse(listing_before), nothing),
        "stream": (lambda: read_whole(client), nothing),
        "adapter": (client.queue, nothing),
        "adapter_before": (before_client.queue, nothing),
        "cycle": (sync, lambda: (reset_live(), status_fresh())),
        "cycle_before": (sync_before, lambda: (reset_live(), status_fresh())),
        "cycle_status": (sync, lambda: (reset_live(), status_due())),
        "cycle_status_before": (sync_before, lambda: (reset_live(), status_due())),
        # Settled by a sync first (untimed): a round whose old listing could not be
        # read left its changes unapplied.
        "unchanged": (sync, lambda: (status_fresh(), sync())),
        "unchanged_before": (sync_before, lambda: (status_fresh(), sync())),
    }
    medians, failed = in_rounds(steps, args.repeat)
    reset_live()
    status_fresh()
    figures = {
        "jobs": len(client.queue()),
        **{f"{name}_s": value for name, value in medians.items()},
        "failed": failed,
        "listing_bytes": len(listing),
        "listing_texts_bytes": len(listing_texts),
        "listing_before_bytes": len(listing_before),
        "queries": queries,
        "status_queries": status_queries,
        "peak_rss_mb": one_sync_peak_rss_mb(cluster.name, target.name),
        "peak_rss_before_mb": one_sync_peak_rss_mb(cluster.name, target.name, use_before=True),
    }
    if args.profile:
        reset_live()
        status_fresh()
        figures["profile"] = profile(sync, top=30)
    figures.update(crafted_stage(target, slurm_ids, sync, checked, reset_live, status_fresh, args))
    reset_live()
    status_fresh()
    return figures


def crafted_stage(
    target: DevCluster,
    slurm_ids: list[int],
    sync: Callable[[], QueueSyncResult],
    checked: Callable[[QueueSyncResult], QueueSyncResult],
    reset_live: Callable[[], None],
    status_fresh: Callable[[], None],
    args: argparse.Namespace,
) -> dict:
    """Craft the comment and name of every CRAFTED_EVERY-th live job (``scontrol
    update``, as their owner may), check that queue() reads the texts as written and
    that the sync neither refuses nor misses a job, time both listings and the sync
    again, and say what the old parser makes of it."""
    crafted = {
        slurm_id: crafted_texts(k, f"portal:{uuid.uuid4()}".encode())
        for k, slurm_id in enumerate(slurm_ids)
        if k % CRAFTED_EVERY == CRAFTED_EVERY - 1
    }

    def craft(item: tuple[int, tuple[bytes, bytes]]) -> None:
        slurm_id, (comment, name) = item
        # Bytes as argv: os.fsdecode's surrogates are written back as the bytes they were.
        target.output(["scontrol", "update", f"jobid={slurm_id}",
                       f"name={os.fsdecode(name)}", f"comment={os.fsdecode(comment)}"])  # fmt: skip

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(craft, crafted.items()))
    listed = {entry.job_id: entry for entry in target.tools.queue()}
    as_written = sum(
        (listed[i].comment, listed[i].name) == (as_read(c), as_read(n))
        for i, (c, n) in crafted.items()
        if i in listed
    )
    # The sync's listing of the same queue: every live job, each as queue() reads it but
    # for the texts, which it leaves out.
    streamed = {entry.job_id: entry for entry in read_whole(target.tools)}
    alike = sum(
        i in streamed and i in listed and streamed[i] == listed[i]._replace(comment="", name="")
        for i in slurm_ids
    )
    try:
        old = before.queue(target.tools)
    except SlurmOutputInvalid as error:
        old_parser = f"stops: {error}"[:120]
        old_failed, forged = 1, 0
    else:
        forged = sum(entry.job_id not in listed for entry in old)
        old_parser = f"{len(old):,} entries ({len(listed):,} queued), {forged} not in Slurm"
        old_failed = 0
    reset_live()
    status_fresh()
    checked(sync())
    listing = target.raw_output(SQUEUE_ARGV)
    listing_texts = target.raw_output(SQUEUE_TEXTS_ARGV)
    steps: Steps = {
        "raw": (lambda: target.raw_output(SQUEUE_ARGV), nothing),
        "raw_texts": (lambda: target.raw_output(SQUEUE_TEXTS_ARGV), nothing),
        "parse": (lambda: parse_squeue(listing, texts=False), nothing),
        "parse_texts": (lambda: parse_squeue(listing_texts), nothing),
        "cycle": (sync, lambda: (reset_live(), status_fresh())),
    }
    medians, _ = in_rounds(steps, args.repeat)
    return {
        "crafted_jobs": len(crafted),
        "crafted_as_written": as_written,
        "crafted_stream_alike": alike,
        "live_jobs": len(slurm_ids),
        "crafted_old_parser": old_parser,
        "crafted_old_parser_failed": old_failed,
        "crafted_old_parser_forged": forged,
        **{f"crafted_{name}_s": value for name, value in medians.items()},
    }


def one_sync_peak_rss_mb(cluster: str, target: str, *, use_before: bool = False) -> float:
    """The peak memory (RSS) of a fresh process that makes one queue sync of the cluster:
    what a worker needs for it, Django and the portal loaded included."""
    return one_sync_in_a_fresh_process(cluster, target, use_before=use_before)["peak_rss_mb"]


def one_sync_in_a_fresh_process(cluster: str, target: str, *, use_before: bool) -> dict:
    """What ``one_sync`` printed. The old listing cannot be read while another's job with
    its separators in a name is queued (issue 33): it is tried a few times, then said."""
    for _ in range(3):
        output = subprocess.run(
            [sys.executable, __file__, "--one-sync", cluster, "--target", target,
             *(["--before"] if use_before else [])],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        said = json.loads(output.splitlines()[-1])
        if "unreadable" not in said:
            return said
        time.sleep(10)
    return said


def one_sync(cluster_name: str, target: str, *, use_before: bool) -> None:
    cluster = Cluster.objects.get(name=cluster_name)
    client: SlurmClient | SnapshotClient | before.BeforeClient
    if target.startswith("file:"):
        client = (BeforeSnapshotClient if use_before else SnapshotClient)(Path(target[5:]))
    else:
        tools = dev_clusters(target)[0].tools
        client = before.BeforeClient(tools) if use_before else tools
    loaded = peak_rss_mb()
    try:
        queue_sync(cluster=cluster, client=client)  # type: ignore[arg-type]
    except SlurmOutputInvalid as error:
        if not use_before:
            raise
        print(json.dumps({"loaded_rss_mb": loaded, "peak_rss_mb": NAN, "unreadable": str(error)}))
        return
    print(json.dumps({"loaded_rss_mb": round(loaded, 1), "peak_rss_mb": round(peak_rss_mb(), 1)}))


def peak_rss_mb() -> float:
    """This process's peak RSS since its exec (VmHWM). Not getrusage's ru_maxrss: Linux
    keeps that across fork and exec, so a child would report its parent's peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


class SnapshotClient:
    """A client whose queue is a snapshot's bytes as squeue prints the sync's listing
    (SQUEUE_FORMAT: no names or comments), read as the cli adapter's ``queue_stream``
    reads it (for a queue larger than a dev cluster's MaxJobCount); it has no nodes."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def queue(self) -> list[QueueEntry]:
        with self.queue_stream() as listing:
            return list(listing)

    @contextlib.contextmanager
    def queue_stream(self) -> Iterator[ListingStream[QueueEntry]]:
        refused: list = []
        with self.path.open("rb") as output:
            chunks = iter(lambda: output.read(1 << 16), b"")
            yield ListingStream(parse_squeue_stream(chunks, refused, texts=False), refused)

    def nodes(self) -> list:
        return []


class BeforeSnapshotClient(SnapshotClient):
    """A snapshot in the old format, read by the old parser as the old adapter read it."""

    def queue(self) -> list[QueueEntry]:
        return old_parse(self.path.read_bytes())

    @contextlib.contextmanager
    def queue_stream(self) -> Iterator[ListingStream[QueueEntry]]:
        with self.path.open("rb") as output:
            chunks = iter(lambda: output.read(1 << 16), b"")
            yield ListingStream(before.parse_squeue_stream(before.decoded(chunks)), [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--queued", type=int, default=10_000)
    parser.add_argument("--changed", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument(
        "--profile", action="store_true", help="print a profile of one sync (snapshot, live)"
    )
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
    parser.add_argument("--before", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_sync:  # the child that one_sync_peak_rss_mb starts, in the bench's database
        one_sync(args.one_sync, args.target, use_before=args.before)
        return
    if not 0 < args.changed <= args.queued // 2 <= args.jobs // 2:
        parser.error("need 0 < changed <= queued / 2 <= jobs / 2")

    # A stopped run (SIGTERM) cancels its live jobs, removes its account and drops its
    # database too, as a failed one does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(f"stopped by signal {signal.SIGTERM}"))
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

    snapshot = Snapshot(args.jobs, args.queued, args.changed)
    entries = snapshot.check(args.queued, args.changed)
    differ = snapshot.differ

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
    # The comparison of the listing with the stored jobs, and the write of the changed
    # jobs and their events (one statement each), as they ran.
    differing_sql = next(q["sql"] for q in queries if "LEFT JOIN queue_listing" in q["sql"])
    update_sql = next((q["sql"] for q in queries if "UPDATE jobs_job" in q["sql"]), "")
    # The whole sync (queue_sync) of the snapshot, as if squeue had printed the sync's
    # listing, now and in the old format: the portal's own cost of a cycle, status
    # included when due.
    folder = Path(tempfile.mkdtemp())
    atexit.register(shutil.rmtree, folder, ignore_errors=True)  # a failed run's too
    snapshot_file, before_file = folder / "squeue.out", folder / "squeue-before.out"
    snapshot_file.write_bytes(snapshot.output)
    before_file.write_bytes(snapshot.before_output)
    snapshot_client, before_client = (
        SnapshotClient(snapshot_file),
        BeforeSnapshotClient(before_file),
    )

    def status_at(at: dt.datetime) -> Callable[[], object]:
        return lambda: ClusterStatus.objects.filter(cluster=cluster).update(taken_at=at)

    def sync_snapshot() -> QueueSyncResult:
        return queue_sync(cluster=cluster, client=snapshot_client)

    def sync_snapshot_before() -> QueueSyncResult:
        return queue_sync(cluster=cluster, client=before_client)  # type: ignore[arg-type]

    reset_changed()
    sync_snapshot()  # the status row is made
    for each in (sync_snapshot_before, sync_snapshot):
        reset_changed()
        status_at(timezone.now())()
        with CaptureQueriesContext(connection) as captured:
            synced = each()
        assert synced.changed == args.changed and not synced.refused, synced
    sync_queries = len(captured.captured_queries)

    def parse_cold() -> None:
        parse_slurm_time.cache_clear()  # a worker's first sync, before the cache knows the times
        parse_squeue(snapshot.output, texts=False)

    def cycle() -> None:
        listing = parse_squeue(snapshot.output, texts=False)
        queue_apply(cluster=cluster, entries=listing, refused=listing.refused)

    fresh, due = status_at(timezone.now()), status_at(BASE)
    steps: Steps = {
        "parse": (lambda: parse_squeue(snapshot.output, texts=False), nothing),
        "parse_before": (lambda: old_parse(snapshot.before_output), nothing),
        # queue()'s listing, with the crafted texts and without: no dearer for them.
        "parse_texts": (lambda: parse_squeue(snapshot.texts_output), nothing),
        "parse_texts_plain": (lambda: parse_squeue(snapshot.plain_texts_output), nothing),
        "parse_cold": (parse_cold, nothing),
        "apply": (lambda: queue_apply(cluster=cluster, entries=entries), reset_changed),
        "cycle": (cycle, reset_changed),
        "cycle_before": (
            lambda: queue_apply(cluster=cluster, entries=old_parse(snapshot.before_output)),
            reset_changed,
        ),
        # Right after a cycle nothing has changed: what most syncs of a quiet queue cost.
        "unchanged": (lambda: queue_apply(cluster=cluster, entries=entries), nothing),
        "sync": (sync_snapshot, lambda: (reset_changed(), fresh())),
        "sync_before": (sync_snapshot_before, lambda: (reset_changed(), fresh())),
        "sync_status": (sync_snapshot, lambda: (reset_changed(), due())),
        "sync_status_before": (sync_snapshot_before, lambda: (reset_changed(), due())),
    }
    medians, _ = in_rounds(steps, args.repeat)
    parse_s, parse_cold_s = medians["parse"], medians["parse_cold"]
    apply_s, cycle_s, unchanged_s = medians["apply"], medians["cycle"], medians["unchanged"]
    sync_s, sync_status_s = medians["sync"], medians["sync_status"]
    reset_changed()
    plan, plan_ms = explain_with_listing(cluster, entries, differing_sql)
    update_plan, update_ms = (
        explain_with_listing(cluster, entries, update_sql) if update_sql else ([], 0.0)
    )
    profiled = ""
    if args.profile:
        due()
        profiled = profile(sync_snapshot, top=30)
        reset_changed()
    due()
    snapshot_rss = one_sync_in_a_fresh_process(
        cluster.name, f"file:{snapshot_file}", use_before=False
    )
    reset_changed()
    due()
    before_rss = one_sync_in_a_fresh_process(cluster.name, f"file:{before_file}", use_before=True)
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
        ("  of them with crafted comment and name (queue()'s)", f"{len(snapshot.crafted):,}"),
        ("queue snapshot: changed", f"{len(differ):,}"),
        ("jobs written by apply / events", f"{result.changed:,} / {events:,}"),
        (f"SQL queries of one apply, {len(differ):,} changed", f"{len(queries)}"),
        ("SQL queries of one apply, none changed", f"{len(unchanged_queries)}"),
        ("parse of the sync's listing, time cache cleared", ms(parse_cold_s)),
        ("parse of queue()'s listing with texts", ms(medians["parse_texts"])),
        ("  the same without crafted texts", ms(medians["parse_texts_plain"])),
        (f"apply, median of {args.repeat}", ms(apply_s)),
        (
            f"  apply target (< {TARGET_APPLY_S:g} s)",
            "met" if apply_s < TARGET_APPLY_S else "MISSED",
        ),
        ("  unfinished jobs read and compared (plan execution)", f"{plan_ms:.1f} ms"),
        ("  jobs UPDATE (plan execution)", f"{update_ms:.1f} ms"),
        ("apply, nothing changed", ms(unchanged_s)),
        ("cycle / parse ratio", f"{ratio:.2f}"),
        ("SQL queries of one whole sync, status not due", f"{sync_queries}"),
        ("peak RSS: of it Django and the portal loaded", f"{snapshot_rss['loaded_rss_mb']:.0f} MB"),
    ]
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
            ("  the same, status due", f"{(listing_s + sync_status_s) / listing_s:.2f}"),
            (
                "  the same, before (the old format's sync)",
                f"{(listing_s + medians['sync_before']) / listing_s:.2f}",
            ),
        ]
    width = max(len(label) for label, _ in rows) + 2
    for label, value in rows:
        print(f"{label:<{width}}{value:>16}")
    print()
    compared = [
        ("size of squeue's output: the sync's listing", "before_bytes", "bytes", "KiB"),
        ("  queue()'s listing, with texts", "before_bytes", "texts_bytes", "KiB"),
        ("parse: the sync's listing", "parse_before", "parse", "ms"),
        ("  queue()'s listing, with texts", "parse_before", "parse_texts", "ms"),
        ("cycle (parse + apply)", "cycle_before", "cycle", "ms"),
        ("whole sync (queue_sync), status not due", "sync_before", "sync", "ms"),
        ("  the same, status due (nodes: none)", "sync_status_before", "sync_status", "ms"),
        (f"  peak RSS of one sync, a fresh process (<= {TARGET_PEAK_RSS_MB} MB at 100k)",
         "peak_rss_before", "peak_rss", "MB"),
    ]  # fmt: skip
    medians |= {
        "before_bytes": len(snapshot.before_output),
        "bytes": len(snapshot.output),
        "texts_bytes": len(snapshot.texts_output),
        "peak_rss_before": before_rss["peak_rss_mb"],
        "peak_rss": snapshot_rss["peak_rss_mb"],
    }
    print_compared(
        f"queue snapshot of {len(entries):,} jobs, median of {args.repeat} (before: one listing)",
        [compared_row(label, medians[b], medians[a], unit) for label, b, a, unit in compared],
    )
    for name, reference in references.items():
        print()
        rows = [
            ("raw squeue: the sync's listing", "raw_before_s", "raw_s"),
            ("  queue()'s, with texts", "raw_before_s", "raw_texts_s"),
            ("cli adapter: the sync's stream, read whole", "adapter_before_s", "stream_s"),
            ("  queue() (texts, checked)", "adapter_before_s", "adapter_s"),
        ]
        print_compared(
            f"{name}'s own queue ({reference['jobs']:.0f} jobs), reference only",
            [
                *(compared_row(label, reference[b], reference[a], "ms") for label, b, a in rows),
                *((f"  before: {error}",) for error in reference["failed"].values()),
            ],
        )
    if not references:
        print("the dev clusters' own queues: slurmctld down")
    for name, live in lives.items():
        print()
        if "skipped" in live:
            print(f"live queue of {args.queued:,} on {name}: {live['skipped']}")
            continue
        print_live(name, versions[name], live, args, target_ratio)
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
        print("one whole sync of the snapshot, status due:")
        print(profiled)
        for name, live in lives.items():
            if "profile" in live:
                print(f"one whole sync of the live queue on {name}, status not due:")
                print(live["profile"])
    figures: dict[str, float | int | str] = {
        "jobs_in_db": jobs_in_db,
        "queue_entries": len(entries),
        "crafted_entries": len(snapshot.crafted),
        "changed": len(differ),
        "snapshot_bytes": len(snapshot.output),
        "snapshot_texts_bytes": len(snapshot.texts_output),
        "snapshot_before_bytes": len(snapshot.before_output),
        "parse_s": round(parse_s, 4),
        "parse_before_s": round(medians["parse_before"], 4),
        "parse_texts_s": round(medians["parse_texts"], 4),
        "parse_texts_without_crafted_s": round(medians["parse_texts_plain"], 4),
        "parse_cold_s": round(parse_cold_s, 4),
        "apply_s": round(apply_s, 4),
        "apply_unchanged_s": round(unchanged_s, 4),
        "sync_cycle_s": round(cycle_s, 4),
        "sync_cycle_before_s": round(medians["cycle_before"], 4),
        "sync_vs_parse_ratio": round(ratio, 2),
        "apply_queries": len(queries),
        "apply_unchanged_queries": len(unchanged_queries),
        "unfinished_read_plan_ms": round(plan_ms, 1),
        "update_plan_ms": round(update_ms, 1),
        "snapshot_sync_s": round(sync_s, 4),
        "snapshot_sync_before_s": round(medians["sync_before"], 4),
        "snapshot_sync_status_s": round(sync_status_s, 4),
        "snapshot_sync_status_before_s": round(medians["sync_status_before"], 4),
        "sync_queries": sync_queries,
        "snapshot_sync_peak_rss_mb": snapshot_rss["peak_rss_mb"],
        "snapshot_sync_before_peak_rss_mb": before_rss["peak_rss_mb"],
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
        for measured in ("raw", "raw_texts", "raw_before", "stream", "adapter", "adapter_before"):
            figures[f"{key}_squeue_{measured}_s"] = round(reference[f"{measured}_s"], 4)
    for name, live in lives.items():
        if "skipped" not in live:
            figures.update(live_figures(name.replace("-", "_"), live))
    # A figure of the old listing that could not be read (NaN) is null.
    print(json.dumps({k: None if v != v else v for k, v in figures.items()}))


def print_live(
    name: str, version: str, live: dict, args: argparse.Namespace, target_ratio: float
) -> None:
    """The live queue's figures, before and after, in one table. Before, one listing
    served both the sync and queue(); now the sync's leaves the texts out, queue()'s
    has them: each is set against the old one."""
    raw, raw_before = live["raw_s"], live["raw_before_s"]
    compared = [
        ("  squeue output: the sync's listing", "listing_before_bytes", "listing_bytes", "KiB"),
        ("    queue()'s listing, with texts", "listing_before_bytes", "listing_texts_bytes", "KiB"),
        ("  raw squeue: the sync's listing (the issue's baseline)", "raw_before_s", "raw_s", "ms"),
        ("    queue()'s listing, with texts", "raw_before_s", "raw_texts_s", "ms"),
        ("  parse: the sync's listing", "parse_before_s", "parse_s", "ms"),
        ("    queue()'s listing, with texts", "parse_before_s", "parse_texts_s", "ms"),
        ("  cli adapter: the sync's stream, read whole", "adapter_before_s", "stream_s", "ms"),
        ("    queue() (texts, checked)", "adapter_before_s", "adapter_s", "ms"),
        (f"  queue_sync, {args.changed:,} changed", "cycle_before_s", "cycle_s", "ms"),
        ("  queue_sync with the status due", "cycle_status_before_s", "cycle_status_s", "ms"),
        ("  queue_sync, nothing changed", "unchanged_before_s", "unchanged_s", "ms"),
        ("  peak RSS of one sync, a fresh process", "peak_rss_before_mb", "peak_rss_mb", "MB"),
    ]  # fmt: skip
    rows: list[tuple] = [(f"  filled in {live['fill_s']:.1f} s",)]
    for label, before_key, after_key, unit in compared:
        rows.append(compared_row(label, live[before_key], live[after_key], unit))
        if after_key.startswith(("cycle", "unchanged")):
            before_own = live[before_key] / raw_before
            rows.append(
                compared_row("    / its own raw listing", before_own, live[after_key] / raw, "x")
            )
        if after_key == "cycle_s":
            rows.append(
                compared_row(
                    "    / the new raw listing", live[before_key] / raw, live[after_key] / raw, "x"
                )
            )
    ratio, ratio_before = live["cycle_s"] / raw, live["cycle_before_s"] / raw_before
    crafted_ratio = live["crafted_cycle_s"] / live["crafted_raw_s"]
    rows += [
        (f"  SQL queries of one sync (status not due / due): {live['queries']} / "
         f"{live['status_queries']}",),
        (f"  queue_sync / new raw listing {ratio:.2f}: issue 24's target <= {target_ratio:g} "
         f"{'PASS' if ratio <= target_ratio else 'over'}; issue 33's, no more than before "
         f"({ratio_before:.2f}): {'PASS' if ratio <= ratio_before else 'over'}",),
        *((f"  before, {step}: {error}",) for step, error in live["failed"].items()),
        (f"  with {live['crafted_jobs']:,} crafted comments and names (scontrol update), after:",),
        (f"    the sync's listing: raw {ms(live['crafted_raw_s'])}, its parse "
         f"{ms(live['crafted_parse_s'])}, queue_sync {ms(live['crafted_cycle_s'])}: "
         f"{crafted_ratio:.2f} the listing",),
        (f"    queue()'s listing: raw {ms(live['crafted_raw_texts_s'])}, its parse "
         f"{ms(live['crafted_parse_texts_s'])}",),
        (f"    comments and names queue() reads as written: {live['crafted_as_written']:,} of "
         f"{live['crafted_jobs']:,}",),
        (f"    live jobs the sync's stream reads as queue() does, texts aside: "
         f"{live['crafted_stream_alike']:,} of {live['live_jobs']:,}",),
        (f"    the old parser on that queue: {live['crafted_old_parser']}",),
    ]  # fmt: skip
    title = f"live queue: {live['live_jobs']:,} held jobs ({live['jobs']:,} queued) on {name}"
    print_compared(f"{title} ({version})", rows)


def live_figures(key: str, live: dict) -> dict[str, float | int | str]:
    raw, raw_before = live["raw_s"], live["raw_before_s"]
    figures: dict[str, float | int | str] = {
        f"{key}_live_queue_jobs": int(live["jobs"]),
        f"{key}_live_squeue_bytes": live["listing_bytes"],
        f"{key}_live_squeue_texts_bytes": live["listing_texts_bytes"],
        f"{key}_live_squeue_before_bytes": live["listing_before_bytes"],
        f"{key}_sync_vs_listing_ratio": round(live["cycle_s"] / raw, 2),
        f"{key}_sync_before_vs_listing_before_ratio": round(live["cycle_before_s"] / raw_before, 2),
        f"{key}_sync_before_vs_listing_ratio": round(live["cycle_before_s"] / raw, 2),
        f"{key}_sync_vs_sync_before_ratio": round(live["cycle_s"] / live["cycle_before_s"], 2),
        f"{key}_sync_status_vs_listing_ratio": round(live["cycle_status_s"] / raw, 2),
        f"{key}_sync_status_before_vs_listing_before_ratio": round(
            live["cycle_status_before_s"] / raw_before, 2
        ),
        f"{key}_listing_texts_vs_listing_ratio": round(live["raw_texts_s"] / raw, 2),
        f"{key}_sync_queries": int(live["queries"]),
        f"{key}_sync_peak_rss_mb": live["peak_rss_mb"],
        f"{key}_sync_before_peak_rss_mb": live["peak_rss_before_mb"],
        f"{key}_crafted_jobs": live["crafted_jobs"],
        f"{key}_crafted_read_as_written": live["crafted_as_written"],
        f"{key}_crafted_stream_alike": live["crafted_stream_alike"],
        f"{key}_crafted_old_parser_failed": live["crafted_old_parser_failed"],
        f"{key}_crafted_old_parser_forged_entries": live["crafted_old_parser_forged"],
        f"{key}_crafted_sync_vs_listing_ratio": round(
            live["crafted_cycle_s"] / live["crafted_raw_s"], 2
        ),
    }
    names = {
        "raw": "live_squeue_raw", "raw_texts": "live_squeue_raw_texts",
        "raw_before": "live_squeue_raw_before",
        "parse": "live_parse", "parse_texts": "live_parse_texts",
        "parse_before": "live_parse_before",
        "stream": "live_adapter_stream",
        "adapter": "live_adapter_queue", "adapter_before": "live_adapter_queue_before",
        "cycle": "live_sync_cycle", "cycle_before": "live_sync_cycle_before",
        "cycle_status": "live_sync_status", "cycle_status_before": "live_sync_status_before",
        "unchanged": "live_sync_unchanged", "unchanged_before": "live_sync_unchanged_before",
        "crafted_raw": "crafted_squeue_raw", "crafted_raw_texts": "crafted_squeue_raw_texts",
        "crafted_parse": "crafted_parse", "crafted_parse_texts": "crafted_parse_texts",
        "crafted_cycle": "crafted_sync_cycle",
    }  # fmt: skip
    for measured, figure in names.items():
        figures[f"{key}_{figure}_s"] = round(live[f"{measured}_s"], 4)
    return figures


if __name__ == "__main__":
    main()
