"""Latency of the cluster status page, a researcher's pending jobs and a pending job's
page with 100,000 jobs in the clusters' queues and 1,000,000 in the database, beside
GET /api/v1/me/, through a real HTTP server at 8 concurrent clients; and the Slurm
commands the pages run (none may).

In a database of its own (`portal_bench_status` on 127.0.0.1:5432, dropped and
recreated at the start, dropped at the end; the dev data is never touched):

- two clusters (`alpha`, `beta`) of 300 nodes each, 8 GPUs a node (A100 and H100),
  four partitions (gpu, long, h100, debug), nodes in every state Slurm gives (most
  allocated or mixed, some idle, drained, draining, down, reserved) and two nodes
  each with GPUs allocated to no job (the stuck-GPU alert); each cluster's queue
  holds 50,000 jobs — the running ones on the nodes' GPUs, the rest pending in the
  four partitions with reasons of every family, one in twenty an array of 50 tasks.
  The status is made by ``clusters.services.cluster_status_record`` from these
  NodeInfo/QueueEntry lists, twice (as two polls of the queue sync: the second
  confirms the stuck nodes), so it is stored exactly as the sync stores it;
- 1,000,000 jobs (INSERT … SELECT generate_series) of 10 users across both clusters'
  partitions, one in ten the measured user's; the newest 50,000 are still in the
  queue, four in five pending with reasons of several families (a Dependency one
  depends on a job), each with its place among its partition's pending jobs and, when
  waiting for resources or priority, Slurm's expected start.

Then gunicorn (sync workers, DEBUG off, PORTAL_API_RATE off) serves that database and,
in rounds (each endpoint once per round, so a change in the machine's load hits all
alike), 8 client threads send:

- GET /status/ as a researcher, and as an allocation manager (nodes, stuck GPUs);
- GET /jobs/?state=pending: the first page of the user's pending jobs, explained;
- GET /jobs/<id>/: pending jobs' pages (20 of them, in turn), reason, place, start;
- GET /api/v1/status/ as a researcher and as a manager (token);
- GET /api/v1/me/ (token): the trivial endpoint, the baseline.

It reports p50/p99 of each and p99(endpoint)/p99(me) (target: within 3x). In-process
(Django's test Client) it counts, for 100 views of each page, the Slurm commands run
(the CLI client's commands and slurmrestd requests), the processes started, the Slurm
clients made and the tasks sent to the workers: all must be 0. It also counts the SQL
queries per view and the size of each page; and it checks that the HTTP run left
every cluster's stored status and probe, and every job, as they were (no worker runs).

    .venv/bin/python bench/status.py [--jobs 1000000] [--queued 50000] [--nodes 300]
                                     [--queue 50000] [--clients 8] [--workers 4]
                                     [--requests 200] [--rounds 5] [--profile]

``--profile`` prints a cProfile of one view of each page, in-process. Needs only
PostgreSQL on 127.0.0.1:5432 and Redis (the settings' cache). The server's log is
var/bench-status-gunicorn.log.
"""

import argparse
import contextlib
import cProfile
import datetime as dt
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from bench import own_database, web_server  # noqa: E402
from bench.http_load import load, percentile  # noqa: E402

BENCH_DATABASE = "portal_bench_status"
own_database.use(BENCH_DATABASE)
os.environ["PORTAL_API_RATE"] = "off"  # 8 clients flat out would be throttled at once
os.environ["PORTAL_API_ANON_RATE"] = "off"
os.environ.setdefault("PORTAL_LOG_LEVEL", "WARNING")

import django  # noqa: E402

django.setup()
warnings.filterwarnings("ignore", "No directory at", UserWarning)

from celery import Celery  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, connections  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.utils import timezone  # noqa: E402

