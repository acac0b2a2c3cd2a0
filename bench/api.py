"""Latency of GET /api/v1/jobs/ (a page of 50) for a user with 100,000 jobs among 1,000,000,
beside GET /api/v1/me/, through a real HTTP server at 8 concurrent clients.

In a database of its own (`portal_bench_api` on 127.0.0.1:5432, dropped and
recreated at the start, dropped at the end; the dev data is never touched) it
inserts 1,000,000 jobs (INSERT … SELECT generate_series) of 10 users, one job
in ten the measured user's (100,000, interleaved in time with the others' as
real users' are), makes a bearer token for that user, and starts gunicorn
(sync workers on a free loopback port, DEBUG off, PORTAL_API_RATE=off) against
that database. Then, in rounds (each endpoint once per round, so a change in
the machine's load hits both alike), 8 client threads with the token send:

- GET /api/v1/jobs/: the first page of 50 of the user's jobs, newest first;
- GET /api/v1/me/: the trivial endpoint, the baseline (one user, few queries).

It reports p50/p99 latency and requests per second of each, and the ratio
p99(jobs)/p99(me) (target: within 3x). Then one client walks the cursor 20
pages deep, several times, and reports the latency of page 20 beside page 1
of the same walks. The queries per request are counted in-process (Django's
test Client under CaptureQueriesContext) for page 1, page 20 and other page
sizes: they must be the same number whatever the page.

It also times each endpoint from one client alone (the service time, no
queueing), and prints the plan of the page's main read (EXPLAIN ANALYZE).

    .venv/bin/python bench/api.py [--jobs 1000000] [--user-jobs 100000] [--clients 8]
                                  [--workers 4] [--requests 400] [--rounds 5] [--depth 20]
                                  [--walks 10] [--profile]  (cProfile of one page, in-process)

Needs only PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth). The
server's log is var/bench-api-gunicorn.log.
"""

import argparse
import cProfile
import datetime as dt
import io
import json
import os
import pstats
import statistics
import sys
import time
import warnings
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from bench import http_load, own_database, web_server  # noqa: E402
from bench.http_load import percentile  # noqa: E402

BENCH_DATABASE = "portal_bench_api"
BENCH_URL = own_database.url(BENCH_DATABASE)
own_database.use(BENCH_DATABASE)
os.environ["PORTAL_API_RATE"] = "off"  # 8 clients flat out would be throttled at once
os.environ["PORTAL_API_ANON_RATE"] = "off"
os.environ.setdefault("PORTAL_LOG_LEVEL", "WARNING")  # not a line per user and project made

import django  # noqa: E402
import httpx  # noqa: E402

django.setup()
# Static files are collected by `make up`; the API needs none.
warnings.filterwarnings("ignore", "No directory at", UserWarning)

from django.core.management import call_command  # noqa: E402
from django.db import connection, connections, transaction  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from accounts.models import User  # noqa: E402
from accounts.services import membership_set, project_create, user_create  # noqa: E402
from accounts.tokens import token_create  # noqa: E402
from clusters.models import Partition  # noqa: E402
from clusters.services import cluster_register  # noqa: E402
from jobs.models import Job  # noqa: E402

TARGET_RATIO = 3.0
PAGE_SIZE = 50
USERS = 10
BASE = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
LOG = REPO / "var" / "bench-api-gunicorn.log"

