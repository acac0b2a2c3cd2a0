"""Submissions through the portal with 2 Celery workers beside raw sbatch: CPU, rate, latency.

In a database of its own (`portal_bench_submit` on 127.0.0.1:5432, dropped and
recreated at the start, dropped at the end; the dev data is never touched) it
registers the dev cluster, gives a project with a unique Slurm account to the
POSIX user alice and reconciles it into Slurm, starts a real Celery worker
(`celery -A portal worker --concurrency 2`, the tests' `running_worker`: two
worker processes on a queue of their own, on the bench database) and gunicorn
(4 sync workers, `--web-workers`), and submits tiny jobs (`true`, no GPU, the debug
partition, in a fresh directory in alice's home). With `--backend rest` the workers
submit through the cluster's slurmrestd (no process per job) instead of `sbatch` run
as the user (`cli`, the default). Each run (`--runs`, medians printed after them) times:

- raw sbatch (the baseline): `sbatch --parsable` of the same script and arguments,
  run as alice through the same user switch (`runuser -u alice --`), N times one after
  the other, before and after the portal's runs;
- the portal: N `POST /api/v1/jobs/` from 4 HTTP clients at once (`--clients`; each one
  request after the other) with alice's access token, until the worker has recorded
  every job's Slurm id; the latency of each job from its POST to its Slurm id recorded
  (p50 and p95, split into waiting for a worker and the submission itself);
- the workers alone: N jobs created while the worker takes no task, then the time from
  resuming it to the last Slurm id recorded (and the worker's own time per task, from
  its log);
- the latency at light load: one client posting a job every 50 ms;
- the web tier's CPU per `GET /api/v1/me/` (any authenticated call's floor) and the
  workers' per heartbeat task (one cache write: any task's floor).

Where the time goes: the CPU seconds of each process group (this client, the web tier,
the workers with the runuser and sbatch they run, PostgreSQL — the bench database's
connections and the shared processes, not tests running beside it —, Redis, slurmctld,
slurmrestd) are read from /proc before and after each run and printed per job. Issue
24's target: the portal's CPU per job (all of them but this client) at most 2.5 times
raw sbatch's (the user switch, sbatch and slurmctld). On a machine of C cores a run that
keeps them all busy cannot go faster than C / (CPU per job), which is printed too as the
ceiling of the rate, beside how busy the machine's cores were.

No job starts while the runs are timed: the partition's nodes are drained (and
resumed at the end), so each job waits in the queue, and between the runs the
account's jobs are cancelled, so each starts with the same queue. Starting and
ending a job costs this machine more CPU than submitting it, and the jobs of one
run would otherwise be paid for by the next. At the end the account is deleted
from Slurm.

    .venv/bin/python bench/submit.py [--jobs 100] [--runs 1] [--backend cli|rest]
                                     [--warmup 4] [--clients 4] [--web-workers 4]

Needs the dev stack (`dev/stack start`: PostgreSQL, Redis, slurmctld and slurmrestd up)
and the POSIX user alice (created by `dev/stack install`).
"""

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import os
import pwd
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from bench import own_database, web_server  # noqa: E402
from bench.cpu import cpu_s, machine_busy_s, named_cpu_s  # noqa: E402
from bench.dev_stack import no_job_starts, slurm, wait_for_stack  # noqa: E402

# The worker gets the same database from the tests' running_worker.
BENCH_DATABASE = "portal_bench_submit"
own_database.use(BENCH_DATABASE)

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test import override_settings  # noqa: E402
from django.utils import timezone  # noqa: E402

from accounts.ledger import allocation_grant  # noqa: E402
from accounts.models import User  # noqa: E402
from accounts.reconcile import reconcile  # noqa: E402
from accounts.services import membership_set, project_create, user_create  # noqa: E402
from accounts.tokens import token_create  # noqa: E402
from clusters.models import Cluster  # noqa: E402
from clusters.services import cluster_register, partitions_sync  # noqa: E402
from clusters.slurm.cli import sbatch_arguments, slurm_environment  # noqa: E402
from clusters.slurm.types import SubmitRequest  # noqa: E402
from jobs.models import Job, JobEvent  # noqa: E402
from jobs.requests import JobRequest, job_prepare  # noqa: E402
from jobs.states import JobState  # noqa: E402
from jobs.submission import submit_request_for  # noqa: E402
from portal.celery import app  # noqa: E402
from portal.tasks import heartbeat_task  # noqa: E402
from tests.conftest import DEV_CLUSTER, running_worker, through_slurmrestd  # noqa: E402
from tests.slurm_accounts import DEV  # noqa: E402

