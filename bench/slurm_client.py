"""Latency of the Slurm client's submit, queue listing and accounting query, per cluster.

For each dev cluster that runs (portal-dev on the host's Slurm, portal-next on the other
Debian release's) and each adapter, beside the fastest raw way to get the same fields
(measured in the same run): `sbatch --parsable`, `squeue --noheader -o` and `sacct` with
the adapter's own formats, run through the same prefixes the cli adapter uses (and, for
the rest adapter, slurmrestd's `GET /jobs` at the version the adapter chose, with a
fresh and an unchanged `update_time`).

The cli adapter reads the queue two ways since issue 33: the queue sync's listing
(``queue_stream``: only the fields no user writes, a record a line) and queue()'s (the
token look-up and the invariants check: the comment and the name too, at fixed widths);
before, one listing, fields and records split by separators, served both. The queue
rows say which: "queue" is queue()'s listing with the texts, "queue_stream" the sync's.
The cli adapter's queue and accounting reads are timed now and as they were before
issue 33 (``bench/listing_before.py``), in the same rounds and on the same window: both
squeue listings vs the old one; sacct at fixed widths with ``--duplicates`` (every run)
vs ``--parsable2 --delimiter=\x1f`` (one run per job); each raw read, its parse alone,
the adapter's whole read, the records it returns, and the bytes each read moved.

    .venv/bin/python bench/slurm_client.py [--cluster NAME] [--queued 1000] [--accounted 1000]
                                           [--repeat 7]

Needs the dev stack (`make up`, or `dev/stack start`). Its jobs run as alice in an
account of their own (``benchclient``), made on each cluster when it starts and removed
when it ends: the demo data's limits (vision's MaxSubmitJobs of 1,000) and anyone's jobs
in the queue neither stop it nor are touched by it. It leaves 1,000 finished jobs in
each cluster's accounting (they are what it measures; a run within 6 hours of another
submits none) and cancels every job of its account, whatever happens (a failure, a
SIGTERM). It ends with one JSON line: each cluster's figures under its name.
"""

import argparse
import datetime as dt
import json
import math
import os
import signal
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

from bench import listing_before as before  # noqa: E402
from bench.before_after import compared_row, print_compared  # noqa: E402
from bench.dev_clusters import DevCluster, dev_clusters  # noqa: E402
from clusters.locks import association_changes  # noqa: E402
from clusters.slurm.cli import sbatch_arguments  # noqa: E402
from clusters.slurm.errors import SlurmError, SlurmOutputInvalid  # noqa: E402
from clusters.slurm.jwt import mint_token  # noqa: E402
from clusters.slurm.parsing import (  # noqa: E402
    SACCT_FORMAT,
    SACCT_RECORD_BYTES,
    SQUEUE_FORMAT,
    SQUEUE_TEXTS_FORMAT,
    parse_sacct,
    parse_squeue,
)
from clusters.slurm.rest import RestClient  # noqa: E402
from clusters.slurm.states import UNSTARTED_END_STATES  # noqa: E402
from clusters.slurm.types import (  # noqa: E402
    AccountingEntry,
    Listing,
    SubmitRequest,
    with_unstarted_ends,
)

# A demo user, in an account of the bench's own: no project's limits apply to it.
USER, ACCOUNT = "alice", "benchclient"
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


def interleaved_medians_ms(
    actions: dict[str, Callable[[], object]], repeat: int
) -> tuple[dict[str, float], dict[str, str]]:
    """Each action's median (ms), round after round, each once a round: all see the same
    cluster load. An action of the old reader (``*_before``) that cannot read what Slurm
    printed (issue 33) is said, not timed: NaN when no round could."""
    timings: dict[str, list[float]] = {name: [] for name in actions}
    unreadable: dict[str, str] = {}
    for _ in range(repeat):
        for name, action in actions.items():
            started = time.perf_counter()
            try:
                action()
            except SlurmOutputInvalid as error:
                if not name.endswith("_before"):
                    raise
                unreadable[name] = str(error)[:160]
                continue
            timings[name].append((time.perf_counter() - started) * 1000)
    medians = {name: statistics.median(v) if v else NAN for name, v in timings.items()}
    said = {
        name: f"{repeat - len(timings[name])} of {repeat} rounds could not read: {error}"
        for name, error in unreadable.items()
    }
    return medians, said


NAN = float("nan")


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


