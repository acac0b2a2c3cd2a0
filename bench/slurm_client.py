"""Latency of the Slurm client's submit, queue listing and accounting query, per cluster.

For each dev cluster that runs (portal-dev on the host's Slurm, portal-next on the other
Debian release's) and each adapter, beside the fastest raw way to get the same fields
(measured in the same run): `sbatch --parsable`, `squeue --noheader -o` and
`sacct -P -o` with the adapter's own formats, run through the same prefixes the cli
adapter uses (and, for the rest adapter, slurmrestd's `GET /jobs` at the version the
adapter chose, with a fresh and an unchanged `update_time`).

    .venv/bin/python bench/slurm_client.py [--cluster NAME] [--queued 1000] [--accounted 1000]
                                           [--repeat 7]

Needs the dev stack and the demo data (`make up`, or `dev/stack start` and
`manage.py seed_demo`). It leaves 1,000 finished jobs in each cluster's accounting
(they are what it measures) and cancels the jobs it queued.
"""

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("PORTAL_ENV", "dev")  # benchmarks run on the dev stack

import django
import httpx

django.setup()

from django.conf import settings  # noqa: E402

from bench.dev_clusters import DevCluster, dev_clusters  # noqa: E402
from clusters.slurm.cli import sbatch_arguments  # noqa: E402
from clusters.slurm.jwt import mint_token  # noqa: E402
from clusters.slurm.parsing import FIELD_SEPARATOR, SACCT_FORMAT, SQUEUE_FORMAT  # noqa: E402
from clusters.slurm.rest import RestClient  # noqa: E402
from clusters.slurm.types import SubmitRequest  # noqa: E402

USER, ACCOUNT = "alice", "vision"
QUEUED_NAME, ACCOUNTED_NAME = "bench-queued", "bench-accounted"


def request(
    target: DevCluster, name: str, *, after_ok: tuple[int, ...] = (), script: str = "true"
) -> SubmitRequest:
    return SubmitRequest(
        user=USER,
        script=f"#!/bin/bash\n{script}\n",
        account=ACCOUNT,
        partition=target.partition,
        name=name,
        time_limit_minutes=1,
        working_directory="/tmp",
        stdout_path="/dev/null",
        stderr_path="/dev/null",
        gpus_per_node=1,
        after_ok=after_ok,
    )


def raw_sbatch(target: DevCluster, job: SubmitRequest) -> str:
    return target.output(
        ["sbatch", "--parsable", *sbatch_arguments(job)], job.script, as_user=job.user
    )


def raw_rest_jobs(target: DevCluster, rest: RestClient) -> Callable[[], object]:
    """slurmrestd's GET /jobs with a token, the JSON decoded, at the version the adapter
    chose: the floor for the rest adapter."""
    key = Path(target.cluster.jwt_key_file).read_bytes()
    token = mint_token(key=key, user="slurm", issued_at=int(time.time()), lifetime_s=600)
    client = httpx.Client(
        base_url=target.cluster.rest_url,
        headers={"X-SLURM-USER-NAME": "slurm", "X-SLURM-USER-TOKEN": token},
        timeout=60,
    )
    path = rest._slurm("/jobs")
    return lambda: client.get(path).json()


def paired_median_ms(
    first: Callable[[], object], second: Callable[[], object], repeat: int
) -> tuple[float, float]:
    timings: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeat):
        for action, into in ((first, timings[0]), (second, timings[1])):
            started = time.perf_counter()
            action()
            into.append((time.perf_counter() - started) * 1000)
    return statistics.median(timings[0]), statistics.median(timings[1])


def median_ms(action: Callable[[], object], repeat: int) -> float:
    timings = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        timings.append((time.perf_counter() - started) * 1000)
    return statistics.median(timings)


def count_jobs(target: DevCluster, name: str, since: str) -> int:
    argv = ["sacct", "-a", "-X", "-n", "-P", f"--name={name}", f"-S{since}", "-o", "State"]
    return sum(1 for line in target.output(argv).splitlines() if line == "COMPLETED")