USER, PARTITION = "alice", "debug"
TARGET_RATIO = 0.7
# Issue 24: the portal's CPU per submitted job at most this many times raw sbatch's.
TARGET_CPU_RATIO = 2.5
WEB_LOG = REPO / "var" / "bench-submit-gunicorn.log"


def queued(account: str) -> int:
    return len(slurm("squeue", "--noheader", f"--account={account}", "-o", "%i").stdout.split())


def clear(account: str, timeout_s: float = 60) -> None:
    """Cancel the account's jobs and wait until they have left the queue."""
    slurm("scancel", f"--account={account}")
    deadline = time.monotonic() + timeout_s
    while queued(account) and time.monotonic() < deadline:
        time.sleep(0.2)


def raw_sbatch(request: SubmitRequest) -> int:
    argv = ["runuser", "-u", request.user, "--", "sbatch", "--parsable", *sbatch_arguments(request)]
    done = subprocess.run(
        argv, input=request.script, capture_output=True, text=True, check=True,
        env=slurm_environment(), cwd="/",
    )  # fmt: skip
    return int(done.stdout.strip().split(";")[0])


@dataclasses.dataclass
class Processes:
    """The process groups whose CPU a run is charged: pids of the web tier and the worker."""

    web: int = 0
    worker: int = 0

    def cpu_s(self) -> dict[str, float]:
        return {
            # Its own and its sbatch children, not the web tier and worker it started.
            "client": cpu_s(os.getpid(), descendants=False),
            "web": cpu_s(self.web) if self.web else 0.0,
            "workers": cpu_s(self.worker) if self.worker else 0.0,
            # Its own database's connections and the shared processes, not tests' beside it.
            "postgres": named_cpu_s("postgres", database=BENCH_DATABASE),
            "slurmctld": named_cpu_s("slurmctld"),
            # Busy only with the rest backend's submissions (and idle otherwise).
            "slurmrestd": named_cpu_s("slurmrestd"),
            # The broker and cache: the task's message, the workers' pauses.
            "redis": named_cpu_s("redis-server"),
        }


def cpu_per_job_ms(before: dict[str, float], after: dict[str, float], jobs: int) -> dict:
    return {name: (after[name] - before[name]) * 1000 / jobs for name in before}


def raw_run(request: SubmitRequest, jobs: int) -> tuple[float, list[float], dict]:
    """N sbatch one after the other, each with a token of its own like the portal's."""
    latencies = []
    cpu_before = Processes().cpu_s()
    started = time.perf_counter()
    for _ in range(jobs):
        one = time.perf_counter()
        raw_sbatch(dataclasses.replace(request, comment=f"bench:{uuid.uuid4()}"))
        latencies.append(time.perf_counter() - one)
    elapsed = time.perf_counter() - started
    return elapsed, latencies, cpu_per_job_ms(cpu_before, Processes().cpu_s(), jobs)