def account_add(target: DevCluster) -> None:
    """The bench's account, and alice in it, on the cluster (as the portal's reconciler
    changes associations: one writer at a time)."""
    with association_changes(target.name):
        for argv in (
            ["sacctmgr", "-i", "add", "account", ACCOUNT, f"cluster={target.name}"],
            ["sacctmgr", "-i", "add", "user", USER, f"account={ACCOUNT}", f"cluster={target.name}"],
        ):
            added = target.run(argv)
            # sacctmgr says "Nothing new added" (exit 1) for what a stopped run left.
            if added.returncode != 0 and "Nothing new added" not in added.stdout + added.stderr:
                raise SystemExit(f"{target.name}: {' '.join(argv[:4])}: {added.stderr.strip()}")


def account_remove(target: DevCluster) -> None:
    """Cancel every job of the bench's account, then remove the account."""
    target.run(["scancel", f"--account={ACCOUNT}"])
    target.account_remove(ACCOUNT)


def stopped(signum: int, _frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(f"stopped by signal {signum}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", help="one dev cluster (default: each that runs)")
    parser.add_argument("--queued", type=int, default=1000)
    parser.add_argument("--accounted", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    # A stopped run (SIGTERM) cancels its jobs and removes its account too. A second TERM
    # (timeout(1) sends one to the process and one to its group) must not cut that short.
    signal.signal(signal.SIGTERM, stopped)
    window_start = dt.datetime.now(dt.UTC) - dt.timedelta(hours=6)
    since = window_start.strftime("%Y-%m-%dT%H:%M:%S")
    every: dict[str, dict] = {}
    for target in dev_clusters(args.cluster):
        start_load = os.getloadavg()
        try:
            account_add(target)
            blocker = prepare(target, args.queued, args.accounted, since)
            figures = measure(target, target.adapters(), blocker, window_start, since, args.repeat)
        finally:
            account_remove(target)
        load = os.getloadavg()
        figures["load_average_1min_start"], figures["load_average_1min_end"] = (
            start_load[0],
            load[0],
        )
        print_table(target, figures, args)
        every[target.name] = {name: json_value(value) for name, value in figures.items()}
    print(json.dumps(every))


def sacct_argv(since: str, *selection: str, steps: bool = False) -> list[str]:
    """The cli adapter's sacct command line (``CliClient._accounting``): every run
    (``--duplicates``), every field at its fixed width."""
    only_jobs = [] if steps else ["--allocations"]
    return ["sacct", *selection, *only_jobs, "--duplicates", "--noheader",
            f"--starttime={since}", "--endtime=now", f"--format={SACCT_FORMAT}"]  # fmt: skip


def squeue_argv(*selection: str, texts: bool) -> list[str]:
    """The cli adapter's squeue command line (``CliClient._squeue_stream``): queue()'s
    with the texts, the queue sync's (``queue_stream``) without."""
    layout = SQUEUE_TEXTS_FORMAT if texts else SQUEUE_FORMAT
    return ["squeue", "--noheader", "--all", "--states=all", *selection, "-o", layout]


def read_stream(cli, *selection: str) -> list:
    """The queue sync's read (``CliClient.queue_stream``, of the jobs ``selection``
    picks), to its end."""
    with cli._squeue_stream(*selection, texts=False) as listing:
        return list(listing)


UNSTARTED = f"--state={','.join(UNSTARTED_END_STATES)}"
# What the before-and-after comparison reads: the cluster's whole queue and accounting
# window (what the adapter reads), and the bench's own jobs alone. The old listings
# cannot be read while anyone's job with their separators in its name is queued or in
# the window (issue 33: on the shared dev stack, other tests' jobs): its own jobs give
# the before figures then, both ways read alike.
SCOPES = {
    "all": ((), ()),
    "own": ((f"--name={QUEUED_NAME}",), (f"--name={ACCOUNTED_NAME}",)),
}


def measure(target, found, blocker, window_start, since, repeat) -> dict:
    pending = request(target, QUEUED_NAME, after_ok=(blocker,))
    raw = {
        "submit": lambda: raw_sbatch(target, pending),
        "queue": lambda: target.raw_output(squeue_argv(texts=True)),
        "queue_stream": lambda: target.raw_output(squeue_argv(texts=False)),
        # As the adapter's first read asks: with the steps (their usage), no --allocations.
        "accounting": lambda: target.raw_output(sacct_argv(since, "--allusers", steps=True)),
    }
    figures: dict = {"queued_jobs": len(parse_squeue(raw["queue"]()))}
    if "cli" in found:
        cli = found["cli"]
        adapter = {
            "submit": lambda: cli.submit(pending),
            "queue": cli.queue,
            "queue_stream": lambda: read_stream(cli),
            "accounting": lambda: cli.accounting_since(window_start),
        }
        for operation in ("submit", "queue", "queue_stream", "accounting"):
            # Interleaved with the raw command, so both see the same cluster load.
            raw_ms, cli_ms = paired_median_ms(raw[operation], adapter[operation], repeat)
            figures[f"raw_{operation}_ms"], figures[f"cli_{operation}_ms"] = raw_ms, cli_ms
        for scope, (queue_selection, sacct_selection) in SCOPES.items():
            figures |= {
                f"{scope}_{name}": value
                for name, value in before_and_after(
                    target, cli, window_start, since, queue_selection, sacct_selection, repeat
                ).items()
            }
    if "rest" in found:
        try:
            figures |= measure_rest(target, found["rest"], pending, window_start, repeat)
        except SlurmError as error:  # said, and the cli adapter's figures still printed
            figures["rest_error"] = str(error)
    if "cli" in found:
        figures["queue_overhead_ratio"] = figures["cli_queue_ms"] / figures["raw_queue_ms"]
        figures["queue_stream_overhead_ratio"] = (
            figures["cli_queue_stream_ms"] / figures["raw_queue_stream_ms"]
        )
        figures["accounting_overhead_ratio"] = (
            figures["cli_accounting_ms"] / figures["raw_accounting_ms"]
        )
        figures["submit_overhead_ratio"] = figures["cli_submit_ms"] / figures["raw_submit_ms"]
    return figures


def measure_rest(target, rest, pending, window_start, repeat) -> dict:
    """The rest adapter's submit, queue and accounting, beside slurmrestd's raw GET /jobs."""
    figures: dict = {}

    def full_queue():
        rest._queue = None  # forget the last answer, so this is a full listing, not a 304
        return rest.queue()

    figures["rest_submit_ms"] = median_ms(lambda: rest.submit(pending), repeat)
    figures["rest_accounting_ms"] = median_ms(lambda: rest.accounting_since(window_start), repeat)
    figures["raw_rest_jobs_ms"], figures["rest_queue_full_ms"] = paired_median_ms(
        raw_rest_jobs(target, rest), full_queue, repeat
    )
    rest.queue()
    time.sleep(2)  # let the queue settle: the pending jobs stop changing
    figures["rest_queue_unchanged_ms"] = median_ms(rest.queue, repeat)
    figures["rest_queue_overhead_ratio"] = (
        figures["rest_queue_full_ms"] / figures["raw_rest_jobs_ms"]
    )
    return figures


def accounting_since(cli, since: dt.datetime, *selection: str) -> Listing[AccountingEntry]:
    """``CliClient.accounting_since`` of the jobs ``selection`` picks (sacct's options):
    its two reads, merged as it merges them."""
    return with_unstarted_ends(
        cli._accounting(since, "--allusers", *selection, steps=True),
        cli._accounting(since, "--allusers", *selection, UNSTARTED),
    )


def before_and_after(
    target: DevCluster,
    cli,
    window_start: dt.datetime,
    since: str,
    queue_selection: tuple[str, ...],
    sacct_selection: tuple[str, ...],
    repeat: int,
) -> dict:
    """The cli adapter's queue and accounting reads now and before issue 33, in the same
    rounds, of the same jobs: each raw read, its parse alone, the adapter's whole read
    (squeue streamed and parsed: queue()'s listing with the texts, ``queue``, and the
    sync's, ``queue_stream``; sacct's two reads, parsed and merged), what each read moved
    (bytes, sacct's lines) and the records it gave. A figure of the old reader that
    cannot read what the cluster printed is NaN, and why is said (``*_unreadable``)."""
    argv = {
        "queue": squeue_argv(*queue_selection, texts=True),
        "queue_stream": squeue_argv(*queue_selection, texts=False),
        "queue_before": before.squeue_argv(*queue_selection),
        "accounting": sacct_argv(since, "--allusers", *sacct_selection, steps=True),
        "accounting_before": before.sacct_argv(since, "--allusers", *sacct_selection, steps=True),
        "unstarted": sacct_argv(since, "--allusers", *sacct_selection, UNSTARTED),
        "unstarted_before": before.sacct_argv(since, "--allusers", *sacct_selection, UNSTARTED),
    }
    outputs = {name: target.raw_output(command) for name, command in argv.items()}

    def old_text(name: str) -> str:
        return outputs[name].decode("utf-8", errors="replace")

    def read_queue():
        return cli._queue(*queue_selection) if queue_selection else cli.queue()

    def read_accounting():
        if sacct_selection:
            return accounting_since(cli, window_start, *sacct_selection)
        return cli.accounting_since(window_start)

    actions = {
        "raw_queue": lambda: target.raw_output(argv["queue"]),
        "raw_queue_stream": lambda: target.raw_output(argv["queue_stream"]),
        "raw_queue_before": lambda: target.raw_output(argv["queue_before"]),
        "parse_queue": lambda: parse_squeue(outputs["queue"]),
        "parse_queue_stream": lambda: parse_squeue(outputs["queue_stream"], texts=False),
        "parse_queue_before": lambda: before.parse_squeue(old_text("queue_before")),
        "read_queue": read_queue,
        "read_queue_stream": lambda: read_stream(cli, *queue_selection),
        "read_queue_before": lambda: before.queue(cli, *queue_selection),
        "raw_accounting": lambda: target.raw_output(argv["accounting"]),
        "raw_accounting_before": lambda: target.raw_output(argv["accounting_before"]),
        "parse_accounting": lambda: parse_sacct(outputs["accounting"]),
        "parse_accounting_before": lambda: before.parse_sacct(old_text("accounting_before")),
        "raw_unstarted": lambda: target.raw_output(argv["unstarted"]),
        "raw_unstarted_before": lambda: target.raw_output(argv["unstarted_before"]),
        "parse_unstarted": lambda: parse_sacct(outputs["unstarted"]),
        "parse_unstarted_before": lambda: before.parse_sacct(old_text("unstarted_before")),
        "read_accounting": read_accounting,
        "read_accounting_before": lambda: before.accounting_since(
            cli, window_start, *sacct_selection
        ),
    }
    medians, unreadable = interleaved_medians_ms(actions, repeat)
    figures: dict = {f"{name}_ms": value for name, value in medians.items()}
    figures |= {f"{name}_bytes": len(output) for name, output in outputs.items()}
    for read in ("accounting", "unstarted"):
        figures[f"{read}_lines"] = len(outputs[read]) // SACCT_RECORD_BYTES
        figures[f"{read}_before_lines"] = outputs[f"{read}_before"].count(b"\n")
    figures["queue_records"] = len(read_queue())
    figures["queue_stream_records"] = len(read_stream(cli, *queue_selection))
    figures["accounting_records"] = len(read_accounting())
    read_before = {
        "queue_before_records": actions["read_queue_before"],
        "accounting_before_records": actions["read_accounting_before"],
    }
    for name, read in read_before.items():
        try:
            figures[name] = len(read())  # type: ignore[arg-type]
        except SlurmOutputInvalid as error:
            figures[name] = NAN
            unreadable.setdefault(name, str(error)[:160])
    figures["unreadable"] = unreadable
    return figures


def print_table(target: DevCluster, figures: dict, args) -> None:
    version = target.version()
    print(f"{target.cluster.name}, {version}: {figures['queued_jobs']} jobs queued, "
          f"{figures.get('all_accounting_records', 0)} runs in the accounting window; median of "
          f"{args.repeat}, command timeout {settings.SLURM_COMMAND_TIMEOUT_S} s; load average "
          f"(1 min) {figures['load_average_1min_start']:.2f} at the start, "
          f"{figures['load_average_1min_end']:.2f} at the end")  # fmt: skip
    print("queue: queue()'s listing, with the comments and names (SQUEUE_TEXTS_FORMAT); "
          "sync queue: the queue sync's (queue_stream, SQUEUE_FORMAT: no user's text)")  # fmt: skip
    print(f"{'':<14}{'submit':>10}{'queue':>10}{'sync queue':>12}{'accounting':>12}")
    print(f"{'raw command':<14}{figures['raw_submit_ms']:>8.1f}ms{figures['raw_queue_ms']:>8.1f}ms"
          f"{figures['raw_queue_stream_ms']:>10.1f}ms"
          f"{figures['raw_accounting_ms']:>10.1f}ms")  # fmt: skip
    if "cli_queue_ms" in figures:
        print(f"{'cli adapter':<14}{figures['cli_submit_ms']:>8.1f}ms"
              f"{figures['cli_queue_ms']:>8.1f}ms"
              f"{figures['cli_queue_stream_ms']:>10.1f}ms"
              f"{figures['cli_accounting_ms']:>10.1f}ms")  # fmt: skip
    if "rest_submit_ms" in figures:
        print(
            f"{'rest adapter':<14}{figures['rest_submit_ms']:>8.1f}ms"
            f"{figures['rest_queue_full_ms']:>8.1f}ms{'-':>12}"
            f"{figures['rest_accounting_ms']:>10.1f}ms"
        )
        print(f"{'  rest GET /jobs, raw':<28}{figures['raw_rest_jobs_ms']:>8.1f}ms")
        print(f"{'  rest queue unchanged (304)':<28}{figures['rest_queue_unchanged_ms']:>8.1f}ms")
    if "rest_error" in figures:
        print(f"rest adapter: {figures['rest_error']}")
    ratios = {k: v for k, v in figures.items() if k.endswith("_ratio")}
    for name, value in ratios.items():
        print(f"{name:<28}{value:>6.2f}")
    for scope, title in (
        ("all", "the cluster's whole queue and 6-hour accounting window"),
        ("own", f"the bench's own jobs ({QUEUED_NAME}, {ACCOUNTED_NAME})"),
    ):
        if f"{scope}_raw_queue_ms" in figures:
            print()
            print_before_after(scope, title, figures)


def json_value(value: object) -> object:
    """A figure as the JSON line gives it: rounded; one that could not be measured null."""
    if isinstance(value, float):
        return None if math.isnan(value) else round(value, 3)
    return value


def _in_seconds(value: float, unit: str) -> float:
    # This bench keeps its times in milliseconds; the tables take seconds.
    return value / 1000 if unit == "ms" else value


def print_before_after(scope: str, title: str, figures: dict) -> None:
    """The cli adapter's queue and accounting reads before issue 33 and now."""
    rows = [
        ("squeue, the sync's listing: output", "queue_before_bytes", "queue_stream_bytes", "KiB"),
        ("  raw", "raw_queue_before_ms", "raw_queue_stream_ms", "ms"),
        ("  parse", "parse_queue_before_ms", "parse_queue_stream_ms", "ms"),
        ("  cli adapter queue_stream() read whole", "read_queue_before_ms", "read_queue_stream_ms",
         "ms"),
        ("  records", "queue_before_records", "queue_stream_records", "n"),
        ("squeue, queue()'s with texts: output", "queue_before_bytes", "queue_bytes", "KiB"),
        ("  raw", "raw_queue_before_ms", "raw_queue_ms", "ms"),
        ("  parse", "parse_queue_before_ms", "parse_queue_ms", "ms"),
        ("  cli adapter queue() (read as printed)", "read_queue_before_ms", "read_queue_ms", "ms"),
        ("  records", "queue_before_records", "queue_records", "n"),
        ("sacct, the window with steps: output", "accounting_before_bytes", "accounting_bytes",
         "KiB"),
        ("  lines (runs and their steps)", "accounting_before_lines", "accounting_lines", "n"),
        ("  raw", "raw_accounting_before_ms", "raw_accounting_ms", "ms"),
        ("  parse", "parse_accounting_before_ms", "parse_accounting_ms", "ms"),
        ("sacct, the ended unstarted: output", "unstarted_before_bytes", "unstarted_bytes", "KiB"),
        ("  lines (runs)", "unstarted_before_lines", "unstarted_lines", "n"),
        ("  raw", "raw_unstarted_before_ms", "raw_unstarted_ms", "ms"),
        ("  parse", "parse_unstarted_before_ms", "parse_unstarted_ms", "ms"),
        ("cli adapter accounting_since (both reads)", "read_accounting_before_ms",
         "read_accounting_ms", "ms"),
        ("  records (runs; before: jobs)", "accounting_before_records", "accounting_records",
         "n"),
    ]  # fmt: skip
    table = [
        compared_row(label, *(_in_seconds(figures[f"{scope}_{key}"], unit)
                              for key in (before_key, after_key)), unit)
        for label, before_key, after_key, unit in rows
    ]  # fmt: skip
    lines, lines_before = (
        figures[f"{scope}_accounting_lines"],
        figures[f"{scope}_accounting_before_lines"],
    )
    if lines and lines_before:
        per_line = (figures[f"{scope}_accounting_before_bytes"] / lines_before,
                    figures[f"{scope}_accounting_bytes"] / lines)  # fmt: skip
        table.append(compared_row("  bytes a line", *per_line, "n"))
    print(f"  {title}; before, one squeue listing served the sync and queue()")
    print_compared("cli adapter, before issue 33 and now:", table)
    for name, error in figures[f"{scope}_unreadable"].items():
        print(f"  before, {name}: {error}")


if __name__ == "__main__":
    main()
