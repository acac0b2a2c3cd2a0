"""Load test: 50 simulated researchers browse, estimate and submit through the real portal
for a few minutes while beat's sync tasks run; then the books must still balance.

In a database of its own (`portal_bench_load` on 127.0.0.1:5432, dropped and
recreated at the start, dropped at the end; the dev data is never touched) it
registers the dev cluster, makes the five demo researchers (alice, bob, charlie,
pat, olga: the only POSIX logins on this machine, and a portal user's POSIX login
is unique, so these are the only portal users whose jobs can run) in three
projects with allocations, reconciled into Slurm with accounts of their own, and
gives each researcher a history of finished jobs (INSERT … SELECT, with the
accounting records and the hold, release and charge of each in the ledger, so the
books balance and the pages look lived in). The 50 simulated researchers are
sessions: simulated researcher n logs in as demo user n mod 5 with a browser session
and an access token of its own (ten people per login, as a lab sharing one account
would, each with their own tabs and scripts).

Then it starts the portal's own processes against that database: gunicorn
(sync workers on a free loopback port, DEBUG off, the API's rate limit as shipped)
and a Celery worker with beat on a task queue of its own (the tests'
`running_worker`: queue sync every second, accounting every 5 s, the submission
sweeper every 5 s, reconcile every minute), with Redis databases of their own
(broker 7, cache 8). locust runs headless on loopback for `--duration` seconds
with `--users` researchers (bench/locustfile.py says what each does: pages,
htmx partials, API list and estimate, about one tiny `true` job a minute).

At the end the load stops, the sync is left to settle (no job new, submitting,
pending or running, every job that reached Slurm charged; or `--settle`
seconds), and `manage.py check_invariants` runs against the database. It prints
per endpoint the requests, failures, 5xx answers, p50/p99 and requests per second;
the overall throughput and error rate; the p99 of page views (full HTML pages)
against the 300 ms target; and last one JSON line of the figures. It exits 1 on any
5xx answer or a failed invariant check (the p99 target is a figure, not an
assertion). Everything it started is stopped, its Slurm jobs are cancelled and its
accounts deleted, even on Ctrl-C.

    .venv/bin/python bench/load.py [--users 50] [--duration 180] [--spawn-rate 1]
                                   [--workers 4] [--history 400] [--settle 180]

Needs the dev stack (`dev/stack start`) and the demo POSIX users (`dev/stack install`).
Logs: var/bench-load-{gunicorn,access,locust}.log and the worker's var/test-*.log
(kept when something failed).
"""

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
import uuid
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from bench import own_database, web_server  # noqa: E402
from bench.cpu import cpu_s, machine_busy_s  # noqa: E402
from bench.dev_stack import slurm, wait_for_stack  # noqa: E402

BENCH_DATABASE = "portal_bench_load"
own_database.use(BENCH_DATABASE)
# Redis databases of its own: no other worker takes its tasks, its heartbeats and
# rate-limit counts stay out of the dev portal's and the tests'.
BROKER_URL = "redis://127.0.0.1:6379/7"
CACHE_URL = "redis://127.0.0.1:6379/8"
os.environ["PORTAL_BROKER_URL"] = BROKER_URL
os.environ["PORTAL_CACHE_URL"] = CACHE_URL
os.environ.setdefault("PORTAL_LOG_LEVEL", "WARNING")

import django  # noqa: E402
import httpx  # noqa: E402
import redis  # noqa: E402

django.setup()
warnings.filterwarnings("ignore", "No directory at", UserWarning)  # static files: `make up`

from django.core.management import call_command  # noqa: E402
from django.db import connection, connections  # noqa: E402
from django.db.models import Count, Q  # noqa: E402
from django.utils import timezone  # noqa: E402

