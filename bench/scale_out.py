"""Submissions per second with 1, 2 and 4 Celery worker processes: the work spreads.

bench/submit.py's setting (its database, alice's project with a unique Slurm account,
gunicorn, the timed runs), once for each count of worker processes
(`--worker-processes`, default 1,2,4): a Celery worker with that `--concurrency` on a
queue of its own and a fresh gunicorn (4 sync workers) that enqueues there, a few
unmeasured jobs to warm every process, then N tiny jobs timed two ways:

- end to end: `POST /api/v1/jobs/` from 4 clients at once to the last Slurm id
  recorded (what a researcher sees);
- the workers alone: N jobs created while the worker takes no task, then the time
  from resuming it to the last Slurm id recorded (what the worker processes do, with
  no web tier in front of them).

It prints each rate, its ratio to one process's, how busy the machine's cores were
and the workers' CPU per job. Every process added takes the next job while the others
wait on `sbatch`, so the rate rises with the processes until the cores are busy: on
a machine of C cores it cannot pass C / (CPU per job), and the web tier, PostgreSQL
and slurmctld share those cores.

The jobs wait in Slurm's queue and none starts: the account has `GrpJobs=0` while the
bench runs (bench/submit.py drains the partition's nodes instead, which would hold
back the jobs of anyone else using the cluster meanwhile); between the runs its jobs
are cancelled. Same database as bench/submit.py: run one at a time.

    .venv/bin/python bench/scale_out.py [--jobs 100] [--worker-processes 1,2,4]
                        [--rounds 1] [--warmup 4] [--clients 4] [--web-workers 4]

With `--rounds R` it runs the counts R times in turn and prints the medians: on a
machine others share, a burst of their work then spreads over all the counts.

Needs the dev stack (PostgreSQL, Redis and slurmctld up) and the POSIX user alice.
"""

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# Points the settings at the bench's database and sets Django up.
from bench import submit  # noqa: I001
from bench import own_database
from bench.dev_stack import account_jobs_wait, slurm, wait_for_stack

from accounts.tokens import token_create
from tests.conftest import REPO

WEB_LOG = REPO / "var" / "bench-scale-out-gunicorn.log"


def counts(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list such as 1,2,4") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("every count must be 1 or more")
    return values


def pending_in_slurm(account: str) -> int:
    pending = slurm("squeue", "--noheader", f"--account={account}", "-t", "PD", "-o", "%i")
    return len(pending.stdout.split())


def timed_runs(
    args: argparse.Namespace, processes: int, body: dict, token: str, max_jobs: int
) -> tuple[dict, dict]:
    """The end-to-end and the workers-alone run with ``processes`` worker processes."""
    account = body["project"]
    runs = []
    with submit.portal_serving(
        args, token, max_jobs=max_jobs, worker_processes=processes, web_log=WEB_LOG
    ) as (api, queue, hostname, pids):
        # Every worker process warm (its connection open, its code loaded): at least two
        # jobs each.
        warmup = max(args.warmup, 2 * processes)
        submit.portal_run(api, body, warmup, args.timeout, pids, clients=args.clients)
        submit.clear(account)
        for paused in ("", hostname):
            runs.append(
                submit.portal_run(
                    api, body, args.jobs, args.timeout, pids, clients=args.clients, paused=paused
                )
            )
            # Every job still waits in the queue: none started (and ended) meanwhile.
            if (pending := pending_in_slurm(account)) != args.jobs:
                raise SystemExit(f"{args.jobs - pending} jobs left the queue: GrpJobs=0 failed")
            submit.clear(account)
    (REPO / "var" / f"{queue}.log").unlink(missing_ok=True)
    return runs[0], runs[1]


def run(args: argparse.Namespace, account: str, workdir: Path) -> None:
    warmups = sum(max(args.warmup, 2 * n) for n in args.worker_processes)
    made = args.rounds * (warmups + 2 * args.jobs * len(args.worker_processes))
    max_jobs = submit.max_submit_jobs(made)
    _, user = submit.setup(account, max_jobs=max_jobs)
    body = submit.api_body(submit.job_request(account, workdir))
    _, token = token_create(user=user, name="bench")
    load_before = os.getloadavg()[0]
    results: dict[int, list[tuple[dict, dict]]] = {n: [] for n in args.worker_processes}
    with account_jobs_wait(account):
        # Round after round, so a burst of the machine's other work spreads over them all.
        for round_number in range(1, args.rounds + 1):
            for processes in args.worker_processes:
                results[processes].append(timed_runs(args, processes, body, token, max_jobs))
                print(f"round {round_number}: {processes} process(es) done", file=sys.stderr)
    report(args, results, load_before)


def report(
    args: argparse.Namespace, results: dict[int, list[tuple[dict, dict]]], load_before: float
) -> None:
    """Each figure the median of the rounds'."""
    cores = os.cpu_count() or 1
    base = args.worker_processes[0]

    def median(n: int, which: int, figure) -> float:
        return statistics.median(figure(runs[which]) for runs in results[n])

    def rate(n: int, which: int) -> float:
        return median(n, which, lambda run: args.jobs / run["elapsed_s"])

    print(f"{args.jobs} jobs a run, {args.rounds} round(s), medians; {cores} cores; load average")
    print(
        f"(1 min) {load_before:.2f} before, {os.getloadavg()[0]:.2f} at the end (other work too)\n"
    )
    header = (
        "worker processes",
        "end to end, jobs/s",
        f"ratio to {base}",
        "cores busy",
        "workers alone, jobs/s",
        f"ratio to {base}",
        "cores busy",
        "worker CPU/job",
    )
    rows = [
        (
            str(n),
            f"{rate(n, 0):.1f}",
            f"{rate(n, 0) / rate(base, 0):.2f}",
            f"{median(n, 0, lambda run: run['busy']):.0%}",
            f"{rate(n, 1):.1f}",
            f"{rate(n, 1) / rate(base, 1):.2f}",
            f"{median(n, 1, lambda run: run['busy']):.0%}",
            f"{median(n, 1, lambda run: run['cpu_ms']['workers']):.1f} ms",
        )
        for n in results
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)))
    figures: dict[str, object] = {"jobs": args.jobs, "rounds": args.rounds, "cores": cores}
    for n in results:
        figures[f"workers_{n}_jobs_per_s"] = round(rate(n, 0), 1)
        figures[f"workers_{n}_vs_{base}_ratio"] = round(rate(n, 0) / rate(base, 0), 2)
        figures[f"workers_{n}_alone_jobs_per_s"] = round(rate(n, 1), 1)
        figures[f"workers_{n}_alone_vs_{base}_ratio"] = round(rate(n, 1) / rate(base, 1), 2)
    figures["load_average_before"] = round(load_before, 2)
    print(json.dumps(figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100, help="timed jobs a run")
    parser.add_argument(
        "--worker-processes",
        type=counts,
        default=[1, 2, 4],
        help="e.g. 1,2,4 (ratios are to the first)",
    )
    parser.add_argument("--rounds", type=int, default=1, help="each count this often; medians")
    parser.add_argument("--warmup", type=int, default=4, help="unmeasured jobs first, each run")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--clients", type=int, default=4, help="API clients sending jobs at once")
    parser.add_argument("--web-workers", type=int, default=4, help="gunicorn sync workers")
    args = parser.parse_args()
    wait_for_stack(timeout_s=600)
    with submit.account_and_workdir() as (account, workdir):
        own_database.fresh(submit.BENCH_DATABASE, lambda: run(args, account, workdir))


if __name__ == "__main__":
    main()