def in_threads(client: Callable[[int], None], count: int, clients: int) -> None:
    """``client(share)`` in ``clients`` threads at once, the shares adding up to ``count``."""
    shares = [count // clients + (n < count % clients) for n in range(clients)]
    threads = [threading.Thread(target=client, args=(share,)) for share in shares]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def portal_run(
    api: httpx.Client,
    body: dict,
    jobs: int,
    timeout_s: float,
    processes: Processes,
    *,
    clients: int,
    paused: str = "",
    every_s: float = 0,
) -> dict:
    """N POST jobs/ from ``clients`` threads, each one request after the other (or, with
    ``every_s``, one each so many seconds); done when every job has its Slurm id.

    With ``paused`` (the worker's hostname) the worker takes no task until every job is
    created: the time is then the workers' alone, from resuming to the last id.
    """
    asked_at: dict[int, dt.datetime] = {}
    queue = app.conf.task_default_queue
    if paused:
        app.control.cancel_consumer(queue, destination=[paused], reply=True)
    refusals: list[str] = []

    def client(count: int) -> None:
        for _ in range(count):
            at = timezone.now()
            response = api.post("/api/v1/jobs/", json=body)
            if response.status_code != 201:
                refusals.append(f"POST jobs/ answered {response.status_code}: {response.text}")
                return
            asked_at[response.json()["id"]] = at
            time.sleep(max(0.0, every_s - (timezone.now() - at).total_seconds()))

    cpu_before = processes.cpu_s()
    busy_before = machine_busy_s()
    started = timezone.now()
    in_threads(client, jobs, clients)
    if refusals:
        raise SystemExit(refusals[0])
    created_s = (timezone.now() - started).total_seconds()
    if paused:
        started = timezone.now()
        asked_at = dict.fromkeys(asked_at, started)
        app.control.add_consumer(queue, destination=[paused], reply=True)
    pending = Job.objects.filter(pk__in=asked_at)
    deadline = time.monotonic() + timeout_s
    # The times come from the rows (submitted_at), so a slow poll loses no precision and
    # leaves the CPU to the portal.
    while pending.filter(slurm_job_id__isnull=True).exists():
        refused = pending.filter(state=JobState.SUBMIT_FAILED).first()
        if refused is not None:
            raise SystemExit(f"job {refused.pk} was refused: {refused.submit_error}")
        if time.monotonic() > deadline:
            left = pending.filter(slurm_job_id__isnull=True).count()
            raise SystemExit(f"{left} jobs had no Slurm id after {timeout_s:g} s")
        time.sleep(0.1)
    cpu = cpu_per_job_ms(cpu_before, processes.cpu_s(), jobs)
    (busy_after, total_after), (busy_at, total_at) = machine_busy_s(), busy_before
    busy, total = busy_after - busy_at, total_after - total_at
    # Every job with a Slurm id has its submitted_at: both are set by one UPDATE.
    recorded = {pk: at for pk, at in pending.values_list("pk", "submitted_at") if at is not None}
    claimed = dict(
        JobEvent.objects.filter(job__in=asked_at, state=JobState.SUBMITTING).values_list(
            "job_id", "at"
        )
    )
    elapsed_s = (max(recorded.values()) - started).total_seconds()
    return {
        "elapsed_s": elapsed_s,
        "created_s": created_s,
        "cpu_ms": cpu,
        # Every process of the machine, the jobs' slurmd included: how much of its cores.
        "busy": busy / total,
        "latencies": [(recorded[pk] - asked_at[pk]).total_seconds() for pk in asked_at],
        # Waiting for a worker, then the worker's own time (claim, sbatch, record).
        "waits": [(claimed[pk] - asked_at[pk]).total_seconds() for pk in asked_at],
        "submits": [(recorded[pk] - claimed[pk]).total_seconds() for pk in asked_at],
    }


def api_floor_ms(api: httpx.Client, processes: Processes, calls: int, *, clients: int) -> float:
    """The web tier's CPU per ``GET /api/v1/me/`` with the same token and clients as the
    jobs: what any authenticated API call costs it (gunicorn, Django, DRF, the token's
    lookup), the floor under a job's POST."""

    def client(count: int) -> None:
        for _ in range(count):
            api.get("/api/v1/me/").raise_for_status()

    before = processes.cpu_s()["web"]
    in_threads(client, calls, clients)
    return (processes.cpu_s()["web"] - before) * 1000 / calls


def task_floor_ms(queue: str, processes: Processes, tasks: int) -> float:
    """The workers' CPU per task that does next to nothing (beat's heartbeat: one cache
    write): what taking any task costs them (the message, the pool, the ack, the log
    lines), the floor under a job's submission."""
    before = processes.cpu_s()["workers"]
    for _ in range(tasks):
        heartbeat_task.apply_async(queue=queue)
    with app.connection_for_read() as connection:
        broker = connection.default_channel.client  # type: ignore[attr-defined]  # Redis
        while broker.llen(queue):
            time.sleep(0.05)
    time.sleep(0.5)  # the last ones taken are done by now
    return (processes.cpu_s()["workers"] - before) * 1000 / tasks


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[18]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=4, help="unmeasured jobs of each kind first")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument(
        "--clients", type=int, default=4, help="API clients sending the portal's jobs at once"
    )
    parser.add_argument(
        "--web-workers", type=int, default=4, help="gunicorn sync workers (its advice: 2 a core)"
    )
    parser.add_argument(
        "--backend", choices=("cli", "rest"), default="cli",
        help="how the workers submit: sbatch as the user, or slurmrestd (no process per job)",
    )  # fmt: skip
    parser.add_argument("--runs", type=int, default=1, help="runs in a row; medians printed")
    args = parser.parse_args()
    wait_for_stack(timeout_s=600)
    with account_and_workdir() as (account, workdir):
        own_database.fresh(BENCH_DATABASE, lambda: run(args, account, workdir))