from accounts.ledger import allocation_grant  # noqa: E402
from accounts.models import Allocation  # noqa: E402
from accounts.reconcile import reconcile  # noqa: E402
from accounts.services import membership_set, project_create, user_create  # noqa: E402
from accounts.tokens import token_create  # noqa: E402
from clusters.models import Cluster, Partition  # noqa: E402
from clusters.services import cluster_register, partitions_sync  # noqa: E402
from clusters.slurm import SlurmError, client_for  # noqa: E402
from jobs.models import UNFINISHED_STATES, Job  # noqa: E402
from tests.conftest import DEV_CLUSTER, running_worker  # noqa: E402

VAR = REPO / "var"
GUNICORN_LOG = VAR / "bench-load-gunicorn.log"
ACCESS_LOG = VAR / "bench-load-access.log"
LOCUST_LOG = VAR / "bench-load-locust.log"
PASSWORD = "load-pass-1234"  # noqa: S105 - demo users in a throw-away database
PAGE_P99_TARGET_MS = 300.0
# Full HTML pages, as a browser navigates to them; the rest are htmx partials,
# form posts and API calls.
PAGE_VIEWS = (
    "GET / (dashboard)",
    "GET /jobs/ (list)",
    "GET /jobs/[id]/ (job page)",
    "GET /jobs/new/ (composer)",
    "GET /projects/[slug]/",
)
POSIX_USERS = ("alice", "bob", "charlie", "pat", "olga")
# Three labs; each researcher is in two, one PI each, and PI or co-PI pages show
# every job of the project.
PROJECTS = {
    "vision": ("Vision Lab", {"alice": "pi", "bob": "co_pi", "charlie": "member", "pat": "member"}),
    "climate": ("Climate Models", {"bob": "pi", "alice": "member", "olga": "member"}),
    "protein": ("Protein Folding", {"charlie": "pi", "pat": "co_pi", "olga": "member"}),
}
GRANT_GPU_HOURS = 5000
HISTORY_DAYS = 30
# The history's Slurm job ids: far above what the dev cluster hands out, below 2**31.
HISTORY_FIRST_SLURM_ID = 1_500_000_000
SETTLED_STATES = UNFINISHED_STATES  # new, submitting, pending, running, suspended