from accounts.groups import ALLOCATION_MANAGERS  # noqa: E402
from accounts.ledger import allocation_grant  # noqa: E402
from accounts.services import membership_set, project_create, user_create  # noqa: E402
from accounts.tokens import token_create  # noqa: E402
from clusters.models import Cluster, Partition  # noqa: E402
from clusters.services import cluster_register, cluster_status_record  # noqa: E402
from clusters.slurm import SlurmError, client_for  # noqa: E402
from clusters.slurm.cli import CliClient  # noqa: E402
from clusters.slurm.rest import RestClient  # noqa: E402
from clusters.slurm.states import SlurmJobState  # noqa: E402
from clusters.slurm.types import NodeInfo, QueueEntry  # noqa: E402
from jobs.models import Job  # noqa: E402

TARGET_RATIO = 3.0
USERS = 10
CLUSTERS = ("alpha", "beta")
PARTITIONS = ("gpu", "long", "h100", "debug")
GPUS_PER_NODE = 8
ARRAY_TASKS = 10  # an array's pending record stands for this many tasks
STUCK_NODES = (5, 6)  # per cluster: GPUs allocated, no job holding them
LOG = REPO / "var" / "bench-status-gunicorn.log"
# A pending job's reasons, one of each family the job pages explain (the queue's
# entries cycle through them; squeue's descriptive form of ReqNodeNotAvail too).
REASONS = (
    "Priority",
    "Resources",
    "Priority",
    "Resources",
    "Dependency",
    "JobHeldUser",
    "JobHeldAdmin",
    "AssocGrpGRESMinutes",
    "QOSMaxGRESPerUser",
    "ReqNodeNotAvail, UnavailableNodes:gpu[0297-0300]",
    "BeginTime",
    "PartitionDown",
)
# Slurm gives a forecast start to jobs waiting for resources or priority.
FORECAST = ("Priority", "Resources")


# --- the clusters' status ---------------------------------------------------------


def node_partitions(index: int, nodes: int) -> tuple[str, ...]:
    """All nodes are in gpu; the first third also in long; the last third in h100, and
    its last 10 in debug."""
    names = ["gpu"]
    if index <= nodes // 3:
        names.append("long")
    if index > nodes - nodes // 3:
        names.append("h100")
        if index > nodes - 10:
            names.append("debug")
    return tuple(names)


def node_list(nodes: int) -> list[NodeInfo]:
    """``nodes`` nodes, in states by a fixed pattern of a hundred: 60 allocated, 25 mixed
    (half their GPUs), 8 idle, 2 drained, 2 draining, 1 down, 2 reserved or in
    maintenance."""
    listing = []
    for index in range(1, nodes + 1):
        k = index % 100
        reason, allocated = "", 0
        if k < 60:
            states, allocated = ("allocated",), GPUS_PER_NODE
        elif k < 85:
            states, allocated = ("mixed",), GPUS_PER_NODE // 2
        elif k < 93:
            states = ("idle",)
        elif k < 95:
            states, reason = ("idle", "drain"), f"ECC errors on GPU {k % 8} (ticket {4400 + index})"
        elif k < 97:
            states, allocated, reason = ("mixed", "drain"), GPUS_PER_NODE // 2, "kernel update"
        elif k < 98:
            states, reason = ("down", "not_responding"), "Not responding"
        elif k < 99:
            states, reason = ("idle", "reserved"), "maintenance window"
        else:
            states, reason = ("idle", "maint"), "firmware"
        gpu_type = "h100" if index > nodes - nodes // 3 else "a100"
        listing.append(
            NodeInfo(
                name=f"gpu{index:04d}",
                partitions=node_partitions(index, nodes),
                states=states,
                reason=reason,
                gpus_by_type=((gpu_type, GPUS_PER_NODE),),
                allocated_gpus=allocated,
                cpus=64,
                allocated_cpus=allocated * 8,
            )
        )
    return listing