@contextlib.contextmanager
def account_and_workdir() -> Iterator[tuple[str, Path]]:
    """A unique Slurm account name and a fresh directory in alice's home; afterwards the
    account's jobs are cancelled, the account is deleted from Slurm and the directory
    removed."""
    account = f"b{uuid.uuid4().hex[:10]}"
    entry = pwd.getpwnam(USER)
    workdir = Path(entry.pw_dir) / "portal-bench" / uuid.uuid4().hex[:8]
    workdir.mkdir(parents=True)
    for part in (workdir.parent, workdir):
        os.chown(part, entry.pw_uid, entry.pw_gid)
    try:
        yield account, workdir
    finally:
        clear(account, timeout_s=30)
        # Under the reconciler's lock: tests changing accounts meanwhile lose no rows.
        DEV.account_remove(account)
        shutil.rmtree(workdir, ignore_errors=True)
        with contextlib.suppress(OSError):  # another run's directory may still be in it
            workdir.parent.rmdir()


def max_submit_jobs(queued: int) -> int:
    """MaxSubmitJobs with room for the ``queued`` jobs the bench makes: Slurm's queue is
    cleared between the runs, but with no beat syncing it the portal still counts each
    run's jobs as unfinished, and it refuses a job that would pass the limit."""
    return max(settings.SLURM_MAX_SUBMIT_JOBS, queued)


def setup(account: str, *, max_jobs: int, backend: str = "cli") -> tuple[Cluster, User]:
    call_command("migrate", verbosity=0)
    cluster = cluster_register(name=DEV_CLUSTER)
    partitions_sync(cluster=cluster)
    user = user_create(username=USER, password="bench-pass-1234", posix_username=USER)  # noqa: S106
    project = project_create(slug=account, name=f"Bench {account}", slurm_account=account)
    membership_set(project=project, user=user, role="pi")
    today = timezone.localdate()
    allocation_grant(
        project=project,
        cluster=cluster,
        gpu_hours=10,
        starts_on=today - dt.timedelta(days=1),
        ends_on=today + dt.timedelta(days=30),
        actor=None,
        reason="bench",
    )
    with override_settings(SLURM_MAX_SUBMIT_JOBS=max_jobs):
        report = reconcile(cluster=cluster)
    if report.errors:
        raise SystemExit(f"reconcile failed: {report.errors}")
    if backend == "rest":
        # After the reconcile: Slurm 22.05's REST API cannot set an account's limits.
        cluster = through_slurmrestd(cluster)
    return cluster, user


def job_request(account: str, workdir: Path) -> JobRequest:
    """The bench's tiny job: `true`, no GPU, the debug partition."""
    return JobRequest(
        project=account,
        partition=PARTITION,
        name="bench",
        gpus_per_node=0,
        time_limit_minutes=1,
        working_directory=str(workdir),
        script="true\n",
    )


def api_body(request: JobRequest) -> dict:
    return {k: v for k, v in dataclasses.asdict(request).items() if v is not None}


@contextlib.contextmanager
def portal_serving(
    args: argparse.Namespace,
    token: str,
    *,
    max_jobs: int,
    worker_processes: int = 2,
    web_log: Path = WEB_LOG,
) -> Iterator[tuple[httpx.Client, str, str, Processes]]:
    """A worker (``worker_processes`` processes) and the web tier on the bench database,
    and an API client with ``token``: (client, the worker's queue and hostname, their
    processes)."""
    with (
        running_worker(concurrency=worker_processes) as (queue, hostname, worker),
        # The web tier enqueues where the worker listens; the bench's own 100 jobs a second
        # would be throttled by the API's rate limit for people.
        web_server.serving(
            workers=args.web_workers,
            log=web_log,
            PORTAL_TASK_QUEUE=queue,
            PORTAL_API_RATE="off",
            PORTAL_SLURM_MAX_SUBMIT_JOBS=str(max_jobs),
        ) as (url, web),
        httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as api,
    ):
        yield api, queue, hostname, Processes(web=web.pid, worker=worker.pid)