# Job g (0-based) belongs to user g % users (the measured one is user 0) and was
# created g seconds after BASE - jobs seconds: distinct times, as real ones are
# (the cursor pages by created_at). The last 1,000 are still queued or running.
FILL_SQL = (
    """
INSERT INTO jobs_job ("""
    + own_database.JOB_COLUMNS
    + """)
SELECT
    (%(owners)s::bigint[])[g %% %(users)s + 1], %(project)s, %(cluster)s, %(partition)s, NULL,
    'train-' || g, 1, 1, 8, 32, 60,
    '/home/bench/runs', '/home/bench/runs/slurm-%%j.out', '/home/bench/runs/slurm-%%j.out',
    '{"EPOCHS": "10"}'::jsonb, '', 1,
    'python train.py --epochs 10' || chr(10), %(rendered)s, md5(g::text)::uuid, '', 1,
    NULL, '', NULL,
    g + 1, s.state, upper(s.state), s.reason, s.exit_code,
    1.000, 3600, s.used,
    t.created, t.created + interval '1 second', s.started, s.ended, t.created
FROM generate_series(0, %(jobs)s - 1) AS g
CROSS JOIN LATERAL (
    SELECT %(base)s::timestamptz - make_interval(secs => %(jobs)s - g) AS created
) AS t
CROSS JOIN LATERAL (
    SELECT
        CASE WHEN g >= %(jobs)s - 1000 THEN (ARRAY['pending', 'running'])[g %% 2 + 1]
             ELSE (ARRAY['completed', 'completed', 'completed', 'completed', 'completed',
                         'completed', 'failed', 'cancelled', 'timeout', 'out_of_memory'])
                  [g / %(users)s %% 10 + 1] END AS state,
        CASE WHEN g >= %(jobs)s - 1000 AND g %% 2 = 0 THEN 'Priority' ELSE '' END AS reason,
        CASE WHEN g < %(jobs)s - 1000 THEN (g / %(users)s %% 10 >= 6)::int END AS exit_code,
        CASE WHEN g < %(jobs)s - 1000 THEN 600 END AS used,
        CASE WHEN g < %(jobs)s - 1000 OR g %% 2 = 1
             THEN t.created + interval '1 minute' END AS started,
        CASE WHEN g < %(jobs)s - 1000 THEN t.created + interval '11 minutes' END AS ended
) AS s
"""
)
RENDERED = (
    "#!/bin/bash\n#SBATCH --job-name=train\n#SBATCH --account=bench\n#SBATCH --partition=gpu\n"
    "#SBATCH --nodes=1\n#SBATCH --gpus-per-node=1\n#SBATCH --time=60\n"
    "#SBATCH --chdir=/home/bench/runs\n#SBATCH --output=/home/bench/runs/slurm-%j.out\n"
    "python train.py --epochs 10\n"
)


def fill(args: argparse.Namespace) -> tuple[str, float]:
    """The jobs, and a token of the user whose 100,000 they are."""
    cluster = cluster_register(name="bench")
    partition = Partition.objects.create(
        cluster=cluster, name="gpu", is_default=True, nodes=100, gpus_per_node=8
    )
    project = project_create(slug="bench", name="Bench", slurm_account="bench")
    owners = []
    for n in range(USERS):
        user = user_create(
            username=f"bench{n}",
            password="bench-pass-1234",  # noqa: S106
            posix_username=f"bench{n}",
        )
        membership_set(project=project, user=user, role="member")
        owners.append(user.pk)
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            FILL_SQL,
            {
                "owners": owners,
                "users": USERS,
                "project": project.pk,
                "cluster": cluster.pk,
                "partition": partition.pk,
                "rendered": RENDERED,
                "jobs": args.jobs,
                "base": BASE,
            },
        )
        cursor.execute("VACUUM ANALYZE")  # visibility map and statistics: no autovacuum mid-run
    fill_s = time.perf_counter() - started
    _, token = token_create(user=User.objects.get(pk=owners[0]), name="bench")
    return token, fill_s


def load(
    url: str, token: str, path: str, *, clients: int, requests: int
) -> tuple[list[float], float]:
    """``requests`` GETs of ``path`` from ``clients`` threads at once, with the token."""
    return http_load.load(
        url, path, clients=clients, requests=requests,
        headers={"Authorization": f"Bearer {token}"},
    )  # fmt: skip


def one_by_one(url: str, token: str, path: str, count: int) -> list[float]:
    """One client alone: ``count`` GETs of ``path``, one after the other (no queueing)."""
    times = []
    with httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        for _ in range(count):
            began = time.perf_counter()
            response = http.get(f"{url}{path}")
            times.append(time.perf_counter() - began)
            assert response.status_code == 200, response.text[:200]
    return times


def profile(token: str, top: int = 25) -> str:
    """cProfile of one jobs page in-process: where a request's time goes."""
    client = Client(HTTP_HOST="127.0.0.1", headers={"Authorization": f"Bearer {token}"})
    client.get("/api/v1/jobs/")
    profiler = cProfile.Profile()
    profiler.runcall(client.get, "/api/v1/jobs/")
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def walk(url: str, token: str, depth: int) -> list[float]:
    """One client following the cursor from page 1 to page ``depth``: each page's latency."""
    times = []
    with httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        following: str | None = f"{url}/api/v1/jobs/"
        for _ in range(depth):
            assert following, "fewer pages than the walk's depth"
            began = time.perf_counter()
            response = http.get(following)
            times.append(time.perf_counter() - began)
            page = response.json()
            assert response.status_code == 200 and len(page["results"]) == PAGE_SIZE, page
            following = page["next"]
    return times