def queue_list(nodes: list[NodeInfo], size: int, now: dt.datetime) -> list[QueueEntry]:
    """``size`` queue entries: jobs running on the nodes' allocated GPUs (none on the
    stuck nodes: 4-GPU jobs on a full node, 1-GPU jobs on a half-full one), the rest
    pending in the partitions, oldest and highest priority first."""
    entries: list[QueueEntry] = []
    job_id = 1_000_000

    def entry(**fields) -> QueueEntry:
        nonlocal job_id
        job_id += 1
        defaults = {
            "job_id": job_id,
            "array_job_id": None,
            "array_task": None,
            "name": f"train-{job_id}",
            "user": f"user{job_id % 200:03d}",
            "account": f"proj{job_id % 40:02d}",
            "comment": "",
            "time_limit_minutes": 1440,
        }
        return QueueEntry(**{**defaults, **fields})

    for index, node in enumerate(nodes, start=1):
        if index in STUCK_NODES or not node.allocated_gpus:
            continue
        per_job = 4 if node.allocated_gpus == GPUS_PER_NODE else 1
        for n in range(node.allocated_gpus // per_job):
            started = now - dt.timedelta(minutes=10 + (index * 7 + n) % 600)
            entries.append(
                entry(
                    partition=node.partitions[n % len(node.partitions)],
                    state=SlurmJobState.RUNNING,
                    reason="None",
                    submitted_at=started - dt.timedelta(minutes=5),
                    started_at=started,
                    gpus=per_job,
                    nodes=node.name,
                )
            )
    for n in range(size - len(entries)):
        is_array = n % 20 == 0
        entries.append(
            entry(
                array_job_id=job_id + 1 if is_array else None,
                array_task=f"[0-{ARRAY_TASKS - 1}%4]" if is_array else None,
                partition="gpu,long" if n % 50 == 1 else PARTITIONS[n % len(PARTITIONS)],
                state=SlurmJobState.PENDING,
                reason=REASONS[n % len(REASONS)],
                submitted_at=now - dt.timedelta(minutes=1 + n % 4000),
                started_at=None,
                priority=100_000 - n,
                expected_start_at=now + dt.timedelta(minutes=n // 10)
                if REASONS[n % len(REASONS)] in FORECAST
                else None,
                gpus=(1, 2, 4, 8)[n % 4],
            )
        )
    return entries


def make_clusters(args: argparse.Namespace) -> tuple[list[Cluster], dict]:
    """The clusters, their partitions and their stored status; and the figures of it."""
    clusters, figures = [], {"snapshot_s": [], "snapshot_bytes": [], "pending_records": 0}
    for name in CLUSTERS:
        cluster = cluster_register(name=name)
        # A slurmrestd nobody listens on: a Slurm call from a view would fail, not reach
        # the dev cluster (and the in-process counts would show it).
        Cluster.objects.filter(pk=cluster.pk).update(
            backend=Cluster.Backend.REST, rest_url="http://127.0.0.1:9"
        )
        cluster.refresh_from_db()
        for partition in PARTITIONS:
            Partition.objects.create(
                cluster=cluster,
                name=partition,
                is_default=partition == "gpu",
                nodes=args.nodes,
                gpus_per_node=GPUS_PER_NODE,
                gpu_type="h100" if partition in ("h100", "debug") else "",
            )
        nodes = node_list(args.nodes)
        now = timezone.now()
        queue = queue_list(nodes, args.queue, now)
        figures["pending_records"] += sum(e.state == SlurmJobState.PENDING for e in queue)
        for _ in range(2):  # two polls: the second confirms the stuck nodes
            started = time.perf_counter()
            status = cluster_status_record(cluster=cluster, nodes=nodes, queue=queue)
            figures["snapshot_s"].append(time.perf_counter() - started)
        figures["snapshot_bytes"].append(len(json.dumps(status.snapshot)))
        figures.setdefault("pending_jobs", 0)
        figures["pending_jobs"] += status.snapshot["pending_jobs"]
        figures.setdefault("stuck_nodes", 0)
        figures["stuck_nodes"] += len(status.snapshot["stuck"]["nodes"])
        clusters.append(cluster)
    return clusters, figures


# --- the jobs ---------------------------------------------------------------------

# Job g (0-based) belongs to user g % users (the measured one is user 0), runs on
# cluster (g / users) % 2 in one of its four partitions, and was made g seconds after
# now - jobs seconds. The newest ``queued`` are in the queue: four in five pending.
FILL_SQL = (
    """
INSERT INTO jobs_job ("""
    + own_database.JOB_COLUMNS
    + """, expected_start_at, queue_place)
SELECT
    (%(owners)s::bigint[])[g %% %(users)s + 1], %(project)s,
    (%(clusters)s::bigint[])[c.ci + 1], (%(partitions)s::bigint[])[c.ci * 4 + c.pi + 1], NULL,
    'train-' || g, 1, (ARRAY[1, 2, 4, 8])[g %% 4 + 1], 8, 32, 1440,
    '/home/bench/runs', '/home/bench/runs/slurm-%%j.out', '/home/bench/runs/slurm-%%j.out',
    '{"EPOCHS": "10"}'::jsonb, '', 1,
    'python train.py --epochs 10' || chr(10), %(rendered)s, md5(g::text)::uuid, '', 1,
    NULL, '', NULL,
    g + 1, s.state, upper(s.state), s.reason, s.exit_code,
    1.000, 86400, s.used,
    t.created, t.created + interval '1 second', s.started, s.ended, t.created,
    NULL, NULL
FROM generate_series(0, %(jobs)s - 1) AS g
CROSS JOIN LATERAL (
    SELECT (g / %(users)s) %% 2 AS ci, (g / (%(users)s * 2)) %% 4 AS pi,
           g >= %(jobs)s - %(queued)s AS queued, (g / %(users)s) %% 5 = 4 AS runs
) AS c
CROSS JOIN LATERAL (
    SELECT %(now)s::timestamptz - make_interval(secs => %(jobs)s - g) AS created
) AS t
CROSS JOIN LATERAL (
    SELECT
        CASE WHEN c.queued THEN (CASE WHEN c.runs THEN 'running' ELSE 'pending' END)
             ELSE (ARRAY['completed', 'completed', 'completed', 'completed', 'completed',
                         'completed', 'failed', 'cancelled', 'timeout', 'out_of_memory'])
                  [g / %(users)s %% 10 + 1] END AS state,
        CASE WHEN c.queued AND NOT c.runs
             THEN (%(reasons)s::text[])[(g / %(users)s) %% %(reason_count)s + 1]
             ELSE '' END AS reason,
        CASE WHEN NOT c.queued THEN (g / %(users)s %% 10 >= 6)::int END AS exit_code,
        CASE WHEN NOT c.queued THEN 600 END AS used,
        CASE WHEN NOT c.queued OR c.runs THEN t.created + interval '1 minute' END AS started,
        CASE WHEN NOT c.queued THEN t.created + interval '11 minutes' END AS ended
) AS s
"""
)
# Each pending job's place among its partition's pending jobs (oldest first, as equal
# priorities are), and a forecast start for those waiting for resources or priority.
PLACES_SQL = """
UPDATE jobs_job AS j
SET queue_place = r.place,
    expected_start_at = CASE WHEN j.reason = ANY(%(forecast)s)
                             THEN %(now)s::timestamptz + r.place * interval '20 seconds' END
FROM (
    SELECT id, row_number() OVER (PARTITION BY cluster_id, partition_id ORDER BY id) AS place
    FROM jobs_job WHERE state = 'pending'
) AS r
WHERE j.id = r.id
"""
# A pending job waiting on a dependency depends on its owner's job before it.
DEPENDENCIES_SQL = """
INSERT INTO jobs_job_depends_on (from_job_id, to_job_id)
SELECT j.id, j.id - %(users)s FROM jobs_job AS j
WHERE j.state = 'pending' AND j.reason = 'Dependency'
"""
RENDERED = (
    "#!/bin/bash\n#SBATCH --job-name=train\n#SBATCH --account=bench\n#SBATCH --partition=gpu\n"
    "#SBATCH --nodes=1\n#SBATCH --gpus-per-node=1\n#SBATCH --time=1440\n"
    "#SBATCH --chdir=/home/bench/runs\n#SBATCH --output=/home/bench/runs/slurm-%j.out\n"
    "python train.py --epochs 10\n"
)


def fill(args: argparse.Namespace, clusters: list[Cluster]) -> dict:
    """The users, the project and its allocations, the jobs; the readers' credentials."""
    project = project_create(slug="bench", name="Bench", slurm_account="bench")
    owners = []
    for n in range(USERS):
        user = user_create(
            username=f"bench{n}",
            password="bench-pass-1234",  # noqa: S106
            posix_username=f"bench{n}",
        )
        membership_set(project=project, user=user, role="member")
        owners.append(user)
    manager = user_create(
        username="manny",
        password="bench-pass-1234",  # noqa: S106
        is_staff=True,
        groups=(ALLOCATION_MANAGERS,),
    )
    today = timezone.localdate()
    for cluster in clusters:
        allocation_grant(
            project=project, cluster=cluster, gpu_hours=1_000_000, starts_on=today,
            ends_on=today + dt.timedelta(days=365), actor=manager, reason="bench",
        )  # fmt: skip
    partitions = [
        Partition.objects.get(cluster=cluster, name=name).pk
        for cluster in clusters
        for name in PARTITIONS
    ]
    now = timezone.now()
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            FILL_SQL,
            {
                "owners": [user.pk for user in owners],
                "users": USERS,
                "project": project.pk,
                "clusters": [cluster.pk for cluster in clusters],
                "partitions": partitions,
                "rendered": RENDERED,
                "jobs": args.jobs,
                "queued": args.queued,
                "now": now,
                "reasons": list(REASONS),
                "reason_count": len(REASONS),
            },
        )
        cursor.execute(PLACES_SQL, {"forecast": list(FORECAST), "now": now})
        cursor.execute(DEPENDENCIES_SQL, {"users": USERS})
        cursor.execute("VACUUM ANALYZE")  # visibility map and statistics: no autovacuum mid-run
    fill_s = time.perf_counter() - started

    def session(user) -> dict[str, str]:
        client = Client()
        client.force_login(user)
        return {name: morsel.value for name, morsel in client.cookies.items()}

    def bearer(user) -> dict[str, str]:
        return {"Authorization": f"Bearer {token_create(user=user, name='bench')[1]}"}

    researcher = owners[0]
    pending = Job.objects.filter(owner=researcher, state=Job.State.PENDING)
    # One pending job of each reason, then more, newest first: 20 job pages in turn.
    shown: dict[str, int] = {}
    for job_id, reason in pending.order_by("-created_at").values_list("id", "reason")[:2000]:
        shown.setdefault(reason, job_id)
    more = pending.exclude(pk__in=shown.values()).order_by("-created_at")
    job_ids = [*shown.values(), *more.values_list("id", flat=True)[: 20 - len(shown)]]
    return {
        "fill_s": fill_s,
        "researcher": {"cookies": session(researcher), "headers": bearer(researcher)},
        "manager": {"cookies": session(manager), "headers": bearer(manager)},
        "job_ids": job_ids,
        "user_jobs": Job.objects.filter(owner=researcher).count(),
        "user_pending": pending.count(),
        "with_forecast": pending.filter(expected_start_at__isnull=False).count(),
    }


# --- in-process: Slurm calls, queries, size, profile ------------------------------


@contextlib.contextmanager
def slurm_counted() -> Iterator[Counter]:
    """Counts, while it is open, every Slurm command (the CLI client's), slurmrestd
    request, process started, Slurm client made and task sent to the workers."""
    counts: Counter = Counter()
    patched = []

    def count(owner: object, name: str, what: str) -> None:
        real = getattr(owner, name)

        def counting(*args, **kwargs):
            counts[what] += 1
            return real(*args, **kwargs)

        patched.append((owner, name, real))
        setattr(owner, name, counting)

    count(CliClient, "_run", "slurm_commands")
    count(RestClient, "_send", "slurmrestd_requests")
    count(CliClient, "__init__", "slurm_clients_made")
    count(RestClient, "__init__", "slurm_clients_made")
    count(subprocess, "Popen", "processes_started")
    count(Celery, "send_task", "tasks_sent")
    try:
        yield counts
    finally:
        for owner, name, real in reversed(patched):
            setattr(owner, name, real)


def counter_counts(cluster: Cluster) -> None:
    """The counter sees a Slurm call and a process when there is one (else its zeros
    would prove nothing): a ping of the cluster's (unreachable) slurmrestd, a `true`."""
    with slurm_counted() as counts:
        with contextlib.suppress(SlurmError):
            client_for(cluster, timeout_s=2).ping()
        subprocess.run(["true"], check=True)
    expected = {"slurm_clients_made": 1, "processes_started": 1}
    assert counts["slurmrestd_requests"] >= 1, counts
    assert {k: counts[k] for k in expected} == expected, counts


def in_process(endpoints: list[dict], *, views: int, profile: bool) -> dict[str, dict]:
    """Per endpoint: queries of one view, the size of its body, what ``views`` views of
    it ran of Slurm (``slurm_counted``); with ``profile``, a cProfile of one view."""
    found: dict[str, dict] = {}
    for endpoint in endpoints:
        client = Client(HTTP_HOST="127.0.0.1", headers=endpoint["headers"])
        client.cookies.load(endpoint["cookies"])
        paths = endpoint["paths"]
        client.get(paths[0])  # a token's last use is written at most once a minute
        with CaptureQueriesContext(connection) as captured:
            response = client.get(paths[0])
        assert response.status_code == 200, (paths[0], response.status_code)
        one = {"queries": len(captured.captured_queries), "bytes": len(response.content)}
        with slurm_counted() as counts:
            for n in range(views):
                assert client.get(paths[n % len(paths)]).status_code == 200
        one["slurm"] = dict(counts)
        if profile:
            profiler = cProfile.Profile()
            profiler.runcall(client.get, paths[0])
            out = io.StringIO()
            stats = pstats.Stats(profiler, stream=out)
            stats.sort_stats("cumulative").print_stats(f"^{REPO}/", 20)  # the portal's own
            stats.sort_stats("tottime").print_stats(20)
            one["profile"] = out.getvalue()
        found[endpoint["name"]] = one
    return found


def stored_state() -> tuple:
    """What a worker would change: each cluster's stored status and probe, the jobs."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT cluster_id, taken_at, md5(snapshot::text), error FROM clusters_clusterstatus "
            "ORDER BY cluster_id"
        )
        statuses = cursor.fetchall()
        cursor.execute("SELECT count(*) FROM clusters_clusterprobe")
        probes = cursor.fetchone()
        cursor.execute(
            "SELECT count(*), max(updated_at), sum(coalesce(queue_place, 0)) FROM jobs_job"
        )
        jobs = cursor.fetchone()
        cursor.execute("SELECT count(*) FROM jobs_jobevent")
        events = cursor.fetchone()
    return statuses, probes, jobs, events


# --- the run ----------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000, help="in the database")
    parser.add_argument("--queued", type=int, default=50_000, help="of them still queued")
    parser.add_argument("--nodes", type=int, default=300, help="per cluster")
    parser.add_argument("--queue", type=int, default=50_000, help="queue entries per cluster")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--workers", type=int, default=4, help="gunicorn sync workers")
    parser.add_argument("--requests", type=int, default=200, help="per endpoint and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--views", type=int, default=100, help="in-process, per page")
    parser.add_argument("--profile", action="store_true", help="print a profile of each page")
    args = parser.parse_args()
    if args.queued > args.jobs or args.queued < 20 * USERS * len(REASONS):
        parser.error("--queued must leave the user pending jobs of every reason")
    if args.nodes < 100:
        parser.error("--nodes must be at least 100 (the states repeat by the hundred)")
    own_database.fresh(BENCH_DATABASE, lambda: run(args))


def run(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    call_command("migrate", verbosity=0)
    migrate_s = time.perf_counter() - started
    clusters, status_figures = make_clusters(args)
    made = fill(args, clusters)
    jobs_in_db = Job.objects.count()
    researcher, manager = made["researcher"], made["manager"]
    endpoints = [
        {"name": "status page, researcher", "paths": ["/status/"], **researcher},
        {"name": "status page, manager", "paths": ["/status/"], **manager},
        {"name": "pending jobs list", "paths": ["/jobs/?state=pending"], **researcher},
        {"name": "pending job page", "paths": [f"/jobs/{i}/" for i in made["job_ids"]],
         **researcher},
        {"name": "API status, researcher", "paths": ["/api/v1/status/"], **researcher},
        {"name": "API status, manager", "paths": ["/api/v1/status/"], **manager},
        {"name": "API me (baseline)", "paths": ["/api/v1/me/"], **researcher},
    ]  # fmt: skip
    for endpoint in endpoints:
        if endpoint["paths"][0].startswith("/api/"):
            endpoint["cookies"] = {}  # scripts: the token alone
        else:
            endpoint["headers"] = {}  # browsers: the session alone
    counter_counts(clusters[0])
    found = in_process(endpoints, views=args.views, profile=args.profile)
    before = stored_state()
    connections.close_all()  # the server's workers are the database's clients from here

    latency: dict[str, list[float]] = {e["name"]: [] for e in endpoints}
    alone: dict[str, list[float]] = {e["name"]: [] for e in endpoints}
    with web_server.serving(workers=args.workers, log=LOG) as (url, _):
        # Warm up: every worker has its database connection and has run every view.
        for endpoint in endpoints:
            load(url, endpoint["paths"], clients=args.clients, requests=args.workers * 5,
                 headers=endpoint["headers"], cookies=endpoint["cookies"])  # fmt: skip
        for _ in range(args.rounds):
            for endpoint in endpoints:
                times, _ = load(
                    url, endpoint["paths"], clients=args.clients, requests=args.requests,
                    headers=endpoint["headers"], cookies=endpoint["cookies"],
                )  # fmt: skip
                latency[endpoint["name"]] += times
        for endpoint in endpoints:  # one client alone: the service time, no queueing
            alone[endpoint["name"]], _ = load(
                url, endpoint["paths"], clients=1, requests=40,
                headers=endpoint["headers"], cookies=endpoint["cookies"],
            )  # fmt: skip
    load_average = os.getloadavg()
    untouched = stored_state() == before

    baseline = "API me (baseline)"
    ms = {
        name: {
            "p50": statistics.median(values) * 1000,
            "p99": percentile(values, 99) * 1000,
            "alone": statistics.median(alone[name]) * 1000,
        }
        for name, values in latency.items()
    }
    for name in ms:
        ms[name]["ratio"] = ms[name]["p99"] / ms[baseline]["p99"]
    slurm_total = {name: sum(one["slurm"].values()) for name, one in found.items()}

    rows = [
        ("load average (1/5/15 min) at the end", " ".join(f"{x:.2f}" for x in load_average)),
        ("migrate", f"{migrate_s:.1f} s"),
        ("fill jobs (INSERT … SELECT, places, VACUUM)", f"{made['fill_s']:.1f} s"),
        ("jobs in the database", f"{jobs_in_db:,}"),
        ("  the user's / pending / with a forecast",
         f"{made['user_jobs']:,} / {made['user_pending']:,} / {made['with_forecast']:,}"),
        ("clusters, nodes each", f"{len(clusters)}, {args.nodes}"),
        ("queue entries (all clusters)", f"{args.queue * len(clusters):,}"),
        ("  pending jobs in the snapshots (tasks)", f"{status_figures['pending_jobs']:,}"),
        ("  stuck nodes in the snapshots", f"{status_figures['stuck_nodes']}"),
        ("status snapshot made and stored (a poll)",
         f"{statistics.median(status_figures['snapshot_s']) * 1000:.0f} ms"),
        ("stored snapshot, each cluster",
         f"{statistics.median(status_figures['snapshot_bytes']) / 1024:.0f} KiB"),
        ("HTTP server", f"gunicorn, {args.workers} sync workers"),
        ("concurrent clients", f"{args.clients}"),
        ("requests per endpoint", f"{args.rounds * args.requests:,} ({args.rounds} rounds)"),
        ("HTTP run left statuses, probes, jobs as they were", "yes" if untouched else "NO"),
    ]  # fmt: skip
    width = max(len(label) for label, _ in rows) + 2
    for label, value in rows:
        print(f"{label:<{width}}{value:>30}")
    print()
    header = (
        f"{'endpoint':<26}{'p50 ms':>8}{'p99 ms':>8}{'p99/me':>8}{'alone':>8}"
        f"{'queries':>9}{'KiB':>8}  Slurm per {args.views} views"
    )
    print(header)
    for name, figures in ms.items():
        one = found[name]
        slurm = ", ".join(f"{k} {v}" for k, v in sorted(one["slurm"].items())) or "0"
        print(
            f"{name:<26}{figures['p50']:>8.1f}{figures['p99']:>8.1f}{figures['ratio']:>8.2f}"
            f"{figures['alone']:>8.1f}{one['queries']:>9}{one['bytes'] / 1024:>8.1f}  {slurm}"
        )
    missed = [name for name in ms if name != baseline and ms[name]["ratio"] > TARGET_RATIO]
    print()
    print(f"target p99 <= {TARGET_RATIO:g} x the baseline's: "
          + ("met" if not missed else "MISSED by " + ", ".join(missed)))  # fmt: skip
    print("target 0 Slurm commands per 100 page views: "
          + ("met" if not any(slurm_total.values()) else "MISSED"))  # fmt: skip
    if args.profile:
        for name, one in found.items():
            print(f"\n--- profile of one view: {name}\n{one['profile']}")

    def key(name: str) -> str:
        return name.split(" (")[0].replace(",", "").replace(" ", "_").lower()

    figures: dict[str, float | int | bool] = {
        "jobs_in_db": jobs_in_db,
        "user_pending_jobs": made["user_pending"],
        "queue_entries": args.queue * len(clusters),
        "nodes": args.nodes * len(clusters),
        "clients": args.clients,
        "gunicorn_workers": args.workers,
        "requests_per_endpoint": args.rounds * args.requests,
        "snapshot_ms": round(statistics.median(status_figures["snapshot_s"]) * 1000, 1),
        "snapshot_bytes": int(statistics.median(status_figures["snapshot_bytes"])),
        "ratio_target": TARGET_RATIO,
        "untouched": untouched,
        "load_average_1min": round(load_average[0], 2),
    }
    for name, one in ms.items():
        figures[f"{key(name)}_p50_ms"] = round(one["p50"], 2)
        figures[f"{key(name)}_p99_ms"] = round(one["p99"], 2)
        figures[f"{key(name)}_vs_me_p99_ratio"] = round(one["ratio"], 2)
        figures[f"{key(name)}_queries"] = found[name]["queries"]
        figures[f"{key(name)}_bytes"] = found[name]["bytes"]
        figures[f"{key(name)}_slurm_per_{args.views}_views"] = slurm_total[name]
    print(json.dumps(figures))
    if not untouched:
        raise SystemExit("the HTTP run changed a stored status, a probe or a job")


if __name__ == "__main__":
    main()