def prepare(target: DevCluster, queued: int, accounted: int, since: str) -> int:
    """Fill accounting with finished jobs and the queue with pending ones; return the blocker."""
    name = target.cluster.name
    missing = accounted - count_jobs(target, ACCOUNTED_NAME, since)
    if missing > 0:
        print(f"{name}: submitting {missing} short jobs for accounting…", file=sys.stderr)
        for _ in range(missing):
            raw_sbatch(target, request(target, ACCOUNTED_NAME))
        deadline = time.monotonic() + 600
        while count_jobs(target, ACCOUNTED_NAME, since) < accounted:
            if time.monotonic() > deadline:
                raise SystemExit("the accounting jobs did not finish in 10 minutes")
            time.sleep(1)
    blocker = int(
        raw_sbatch(target, request(target, QUEUED_NAME, script="sleep 600")).split(";")[0]
    )
    target.output(["scontrol", "hold", str(blocker)])
    print(f"{name}: queueing {queued} pending jobs…", file=sys.stderr)
    for _ in range(queued):
        raw_sbatch(target, request(target, QUEUED_NAME, after_ok=(blocker,)))
    return blocker


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", help="one dev cluster (default: each that runs)")
    parser.add_argument("--queued", type=int, default=1000)
    parser.add_argument("--accounted", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    window_start = dt.datetime.now(dt.UTC) - dt.timedelta(hours=6)
    since = window_start.strftime("%Y-%m-%dT%H:%M:%S")
    for target in dev_clusters(args.cluster):
        blocker = prepare(target, args.queued, args.accounted, since)
        try:
            figures = measure(target, target.adapters(), blocker, window_start, since, args.repeat)
        finally:
            target.output(["scancel", f"--name={QUEUED_NAME}"])
        print_table(target, figures, args)


def measure(target, found, blocker, window_start, since, repeat) -> dict[str, float]:
    queue_argv = ["squeue", "--noheader", "--all", "--states=all", "-o", SQUEUE_FORMAT]
    # As the adapter's first read asks: with the steps (their usage), so no --allocations.
    sacct_argv = ["sacct", "--allusers", "--noheader", "--parsable2",
                  f"--delimiter={FIELD_SEPARATOR}", f"--starttime={since}", "--endtime=now",
                  f"--format={SACCT_FORMAT}"]  # fmt: skip
    pending = request(target, QUEUED_NAME, after_ok=(blocker,))
    raw = {
        "submit": lambda: raw_sbatch(target, pending),
        "queue": lambda: target.output(queue_argv),
        "accounting": lambda: target.output(sacct_argv),
    }
    figures: dict[str, float] = {
        "queued_jobs": len(target.output(queue_argv).split("\x1e")) - 1,
        "accounted_jobs": sum(  # a step's line ("12.batch") is no job
            "." not in line.split(FIELD_SEPARATOR, 1)[0]
            for line in target.output(sacct_argv).splitlines()
        ),
    }
    if "cli" in found:
        cli = found["cli"]
        adapter = {
            "submit": lambda: cli.submit(pending),
            "queue": cli.queue,
            "accounting": lambda: cli.accounting_since(window_start),
        }
        for operation in ("submit", "queue", "accounting"):
            # Interleaved with the raw command, so both see the same cluster load.
            raw_ms, cli_ms = paired_median_ms(raw[operation], adapter[operation], repeat)
            figures[f"raw_{operation}_ms"], figures[f"cli_{operation}_ms"] = raw_ms, cli_ms
    if "rest" in found:
        rest = found["rest"]

        def full_queue():
            rest._queue = None  # forget the last answer, so this is a full listing, not a 304
            return rest.queue()

        figures["rest_submit_ms"] = median_ms(lambda: rest.submit(pending), repeat)
        figures["rest_accounting_ms"] = median_ms(
            lambda: rest.accounting_since(window_start), repeat
        )
        figures["raw_rest_jobs_ms"], figures["rest_queue_full_ms"] = paired_median_ms(
            raw_rest_jobs(target, rest), full_queue, repeat
        )
        rest.queue()
        time.sleep(2)  # let the queue settle: the pending jobs stop changing
        figures["rest_queue_unchanged_ms"] = median_ms(rest.queue, repeat)
        figures["rest_queue_overhead_ratio"] = (
            figures["rest_queue_full_ms"] / figures["raw_rest_jobs_ms"]
        )
    if "cli" in found:
        figures["queue_overhead_ratio"] = figures["cli_queue_ms"] / figures["raw_queue_ms"]
        figures["accounting_overhead_ratio"] = (
            figures["cli_accounting_ms"] / figures["raw_accounting_ms"]
        )
        figures["submit_overhead_ratio"] = figures["cli_submit_ms"] / figures["raw_submit_ms"]
    return figures


def print_table(target: DevCluster, figures: dict[str, float], args) -> None:
    version = target.version()
    print(f"{target.cluster.name}, {version}: {figures['queued_jobs']} jobs queued, "
          f"{figures['accounted_jobs']} in the accounting window; median of {args.repeat}, "
          f"command timeout {settings.SLURM_COMMAND_TIMEOUT_S} s")  # fmt: skip
    print(f"{'':<14}{'submit':>10}{'queue':>10}{'accounting':>12}")
    print(f"{'raw command':<14}{figures['raw_submit_ms']:>8.1f}ms{figures['raw_queue_ms']:>8.1f}ms"
          f"{figures['raw_accounting_ms']:>10.1f}ms")  # fmt: skip
    if "cli_queue_ms" in figures:
        print(f"{'cli adapter':<14}{figures['cli_submit_ms']:>8.1f}ms"
              f"{figures['cli_queue_ms']:>8.1f}ms"
              f"{figures['cli_accounting_ms']:>10.1f}ms")  # fmt: skip
    if "rest_submit_ms" in figures:
        print(
            f"{'rest adapter':<14}{figures['rest_submit_ms']:>8.1f}ms"
            f"{figures['rest_queue_full_ms']:>8.1f}ms{figures['rest_accounting_ms']:>10.1f}ms"
        )
        print(f"{'  rest GET /jobs, raw':<28}{figures['raw_rest_jobs_ms']:>8.1f}ms")
        print(f"{'  rest queue unchanged (304)':<28}{figures['rest_queue_unchanged_ms']:>8.1f}ms")
    ratios = {k: v for k, v in figures.items() if k.endswith("_ratio")}
    for name, value in ratios.items():
        print(f"{name:<28}{value:>6.2f}")
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()}))


if __name__ == "__main__":
    main()