def queries(token: str, depth: int) -> tuple[dict[str, int], str, list[str]]:
    """Queries per request, in-process: /me/, the jobs pages at several sizes and depths;
    and the SQL of the page's main read with its plan."""
    client = Client(HTTP_HOST="127.0.0.1", headers={"Authorization": f"Bearer {token}"})

    def counted(path: str) -> tuple[int, dict, list]:
        with CaptureQueriesContext(connection) as captured:
            response = client.get(path)
        assert response.status_code == 200, response.content[:300]
        return len(captured.captured_queries), response.json(), captured.captured_queries

    client.get("/api/v1/me/")  # the token's last-used time is written at most once a minute
    counts = {"me": counted("/api/v1/me/")[0]}
    for size in (10, PAGE_SIZE, 200):
        counts[f"jobs_page_size_{size}"] = counted(f"/api/v1/jobs/?page_size={size}")[0]
    path, page_sql = "/api/v1/jobs/", ""
    for page_number in range(1, depth + 1):
        count, page, captured = counted(path)
        counts[f"jobs_page_{page_number}"] = count
        page_sql = next(q["sql"] for q in captured if 'FROM "jobs_job"' in q["sql"])
        following = urlsplit(page["next"])
        path = f"{following.path}?{following.query}"
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {page_sql}")
        plan = [row[0] for row in cursor.fetchall()]
        transaction.set_rollback(True)
    return counts, page_sql, plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--user-jobs", type=int, default=100_000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--workers", type=int, default=4, help="gunicorn sync workers")
    parser.add_argument("--requests", type=int, default=400, help="per endpoint and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--depth", type=int, default=20, help="cursor pages to walk")
    parser.add_argument("--walks", type=int, default=10)
    parser.add_argument("--profile", action="store_true", help="print a profile of one page")
    args = parser.parse_args()
    if args.jobs != args.user_jobs * USERS:
        parser.error(f"--jobs must be {USERS} x --user-jobs (one job in {USERS} is the user's)")
    if args.user_jobs < args.depth * PAGE_SIZE:
        parser.error("the user needs at least --depth pages of jobs")

    own_database.fresh(BENCH_DATABASE, lambda: run(args))