# Job g of the history belongs to slot g % slots (a researcher in one of their
# projects) and was created evenly over the last HISTORY_DAYS, ending at least five
# hours ago (the longest limit is four); one GPU to four, 30 minutes to 4 hours.
HISTORY_SQL = (
    """
WITH slots AS (
    SELECT * FROM unnest(%(owners)s::bigint[], %(projects)s::bigint[], %(homes)s::text[])
        WITH ORDINALITY AS s(owner_id, project_id, home, n)
)
INSERT INTO jobs_job ("""
    + own_database.JOB_COLUMNS
    + """)
SELECT
    s.owner_id, s.project_id, %(cluster)s, %(partition)s, NULL,
    'train-' || g, 1, k.gpus, 8, 32, k.minutes,
    s.home || '/runs', s.home || '/runs/slurm-%%j.out', s.home || '/runs/slurm-%%j.out',
    '{"EPOCHS": "10"}'::jsonb, '', 1,
    'python train.py --epochs 10' || chr(10), %(rendered)s, gen_random_uuid(), '', 1,
    NULL, '', NULL,
    %(first_slurm_id)s + g, k.state, upper(k.state), '', k.exit_code,
    1.000, k.gpus * k.minutes * 60, k.gpus * e.elapsed,
    t.created, t.created + interval '1 second', t.created + interval '1 minute',
    t.created + interval '1 minute' + make_interval(secs => e.elapsed),
    t.created + interval '1 minute' + make_interval(secs => e.elapsed)
FROM generate_series(0, %(jobs)s - 1) AS g
JOIN slots AS s ON s.n = g %% %(slots)s + 1
CROSS JOIN LATERAL (
    SELECT now() - interval '5 hours'
           - make_interval(secs => (%(jobs)s - g) * %(spacing_s)s::double precision) AS created
) AS t
CROSS JOIN LATERAL (
    SELECT
        g %% 4 + 1 AS gpus,
        (ARRAY[30, 60, 120, 240])[g / 4 %% 4 + 1] AS minutes,
        (ARRAY['completed', 'completed', 'completed', 'completed', 'completed', 'completed',
               'failed', 'cancelled', 'timeout', 'out_of_memory'])[g / 16 %% 10 + 1] AS state,
        CASE g / 16 %% 10 WHEN 6 THEN 1 WHEN 9 THEN 0 WHEN 7 THEN NULL WHEN 8 THEN NULL
                          ELSE 0 END AS exit_code
) AS k
CROSS JOIN LATERAL (
    SELECT CASE k.state
        WHEN 'timeout' THEN k.minutes * 60
        WHEN 'failed' THEN 20 + g %% 300
        ELSE k.minutes * 60 * (20 + g * 37 %% 75) / 100
    END AS elapsed
) AS e
"""
)
EVENTS_SQL = """
INSERT INTO jobs_jobevent (job_id, at, state, detail)
SELECT id, created_at, 'new', '' FROM jobs_job
UNION ALL SELECT id, submitted_at, 'pending', 'Priority' FROM jobs_job
UNION ALL SELECT id, started_at, 'running', '' FROM jobs_job
UNION ALL SELECT id, ended_at, state, '' FROM jobs_job
"""
# What accounting ingest would have written for each of them: the record and its charge.
ACCOUNTING_SQL = """
INSERT INTO jobs_accountingrecord (
    cluster_id, slurm_job_id, array_job_id, array_task, job_id, name, "user", account,
    partition, state, exit_code, signal, allocated_gpus, elapsed_s,
    submitted_at, started_at, ended_at, comment, charged_gpu_seconds, charge_note, updated_at
)
SELECT
    j.cluster_id, j.slurm_job_id, NULL, '', j.id, j.name, u.posix_username, p.slurm_account,
    'gpu', upper(j.state), j.exit_code, NULL, j.gpus_per_node,
    extract(epoch FROM j.ended_at - j.started_at)::bigint,
    j.submitted_at, j.started_at, j.ended_at, 'portal:' || j.submit_token,
    j.used_gpu_seconds, '', j.ended_at
FROM jobs_job AS j
JOIN accounts_user AS u ON u.id = j.owner_id
JOIN accounts_project AS p ON p.id = j.project_id
"""
# The hold at creation, its release and the charge at the end, as the ledger's services
# write them (a release names no user or partition).
LEDGER_SQL = """
INSERT INTO accounts_ledgerentry (
    allocation_id, kind, gpu_seconds, reference, actor_id, reason, user_id, partition_id,
    created_at
)
SELECT a.id, e.kind, e.gpu_seconds, e.reference, NULL, '',
       CASE WHEN e.kind = 'release' THEN NULL ELSE j.owner_id END,
       CASE WHEN e.kind = 'release' THEN NULL ELSE j.partition_id END,
       e.at
FROM jobs_job AS j
JOIN accounts_allocation AS a ON a.project_id = j.project_id AND a.cluster_id = j.cluster_id
JOIN clusters_cluster AS c ON c.id = j.cluster_id
CROSS JOIN LATERAL (VALUES
    ('hold', -j.requested_gpu_seconds, 'job:' || j.submit_token, j.created_at),
    ('release', j.requested_gpu_seconds, 'job:' || j.submit_token, j.ended_at),
    ('charge', -j.used_gpu_seconds, c.name || ':' || j.slurm_job_id, j.ended_at)
) AS e(kind, gpu_seconds, reference, at)
"""
# The cached totals the services keep in the same transaction as each entry.
TOTALS_SQL = """
UPDATE accounts_allocation AS a SET
    held_gpu_seconds = -COALESCE((SELECT sum(gpu_seconds) FROM accounts_ledgerentry AS e
                                  WHERE e.allocation_id = a.id
                                    AND e.kind IN ('hold', 'release')), 0),
    used_gpu_seconds = -COALESCE((SELECT sum(gpu_seconds) FROM accounts_ledgerentry AS e
                                  WHERE e.allocation_id = a.id AND e.kind = 'charge'), 0)
"""
RENDERED = (
    "#!/bin/bash\n#SBATCH --job-name=train\n#SBATCH --partition=gpu\n"
    "#SBATCH --nodes=1\n#SBATCH --gpus-per-node=1\n#SBATCH --time=60\n"
    "python train.py --epochs 10\n"
)