def run(args: argparse.Namespace, account: str, workdir: Path) -> None:
    max_jobs = max_submit_jobs(args.warmup + (2 * args.jobs + max(20, args.jobs // 4)) * args.runs)
    _, user = setup(account, max_jobs=max_jobs, backend=args.backend)
    request = job_request(account, workdir)
    # What the worker submits for such a job (the same rendered script and arguments).
    sbatch_request = submit_request_for(
        job_prepare(user=user, request=request, submit_token=str(uuid.uuid4()))
    )
    body = api_body(request)
    _, token = token_create(user=user, name="bench")
    figures = []
    with (
        no_job_starts(PARTITION),
        portal_serving(args, token, max_jobs=max_jobs) as (api, queue, hostname, processes),
    ):
        raw_run(sbatch_request, args.warmup)
        # Each web and worker process warm: its connection open, its code loaded.
        portal_run(api, body, args.warmup, args.timeout, processes, clients=args.clients)
        clear(account)
        for number in range(1, args.runs + 1):
            figures.append(
                one_run(args, account, sbatch_request, api, body, processes, hostname, queue)
            )
            print(f"--- run {number} of {args.runs}: {json.dumps(figures[-1])}", flush=True)
    if args.runs == 1:
        print_figures(args, figures[0])
    else:
        print(f"--- medians of {args.runs} runs")
        medians = {
            key: statistics.median(run[key] for run in figures)
            for key, value in figures[0].items()
            if isinstance(value, int | float)
        }
        print_figures(args, {**figures[0], **medians})
        print(json.dumps({"medians": medians}))


def one_run(
    args: argparse.Namespace,
    account: str,
    sbatch_request: SubmitRequest,
    api: httpx.Client,
    body: dict,
    processes: Processes,
    hostname: str,
    queue: str,
) -> dict:
    """Raw sbatch, the portal end to end, the workers alone, raw sbatch again: the figures."""
    load_at_start = os.getloadavg()[0]
    raw_before_s, raw_before, raw_cpu = raw_run(sbatch_request, args.jobs)
    clear(account)
    portal = portal_run(api, body, args.jobs, args.timeout, processes, clients=args.clients)
    clear(account)
    workers = portal_run(
        api, body, args.jobs, args.timeout, processes, clients=args.clients, paused=hostname
    )
    clear(account)
    # Light load: one client, a job every 50 ms (20 a second, well under what the
    # portal keeps up with): the latency of a job nobody queues behind.
    light = portal_run(
        api, body, max(20, args.jobs // 4), args.timeout, processes, clients=1, every_s=0.05
    )
    clear(account)
    api_floor = api_floor_ms(api, processes, args.jobs, clients=args.clients)
    task_floor = task_floor_ms(queue, processes, args.jobs)
    raw_after_s, raw_after, raw_cpu_after = raw_run(sbatch_request, args.jobs)
    clear(account)
    log = REPO / "var" / f"{queue}.log"
    # The worker's own measure of each task, from its log ("… succeeded in 0.05s"), emptied
    # for the next run.
    task_s = [float(t) for t in re.findall(r"succeeded in ([0-9.]+)s", log.read_text())]
    log.write_text("")

    sbatch_per_s = 2 * args.jobs / (raw_before_s + raw_after_s)
    portal_per_s = args.jobs / portal["elapsed_s"]
    raw_latencies = raw_before + raw_after
    recorded_ids = Job.objects.filter(slurm_job_id__isnull=False).values("slurm_job_id")
    # The CPU the portal's processes spend on one job (slurmrestd's too: it submits for
    # the rest backend), and so the fastest its processes could go on this machine's
    # cores even with nothing waiting on anything.
    cpu = portal["cpu_ms"]
    portal_cpu_ms = sum(v for k, v in cpu.items() if k != "client")

    def raw_mean(name: str) -> float:
        return statistics.mean(one[name] for one in (raw_cpu, raw_cpu_after))

    sbatch_cpu_ms = raw_mean("client") + raw_mean("slurmctld")
    cores = os.cpu_count() or 1
    ceiling_per_s = cores * 1000 / (portal_cpu_ms + cpu["client"])
    return {
        "backend": args.backend,
        "jobs": args.jobs,
        "load_at_start": round(load_at_start, 2),
        "load_at_end": round(os.getloadavg()[0], 2),
        "sbatch_s": [round(raw_before_s, 2), round(raw_after_s, 2)],
        "sbatch_jobs_per_s": round(sbatch_per_s, 1),
        "sbatch_p50_ms": round(statistics.median(raw_latencies) * 1000, 1),
        "sbatch_p95_ms": round(p95(raw_latencies) * 1000, 1),
        "portal_jobs_per_s": round(portal_per_s, 1),
        "portal_create_s": round(portal["created_s"], 2),
        "portal_elapsed_s": round(portal["elapsed_s"], 2),
        "portal_p50_ms": round(statistics.median(portal["latencies"]) * 1000, 1),
        "portal_p95_ms": round(p95(portal["latencies"]) * 1000, 1),
        "light_p50_ms": round(statistics.median(light["latencies"]) * 1000, 1),
        "light_p95_ms": round(p95(light["latencies"]) * 1000, 1),
        "portal_queue_wait_p50_ms": round(statistics.median(portal["waits"]) * 1000, 1),
        "portal_queue_wait_p95_ms": round(p95(portal["waits"]) * 1000, 1),
        "portal_worker_p50_ms": round(statistics.median(portal["submits"]) * 1000, 1),
        "portal_worker_p95_ms": round(p95(portal["submits"]) * 1000, 1),
        "portal_task_p50_ms": round(statistics.median(task_s) * 1000, 1),
        "portal_task_p95_ms": round(p95(task_s) * 1000, 1),
        "portal_workers_alone_s": round(workers["elapsed_s"], 2),
        "portal_workers_alone_jobs_per_s": round(args.jobs / workers["elapsed_s"], 1),
        # e.g. slurmctld was stopped
        "portal_retried_submissions": Job.objects.filter(submit_attempts__gt=1).count(),
        "portal_ids_recorded": recorded_ids.count(),
        "portal_ids_distinct": recorded_ids.distinct().count(),
        "sbatch_client_cpu_ms_per_job": round(
            statistics.mean([raw_cpu["client"], raw_cpu_after["client"]]), 2
        ),
        "sbatch_slurmctld_cpu_ms_per_job": round(
            statistics.mean([raw_cpu["slurmctld"], raw_cpu_after["slurmctld"]]), 2
        ),
        "sbatch_cpu_ms_per_job": round(sbatch_cpu_ms, 2),
        "portal_web_cpu_ms_per_job": round(cpu["web"], 2),
        "web_cpu_ms_per_api_call_floor": round(api_floor, 2),
        "workers_cpu_ms_per_task_floor": round(task_floor, 2),
        "portal_workers_cpu_ms_per_job": round(cpu["workers"], 2),
        "portal_postgres_cpu_ms_per_job": round(cpu["postgres"], 2),
        "portal_slurmctld_cpu_ms_per_job": round(cpu["slurmctld"], 2),
        "portal_slurmrestd_cpu_ms_per_job": round(cpu["slurmrestd"], 2),
        "portal_redis_cpu_ms_per_job": round(cpu["redis"], 2),
        "portal_client_cpu_ms_per_job": round(cpu["client"], 2),
        "portal_cpu_ms_per_job": round(portal_cpu_ms, 2),
        "portal_vs_sbatch_cpu_ratio": round(portal_cpu_ms / sbatch_cpu_ms, 2),
        "cpu_ratio_target": TARGET_CPU_RATIO,
        "cores": cores,
        "portal_cpu_ceiling_jobs_per_s": round(ceiling_per_s, 1),
        "portal_ceiling_vs_sbatch_ratio": round(ceiling_per_s / sbatch_per_s, 2),
        "portal_machine_busy": round(portal["busy"], 2),
        "portal_vs_sbatch_ratio": round(portal_per_s / sbatch_per_s, 2),
        "ratio_target": TARGET_RATIO,
        "workers": 2,
        "web_workers": args.web_workers,
    }


def print_figures(args: argparse.Namespace, f: dict) -> None:
    def met(value: float, target: float, *, at_most: bool) -> str:
        return "met" if (value <= target if at_most else value >= target) else "MISSED"

    cores = f["cores"]
    rows = [
        ("backend", f["backend"]),
        ("load (1 min) at start / end", f"{f['load_at_start']:.2f} / {f['load_at_end']:.2f}"),
        ("jobs per run", f"{args.jobs}"),
        ("raw sbatch, jobs/s", f"{f['sbatch_jobs_per_s']:.1f}"),
        ("raw sbatch, p50 / p95 per job",
         f"{f['sbatch_p50_ms']:.0f} / {f['sbatch_p95_ms']:.0f} ms"),
        ("portal, the create calls alone", f"{f['portal_create_s']:.2f} s"),
        ("portal, first create → last id recorded", f"{f['portal_elapsed_s']:.2f} s"),
        ("portal (2 workers), jobs/s", f"{f['portal_jobs_per_s']:.1f}"),
        (f"portal, p50 / p95 POST → Slurm id ({args.clients} clients)",
         f"{f['portal_p50_ms']:.0f} / {f['portal_p95_ms']:.0f} ms"),
        ("  POST → claimed by a worker",
         f"{f['portal_queue_wait_p50_ms']:.0f} / {f['portal_queue_wait_p95_ms']:.0f} ms"),
        ("  claimed → id recorded (the submission)",
         f"{f['portal_worker_p50_ms']:.0f} / {f['portal_worker_p95_ms']:.0f} ms"),
        ("  worker's task time (its log)",
         f"{f['portal_task_p50_ms']:.0f} / {f['portal_task_p95_ms']:.0f} ms"),
        ("portal, p50 / p95 at 20 jobs a second, 1 client",
         f"{f['light_p50_ms']:.0f} / {f['light_p95_ms']:.0f} ms"),
        ("portal, workers alone, jobs/s", f"{f['portal_workers_alone_jobs_per_s']:.1f}"),
        ("CPU per job, raw: runuser+sbatch / slurmctld",
         f"{f['sbatch_client_cpu_ms_per_job']:.1f} / "
         f"{f['sbatch_slurmctld_cpu_ms_per_job']:.1f} ms"),
        ("CPU per job, portal: web tier", f"{f['portal_web_cpu_ms_per_job']:.1f} ms"),
        ("  (web tier per GET /api/v1/me/: any call's floor)",
         f"{f['web_cpu_ms_per_api_call_floor']:.1f} ms"),
        ("  workers (with their runuser+sbatch)", f"{f['portal_workers_cpu_ms_per_job']:.1f} ms"),
        ("  (workers per heartbeat task: any task's floor)",
         f"{f['workers_cpu_ms_per_task_floor']:.1f} ms"),
        ("  PostgreSQL / Redis",
         f"{f['portal_postgres_cpu_ms_per_job']:.1f} / {f['portal_redis_cpu_ms_per_job']:.1f} ms"),
        ("  slurmctld / slurmrestd",
         f"{f['portal_slurmctld_cpu_ms_per_job']:.1f} / "
         f"{f['portal_slurmrestd_cpu_ms_per_job']:.1f} ms"),
        ("  the portal's processes in all", f"{f['portal_cpu_ms_per_job']:.1f} ms"),
        ("  the HTTP client (this process)", f"{f['portal_client_cpu_ms_per_job']:.1f} ms"),
        ("portal CPU / raw sbatch CPU per job", f"{f['portal_vs_sbatch_cpu_ratio']:.2f}"),
        (f"  CPU ratio target (<= {TARGET_CPU_RATIO:g})",
         met(f["portal_vs_sbatch_cpu_ratio"], TARGET_CPU_RATIO, at_most=True)),
        (f"  the machine's {cores} cores busy", f"{f['portal_machine_busy']:.0%}"),
        (f"  ceiling on {cores} cores: jobs/s (ratio)",
         f"{f['portal_cpu_ceiling_jobs_per_s']:.1f} ({f['portal_ceiling_vs_sbatch_ratio']:.2f})"),
        ("portal / sbatch jobs/s ratio", f"{f['portal_vs_sbatch_ratio']:.2f}"),
        (f"  ratio target (>= {TARGET_RATIO:g})",
         met(f["portal_vs_sbatch_ratio"], TARGET_RATIO, at_most=False)),
        ("portal jobs with a Slurm id / distinct ids",
         f"{f['portal_ids_recorded']} / {f['portal_ids_distinct']}"),
        ("submissions tried more than once", f"{f['portal_retried_submissions']}"),
    ]  # fmt: skip
    width = max(len(label) for label, _ in rows) + 2
    for label, value in rows:
        print(f"{label:<{width}}{value:>20}")


if __name__ == "__main__":
    main()