def run(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    call_command("migrate", verbosity=0)
    migrate_s = time.perf_counter() - started
    token, fill_s = fill(args)
    jobs_in_db = Job.objects.count()
    user_jobs = Job.objects.filter(owner__username="bench0").count()
    counts, page_sql, plan = queries(token, args.depth)
    profiled = profile(token) if args.profile else ""
    connections.close_all()  # the server's workers are the database's clients from here

    with web_server.serving(workers=args.workers, log=LOG) as (url, _):
        jobs_path = "/api/v1/jobs/"
        me_path = "/api/v1/me/"
        body_bytes = len(httpx.get(f"{url}{jobs_path}", headers={
            "Authorization": f"Bearer {token}"}).content)  # fmt: skip
        # Warm up: every worker has its database connection and has run both views.
        for path in (jobs_path, me_path):
            load(url, token, path, clients=args.clients, requests=args.workers * 10)
        latency: dict[str, list[float]] = {"jobs": [], "me": []}
        wall: dict[str, float] = {"jobs": 0.0, "me": 0.0}
        for _ in range(args.rounds):
            for name, path in (("jobs", jobs_path), ("me", me_path)):
                times, seconds = load(
                    url, token, path, clients=args.clients, requests=args.requests
                )
                latency[name] += times
                wall[name] += seconds
        walks = [walk(url, token, args.depth) for _ in range(args.walks)]
        alone = {
            "jobs": one_by_one(url, token, jobs_path, args.depth * args.walks),
            "me": one_by_one(url, token, me_path, args.depth * args.walks),
        }

    ms = {
        name: {
            "p50": statistics.median(values) * 1000,
            "p99": percentile(values, 99) * 1000,
            "rps": len(values) / wall[name],
        }
        for name, values in latency.items()
    }
    ratio = ms["jobs"]["p99"] / ms["me"]["p99"]
    alone_ms = {name: statistics.median(values) * 1000 for name, values in alone.items()}
    first_page = statistics.median(w[0] for w in walks) * 1000
    last_page = statistics.median(w[-1] for w in walks) * 1000
    deep_pages = statistics.median(t for w in walks for t in w[1:]) * 1000
    job_counts = {k: v for k, v in counts.items() if k.startswith("jobs_")}
    constant = len(set(job_counts.values())) == 1
    load_average = os.getloadavg()[0]

    samples = args.rounds * args.requests
    rows = [
        ("load average (1 min) at the end", f"{load_average:.2f}"),
        ("migrate", f"{migrate_s:.2f} s"),
        ("fill (INSERT … SELECT, VACUUM ANALYZE)", f"{fill_s:.2f} s"),
        ("jobs in the database", f"{jobs_in_db:,}"),
        ("  of them the user's", f"{user_jobs:,}"),
        ("HTTP server", f"gunicorn, {args.workers} sync workers"),
        ("concurrent clients", f"{args.clients}"),
        ("requests per endpoint", f"{samples:,} ({args.rounds} rounds)"),
        (f"GET /api/v1/jobs/ (page of {PAGE_SIZE}), body", f"{body_bytes / 1024:,.1f} KiB"),
        ("  p50", f"{ms['jobs']['p50']:.1f} ms"),
        ("  p99", f"{ms['jobs']['p99']:.1f} ms"),
        ("  requests/s", f"{ms['jobs']['rps']:,.0f}"),
        ("GET /api/v1/me/ (the baseline)", ""),
        ("  p50", f"{ms['me']['p50']:.1f} ms"),
        ("  p99", f"{ms['me']['p99']:.1f} ms"),
        ("  requests/s", f"{ms['me']['rps']:,.0f}"),
        ("p99 jobs / p99 me", f"{ratio:.2f}"),
        (f"  target (<= {TARGET_RATIO:g})", "met" if ratio <= TARGET_RATIO else "MISSED"),
        ("one client alone, p50: jobs page 1 / me", ""),
        ("  GET /api/v1/jobs/", f"{alone_ms['jobs']:.1f} ms"),
        ("  GET /api/v1/me/", f"{alone_ms['me']:.1f} ms"),
        ("  ratio", f"{alone_ms['jobs'] / alone_ms['me']:.2f}"),
        (f"cursor walk, one client, median of {args.walks}", ""),
        ("  page 1", f"{first_page:.1f} ms"),
        (f"  page {args.depth}", f"{last_page:.1f} ms"),
        (f"  pages 2-{args.depth}", f"{deep_pages:.1f} ms"),
        ("SQL queries per request, /me/", f"{counts['me']}"),
        ("SQL queries per request, /jobs/", f"{sorted(set(job_counts.values()))}"),
        (f"  same for page sizes 10/50/200, pages 1-{args.depth}", "yes" if constant else "NO"),
    ]
    width = max(len(label) for label, _ in rows) + 2
    for label, value in rows:
        print(f"{label:<{width}}{value:>24}")
    print()
    print(f"the jobs page's main read at page {args.depth} (EXPLAIN ANALYZE):")
    print("  " + " ".join(page_sql.split())[:300] + "…")
    print("\n".join(f"  {line}" for line in plan))
    if profiled:
        print()
        print(profiled)
    figures: dict[str, float | int | bool] = {
        "jobs_in_db": jobs_in_db,
        "user_jobs": user_jobs,
        "clients": args.clients,
        "gunicorn_workers": args.workers,
        "requests_per_endpoint": samples,
        "jobs_p50_ms": round(ms["jobs"]["p50"], 2),
        "jobs_p99_ms": round(ms["jobs"]["p99"], 2),
        "jobs_rps": round(ms["jobs"]["rps"], 1),
        "me_p50_ms": round(ms["me"]["p50"], 2),
        "me_p99_ms": round(ms["me"]["p99"], 2),
        "me_rps": round(ms["me"]["rps"], 1),
        "jobs_vs_me_p99_ratio": round(ratio, 2),
        "ratio_target": TARGET_RATIO,
        "alone_jobs_p50_ms": round(alone_ms["jobs"], 2),
        "alone_me_p50_ms": round(alone_ms["me"], 2),
        "walk_page1_ms": round(first_page, 2),
        f"walk_page{args.depth}_ms": round(last_page, 2),
        "jobs_page_bytes": body_bytes,
        "jobs_queries_per_request": max(job_counts.values()),
        "jobs_queries_constant": constant,
        "me_queries_per_request": counts["me"],
        "load_average_1min": round(load_average, 2),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