class Stopped(Exception):
    """SIGTERM: unwind like Ctrl-C, so everything started is stopped."""


def _on_sigterm(_signum, _frame) -> None:
    raise Stopped


# --- the stack and Slurm ---------------------------------------------------------------


def slurm_cleanup(accounts: list[str]) -> None:
    """Cancel the run's jobs, wait for them to leave the queue, delete its accounts."""
    listed = ",".join(accounts)
    slurm("scancel", f"--account={listed}")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        queued = slurm("squeue", "--noheader", f"--account={listed}", "-o", "%i").stdout
        if not queued.split():
            break
        time.sleep(0.5)
    deadline = time.monotonic() + 120  # slurmdbd may be stopped for a moment by a fault test
    while slurm("sacctmgr", "-nP", "show", "cluster").returncode and time.monotonic() < deadline:
        time.sleep(3)
    # Slurm refuses to delete a user's default account: the users' associations go first,
    # each moving the default to another of the user's accounts (a user left with none
    # is removed from Slurm, as before the run).
    client = client_for(Cluster(name=DEV_CLUSTER, backend=Cluster.Backend.CLI))
    for account in accounts:
        try:
            for user in client.account_limits(account).users:
                client.remove_user_association(user=user, account=account)
        except SlurmError as error:
            print(f"removing the users of {account}: {error}", file=sys.stderr)
        deleted = slurm("sacctmgr", "-i", "delete", "account", account)
        if deleted.returncode != 0:
            print(f"sacctmgr delete account {account}: {deleted.stderr.strip()}", file=sys.stderr)


def redis_flush() -> None:
    for url in (BROKER_URL, CACHE_URL):
        redis.Redis.from_url(url, socket_connect_timeout=2).flushdb()


# --- the data --------------------------------------------------------------------------


def setup(
    args: argparse.Namespace, accounts: dict[str, str], workdirs: dict[str, Path]
) -> list[dict]:
    """Cluster, researchers, projects, allocations, history, Slurm; the simulated
    researchers' credentials for the locustfile."""
    call_command("migrate", verbosity=0)
    cluster = cluster_register(name=DEV_CLUSTER)
    partitions_sync(cluster=cluster)
    users = {
        posix: user_create(username=posix, password=PASSWORD, posix_username=posix)
        for posix in POSIX_USERS
    }
    today = timezone.localdate()
    projects = {}
    for key, (name, members) in PROJECTS.items():
        project = project_create(slug=accounts[key], name=name, slurm_account=accounts[key])
        for posix, role in members.items():
            membership_set(project=project, user=users[posix], role=role)
        allocation_grant(
            project=project,
            cluster=cluster,
            gpu_hours=GRANT_GPU_HOURS,
            starts_on=today - dt.timedelta(days=HISTORY_DAYS + 1),
            ends_on=today + dt.timedelta(days=60),
            actor=None,
            reason="load test",
        )
        projects[key] = project
    history_fill(cluster, users, projects, jobs_per_user=args.history)
    report = reconcile(cluster=cluster)
    if report.errors:
        raise SystemExit(f"reconcile failed: {report.errors}")

    researchers = []
    for number in range(args.users):
        posix = POSIX_USERS[number % len(POSIX_USERS)]
        _, token = token_create(user=users[posix], name=f"load researcher {number}")
        researchers.append(
            {
                "username": posix,
                "password": PASSWORD,
                "token": token,
                "projects": [
                    accounts[key] for key, (_, members) in PROJECTS.items() if posix in members
                ],
                "workdir": str(workdirs[posix]),
            }
        )
    return researchers


def history_fill(cluster: Cluster, users: dict, projects: dict, *, jobs_per_user: int) -> None:
    slots = [
        (users[posix].pk, project.pk, pwd.getpwnam(posix).pw_dir)
        for posix in POSIX_USERS
        for key, project in projects.items()
        if posix in PROJECTS[key][1]
    ]
    jobs = jobs_per_user * len(POSIX_USERS)
    if not jobs:
        return
    partition = Partition.objects.get(cluster=cluster, name="gpu")
    with connection.cursor() as cursor:
        cursor.execute(
            HISTORY_SQL,
            {
                "owners": [owner for owner, _, _ in slots],
                "projects": [project for _, project, _ in slots],
                "homes": [home for _, _, home in slots],
                "slots": len(slots),
                "cluster": cluster.pk,
                "partition": partition.pk,
                "rendered": RENDERED,
                "first_slurm_id": HISTORY_FIRST_SLURM_ID,
                "jobs": jobs,
                "spacing_s": HISTORY_DAYS * 86400 / jobs,
            },
        )
        for sql in (EVENTS_SQL, ACCOUNTING_SQL, LEDGER_SQL, TOTALS_SQL):
            cursor.execute(sql)
        cursor.execute("VACUUM ANALYZE")


def make_workdirs(run: str) -> dict[str, Path]:
    workdirs = {}
    for posix in POSIX_USERS:
        entry = pwd.getpwnam(posix)
        path = Path(entry.pw_dir) / "portal-load" / run
        path.mkdir(parents=True)
        for part in (path.parent, path):
            os.chown(part, entry.pw_uid, entry.pw_gid)
        workdirs[posix] = path
    return workdirs


def remove_workdirs(workdirs: dict[str, Path]) -> None:
    for path in workdirs.values():
        shutil.rmtree(path, ignore_errors=True)
        with contextlib.suppress(OSError):  # another run's directory may still be in it
            path.parent.rmdir()


# --- the processes ---------------------------------------------------------------------


def warm_up(url: str, researcher: dict, workers: int) -> None:
    """Every worker has its database connection, URLs and templates before the load:
    the figures are a running portal's, not a fresh deploy's first requests."""
    with httpx.Client(base_url=url, timeout=30) as http:
        http.get("/login/")
        http.post(
            "/login/",
            data={
                "username": researcher["username"],
                "password": researcher["password"],
                "csrfmiddlewaretoken": http.cookies["csrftoken"],
            },
        )
        paths = ["/", "/jobs/", "/jobs/new/", f"/projects/{researcher['projects'][0]}/",
                 "/api/v1/jobs/"]  # fmt: skip
        mine = Job.objects.filter(owner__username=researcher["username"])
        if job_id := mine.values_list("pk", flat=True).first():
            paths += [f"/jobs/{job_id}/", f"/jobs/{job_id}/output/"]
        cookies = dict(http.cookies)

    def client(_number: int) -> None:
        with httpx.Client(base_url=url, cookies=cookies, timeout=30) as http:
            for _ in range(3):
                for path in paths:
                    http.get(path).raise_for_status()

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(client, range(workers)))


def run_locust(args: argparse.Namespace, url: str, config: Path, results: Path) -> None:
    env = {**os.environ, "LOAD_CONFIG": str(config), "LOAD_RESULTS": str(results)}
    command = [
        str(Path(sys.executable).parent / "locust"), "-f", str(REPO / "bench" / "locustfile.py"),
        "--headless", "--host", url, "--users", str(args.users),
        "--spawn-rate", str(args.spawn_rate), "--run-time", f"{args.duration}s",
        "--stop-timeout", "10", "--only-summary", "--loglevel", "WARNING",
    ]  # fmt: skip
    with LOCUST_LOG.open("w") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            process.wait(timeout=args.duration + 120)
        finally:
            web_server.stop_process(process)
    if not results.exists():
        raise SystemExit(f"locust wrote no results; see {LOCUST_LOG}")


def settle(started: dt.datetime, timeout_s: float) -> tuple[float, int]:
    """Wait until no job is on its way and every job that reached Slurm is charged; the
    seconds it took and the jobs still unsettled (0 when it settled)."""
    began = time.monotonic()
    unsettled = Job.objects.filter(created_at__gte=started).filter(
        Q(state__in=SETTLED_STATES) | Q(slurm_job_id__isnull=False, used_gpu_seconds__isnull=True)
    )
    while (left := unsettled.count()) and time.monotonic() - began < timeout_s:
        time.sleep(2)
    return time.monotonic() - began, left


def check_invariants() -> tuple[bool, str]:
    done = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "check_invariants", "--cluster", DEV_CLUSTER],
        capture_output=True, text=True, check=False, cwd=REPO,
    )  # fmt: skip
    return done.returncode == 0, (done.stdout + done.stderr).strip()


# --- the figures -----------------------------------------------------------------------


def percentile(values: list[float], p: float) -> float:
    """Nearest rank: the smallest value at least p % of the values are not above."""
    ordered = sorted(values)
    return ordered[max(math.ceil(p / 100 * len(ordered)) - 1, 0)] if ordered else 0.0


def is_failure(name: str, status: int) -> bool:
    """What locust counts as a failure: no answer, an error status, or a submission or
    login that did not redirect or create."""
    if status == 0 or status >= 400:
        return True
    expected = {"POST /login/": 302, "POST /jobs/new/ (submit)": 302}
    return status != expected.get(name, status)


def figures(results: dict, workers: int) -> tuple[list[tuple], dict]:
    samples = results["samples"]
    seconds = max(results["stopped"] - results["started"], 1e-9)
    rows = []
    for name in sorted(samples):
        values = [ms for ms, _, _ in samples[name]]
        statuses = [status for _, status, _ in samples[name]]
        rows.append(
            (
                name,
                len(values),
                sum(is_failure(name, s) for s in statuses),
                sum(500 <= s < 600 for s in statuses),
                percentile(values, 50),
                percentile(values, 99),
                len(values) / seconds,
            )
        )
    page_ms = [ms for name in PAGE_VIEWS for ms, _, _ in samples.get(name, [])]
    # Once every researcher has logged in (each login is half a second of CPU).
    spawned = results.get("spawned", results["stopped"])
    steady_ms = [ms for name in PAGE_VIEWS for ms, _, at in samples.get(name, []) if at >= spawned]
    api_ms = [ms for name, rows_ in samples.items() if "/api/" in name for ms, _, _ in rows_]
    requests = sum(row[1] for row in rows)
    failures = sum(row[2] for row in rows)
    submissions = sum(row[1] - row[2] for row in rows if "(submit)" in row[0])
    summary = {
        "duration_s": round(seconds, 1),
        "requests": requests,
        "throughput_rps": round(requests / seconds, 1),
        "failures": failures,
        "error_rate": round(failures / requests, 5) if requests else 0.0,
        "http_5xx": sum(row[3] for row in rows),
        "page_views": len(page_ms),
        "page_p50_ms": round(percentile(page_ms, 50), 1),
        "page_p99_ms": round(percentile(page_ms, 99), 1),
        "page_p99_target_ms": PAGE_P99_TARGET_MS,
        "page_p99_after_logins_ms": round(percentile(steady_ms, 99), 1),
        "logins_s": round(spawned - results["started"], 1),
        "api_p99_ms": round(percentile(api_ms, 99), 1),
        "submissions": submissions,
        "gunicorn_workers": workers,
    }
    return rows, summary


def print_table(rows: list[tuple]) -> None:
    header = ("endpoint", "requests", "failures", "5xx", "p50 ms", "p99 ms", "req/s")
    width = max(len(header[0]), *(len(row[0]) for row in rows)) + 2
    print(f"{header[0]:<{width}}" + "".join(f"{h:>10}" for h in header[1:]))
    for name, count, failed, errors, p50, p99, rate in rows:
        print(
            f"{name:<{width}}{count:>10}{failed:>10}{errors:>10}"
            f"{p50:>10.1f}{p99:>10.1f}{rate:>10.2f}"
        )


# --- the run ---------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=50, help="simulated researchers")
    parser.add_argument("--duration", type=int, default=180, help="seconds of load")
    parser.add_argument("--spawn-rate", type=float, default=1, help="researchers started a second")
    parser.add_argument("--workers", type=int, default=4, help="gunicorn sync workers")
    parser.add_argument("--history", type=int, default=400, help="finished jobs per demo user")
    parser.add_argument("--settle", type=float, default=180, help="seconds to wait for the sync")
    args = parser.parse_args()
    if args.users < 1 or args.duration < 10:
        parser.error("at least one researcher for at least 10 seconds")
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with & (ignored)
    wait_for_stack(timeout_s=600)
    VAR.mkdir(exist_ok=True)

    run_id = uuid.uuid4().hex[:6]
    accounts = {key: f"l{run_id}{key[:3]}" for key in PROJECTS}
    workdirs = make_workdirs(run_id)
    redis_flush()
    outcome: dict = {}
    try:
        own_database.fresh(BENCH_DATABASE, lambda: run(args, accounts, workdirs, outcome))
    finally:
        slurm_cleanup(list(accounts.values()))
        remove_workdirs(workdirs)
        redis_flush()
    if outcome.get("failed"):
        sys.exit(1)


def run(args: argparse.Namespace, accounts: dict, workdirs: dict, outcome: dict) -> None:
    began = time.perf_counter()
    researchers = setup(args, accounts, workdirs)
    setup_s = time.perf_counter() - began
    history = Job.objects.count()
    config = VAR / f"bench-load-{os.getpid()}-config.json"
    results_file = VAR / f"bench-load-{os.getpid()}-results.json"
    config.write_text(json.dumps({"researchers": researchers}))
    load_started = timezone.now()
    load_start = os.getloadavg()[0]
    access_log = ("--access-logfile", str(ACCESS_LOG),
                  "--access-logformat", '%(t)s "%(r)s" %(s)s %(B)s %(M)sms')  # fmt: skip
    ACCESS_LOG.write_text("")
    try:
        with (
            running_worker(beat=True, PORTAL_RECONCILE_INTERVAL_S="60") as (queue, _, worker),
            web_server.serving(
                workers=args.workers, log=GUNICORN_LOG, options=access_log, PORTAL_TASK_QUEUE=queue
            ) as (url, server),
        ):
            connections.close_all()  # the portal's processes are the database's clients now
            warm_up(url, researchers[0], args.workers)
            connections.close_all()
            before = (cpu_s(server.pid), cpu_s(worker.pid), *machine_busy_s())
            run_locust(args, url, config, results_file)
            after = (cpu_s(server.pid), cpu_s(worker.pid), *machine_busy_s())
            web_server.stop_process(server)  # the load is over; the worker and beat keep syncing
            settle_s, unsettled = settle(load_started, args.settle)
            ok, report = check_invariants()
            worker_log = VAR / f"{queue}.log"
        results = json.loads(results_file.read_text())
    finally:
        config.unlink(missing_ok=True)
        results_file.unlink(missing_ok=True)

    rows, summary = figures(results, args.workers)
    web_cpu_s, worker_cpu_s, busy_s, all_s = (b - a for a, b in zip(before, after, strict=True))
    cpu = {
        "web_cpu_ms_per_request": round(web_cpu_s * 1000 / max(summary["requests"], 1), 1),
        "web_cpu_cores": round(web_cpu_s / summary["duration_s"], 2),
        "worker_cpu_cores": round(worker_cpu_s / summary["duration_s"], 2),
        "machine_busy_cores": round(busy_s / all_s * (os.cpu_count() or 1), 2),
    }
    jobs = Job.objects.filter(created_at__gte=load_started)
    by_state = dict(jobs.values_list("state").annotate(n=Count("id")).order_by("state"))
    allocations = Allocation.objects.order_by("pk")
    errors_in_log = GUNICORN_LOG.read_text().count("Internal Server Error")
    load_average = os.getloadavg()[0]

    print_table(rows)
    print()
    lines = [
        ("simulated researchers (logins shared)", f"{args.users} ({len(POSIX_USERS)})"),
        ("gunicorn sync workers / Celery processes", f"{args.workers} / 2 (+ beat)"),
        ("history jobs in the database", f"{history:,}"),
        ("setup (migrate, data, reconcile)", f"{setup_s:.1f} s"),
        ("load", f"{summary['duration_s']:.0f} s"),
        ("requests", f"{summary['requests']:,}"),
        ("throughput", f"{summary['throughput_rps']:.1f} req/s"),
        ("failures / error rate", f"{summary['failures']} / {summary['error_rate']:.3%}"),
        ("5xx answers (gunicorn log errors)", f"{summary['http_5xx']} ({errors_in_log})"),
        ("page views p50 / p99", f"{summary['page_p50_ms']:.0f} / {summary['page_p99_ms']:.0f} ms"),
        (f"  target p99 <= {PAGE_P99_TARGET_MS:.0f} ms",
         "met" if summary["page_p99_ms"] <= PAGE_P99_TARGET_MS else "MISSED"),
        (f"  p99 once all had logged in (after {summary['logins_s']:.0f} s)",
         f"{summary['page_p99_after_logins_ms']:.0f} ms"),
        ("API calls p99", f"{summary['api_p99_ms']:.0f} ms"),
        ("jobs submitted during the load", f"{summary['submissions']}"),
        ("  their states after settling", ", ".join(f"{s} {n}" for s, n in by_state.items())),
        ("settled in", f"{settle_s:.0f} s" + (f" ({unsettled} NOT settled)" if unsettled else "")),
        ("GPU-hours used / held at the end",
         ", ".join(f"{a.used_gpu_seconds / 3600:.1f} / {a.held_gpu_seconds / 3600:.2f}"
                   for a in allocations)),
        ("invariants (manage.py check_invariants)", "passed" if ok else "FAILED"),
        ("web CPU per request", f"{cpu['web_cpu_ms_per_request']:.1f} ms"),
        ("CPU cores busy: web / worker+beat / machine",
         f"{cpu['web_cpu_cores']:.2f} / {cpu['worker_cpu_cores']:.2f} / "
         f"{cpu['machine_busy_cores']:.2f} of {os.cpu_count()}"),
        ("load average (1 min) at the start / end", f"{load_start:.2f} / {load_average:.2f}"),
    ]  # fmt: skip
    width = max(len(label) for label, _ in lines) + 2
    for label, value in lines:
        print(f"{label:<{width}}{value:>30}")
    if not ok or summary["http_5xx"]:
        print()
        print(report)
        print(f"logs: {GUNICORN_LOG}, {ACCESS_LOG}, {worker_log}, {LOCUST_LOG}")
        outcome["failed"] = True
    else:
        worker_log.unlink(missing_ok=True)
    print(
        json.dumps(
            {
                "users": args.users,
                **summary,
                "history_jobs": history,
                "jobs_settled": jobs.count() - unsettled,
                "jobs_unsettled": unsettled,
                "settle_s": round(settle_s, 1),
                "invariants_ok": ok,
                **cpu,
                "load_average_1min_start": round(load_start, 2),
                "load_average_1min": round(load_average, 2),
            }
        )
    )


if __name__ == "__main__":
    try:
        main()
    except (KeyboardInterrupt, Stopped):
        sys.exit("load test stopped; what it started is stopped and cleaned up")
