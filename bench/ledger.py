"""Throughput of GPU-hour holds under concurrent clients, and the balance query's time.

In a database of its own (`portal_bench` on 127.0.0.1:5432, dropped and
recreated at the start, dropped at the end; the dev data is never touched) it
fills one project's allocation with 1,000,000 ledger entries, then measures:

- `project_balance(project)` (the cached totals on the allocation rows), with
  its query plan, beside summing the project's entries (the naive way, the
  baseline, measured in the same run);
- `ledger_hold` calls per second from 8 concurrent clients (threads, one
  database connection each) on the same allocation, beside one client alone,
  and the latency of one hold; then checks that the cached totals still equal
  the sums of the entries and that the available balance is not negative.

    .venv/bin/python bench/ledger.py [--entries 1000000] [--clients 8] [--seconds 5]

Needs only PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth).
"""

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import own_database

BENCH_DATABASE = "portal_bench"
own_database.use(BENCH_DATABASE)

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.db.models import Sum  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.utils import timezone  # noqa: E402

from accounts.errors import QuotaExceeded  # noqa: E402
from accounts.ledger import allocation_grant, ledger_hold  # noqa: E402
from accounts.models import Allocation, LedgerEntry  # noqa: E402
from accounts.selectors import ledger_drift, project_balance  # noqa: E402
from accounts.services import project_create  # noqa: E402
from clusters.services import cluster_register  # noqa: E402

GRANT_GPU_HOURS = 10_000_000
HOLD_GPU_SECONDS = 3600
TARGET_BALANCE_MS = 20.0

# One row per generated entry: job g // 3 holds an hour, releases it, and is
# charged what it used, like a real job; references are unique per kind.
FILL_SQL = """
INSERT INTO accounts_ledgerentry
    (allocation_id, kind, gpu_seconds, reference, actor_id, reason, created_at)
SELECT
    %(allocation)s,
    (ARRAY['hold', 'release', 'charge'])[g %% 3 + 1],
    CASE g %% 3 WHEN 0 THEN -3600 WHEN 1 THEN 3600 ELSE -(60 + (g / 3) %% 3541) END,
    CASE g %% 3 WHEN 2 THEN 'bench:' || (g / 3) ELSE 'bench-fill-' || (g / 3) END,
    NULL,
    '',
    now() - make_interval(secs => %(count)s - g)
FROM generate_series(0, %(count)s - 1) AS g
"""
# The cached totals set to the sums of the entries, in one statement.
TOTALS_SQL = """
UPDATE accounts_allocation AS a SET
    granted_gpu_seconds = s.granted,
    used_gpu_seconds = s.used,
    held_gpu_seconds = s.held,
    expired_gpu_seconds = s.expired
FROM (
    SELECT
        COALESCE(SUM(gpu_seconds) FILTER (WHERE kind IN ('grant', 'adjust')), 0) AS granted,
        -COALESCE(SUM(gpu_seconds) FILTER (WHERE kind = 'charge'), 0) AS used,
        -COALESCE(SUM(gpu_seconds) FILTER (WHERE kind IN ('hold', 'release')), 0) AS held,
        -COALESCE(SUM(gpu_seconds) FILTER (WHERE kind = 'expire'), 0) AS expired
    FROM accounts_ledgerentry WHERE allocation_id = %(allocation)s
) AS s
WHERE a.id = %(allocation)s
"""


def timed_ms(call, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return times


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def fill(allocation: Allocation, count: int) -> float:
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(FILL_SQL, {"allocation": allocation.pk, "count": count})
        cursor.execute(TOTALS_SQL, {"allocation": allocation.pk})
        cursor.execute("VACUUM ANALYZE")  # visibility map and statistics: no autovacuum mid-run
    return time.perf_counter() - started


def holds(allocation_id: int, clients: int, seconds: float) -> dict:
    """`clients` threads holding on one allocation for `seconds`: holds/s and latencies."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    refused = [0] * clients
    errors: list[BaseException] = []
    window: dict[str, float] = {}

    def start() -> None:  # run once, when every client is connected
        window["started"] = time.perf_counter()
        window["deadline"] = window["started"] + seconds

    barrier = threading.Barrier(clients, action=start)

    def client(number: int) -> None:
        try:
            allocation = Allocation.objects.get(pk=allocation_id)  # opens this thread's connection
            barrier.wait()
            deadline = window["deadline"]
            mine, i = latencies[number], 0
            while (started := time.perf_counter()) < deadline:
                try:
                    ledger_hold(
                        allocation=allocation,
                        reference=f"bench-hold-{clients}-{number}-{i}",
                        gpu_seconds=HOLD_GPU_SECONDS,
                    )
                except QuotaExceeded:
                    refused[number] += 1
                mine.append((time.perf_counter() - started) * 1000)
                i += 1
        except Exception as error:  # noqa: BLE001 - re-raised by the main thread
            errors.append(error)
            barrier.abort()
        finally:
            connection.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:  # the first real failure, not the others' broken barrier
        real = [e for e in errors if not isinstance(e, threading.BrokenBarrierError)]
        raise (real or errors)[0]
    elapsed = time.perf_counter() - window["started"]
    every = [latency for mine in latencies for latency in mine]
    return {
        "holds": len(every),
        "refused": sum(refused),
        "per_s": len(every) / elapsed,
        "p50_ms": statistics.median(every),
        "p99_ms": p99(every),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--balance-runs", type=int, default=200)
    parser.add_argument("--naive-runs", type=int, default=10)
    args = parser.parse_args()

    own_database.fresh(BENCH_DATABASE, lambda: run(args))


def run(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    call_command("migrate", verbosity=0)
    migrate_s = time.perf_counter() - started

    today = timezone.localdate()
    cluster = cluster_register(name="bench")
    project = project_create(slug="bench", name="Bench", slurm_account="bench")
    allocation = allocation_grant(
        project=project,
        cluster=cluster,
        gpu_hours=GRANT_GPU_HOURS,
        starts_on=today.replace(day=1),
        ends_on=today.replace(year=today.year + 1, day=1),
        actor=None,
        reason="bench",
        reference="bench-grant",
    )
    fill_s = fill(allocation, args.entries - 1)  # the grant is the first entry
    entries = LedgerEntry.objects.filter(allocation__project=project).count()
    drift_after_fill = ledger_drift()

    # The balance as pages and the API read it: the cached totals.
    balance = project_balance(project)
    with CaptureQueriesContext(connection) as captured:
        project_balance(project)
    balance_sql = captured.captured_queries[-1]["sql"]
    balance_ms = timed_ms(lambda: project_balance(project), args.balance_runs)
    balance_plan, balance_execution_ms = own_database.explain(balance_sql)

    # The baseline: summing every entry of the project.
    def naive() -> int:
        return LedgerEntry.objects.filter(allocation__project=project).aggregate(
            total=Sum("gpu_seconds")
        )["total"]

    naive_total = naive()
    with CaptureQueriesContext(connection) as captured:
        naive()
    naive_sql = captured.captured_queries[-1]["sql"]
    naive_ms = timed_ms(naive, args.naive_runs)
    naive_plan, naive_execution_ms = own_database.explain(naive_sql)
    balance_median, naive_median = statistics.median(balance_ms), statistics.median(naive_ms)

    # Holds: one client alone (the baseline), then all clients at once.
    single = holds(allocation.pk, 1, args.seconds)
    many = holds(allocation.pk, args.clients, args.seconds)
    drift_after_holds = ledger_drift()
    allocation.refresh_from_db()
    available = allocation.available_gpu_seconds
    after_entries = LedgerEntry.objects.filter(allocation__project=project).count()

    rows = [
        ("migrate", f"{migrate_s:.2f} s"),
        ("ledger entries of the project", f"{entries:,}"),
        ("fill (INSERT … SELECT, totals, VACUUM ANALYZE)", f"{fill_s:.2f} s"),
        ("ledger drift rows after fill", f"{len(drift_after_fill)}"),
        ("naive sum == cached available", f"{naive_total == balance.available_gpu_seconds}"),
        (f"project_balance median ({args.balance_runs} runs)", f"{balance_median:.3f} ms"),
        ("project_balance p99", f"{p99(balance_ms):.3f} ms"),
        ("project_balance plan execution", f"{balance_execution_ms:.3f} ms"),
        (
            f"balance target (< {TARGET_BALANCE_MS:g} ms)",
            "met" if balance_median < TARGET_BALANCE_MS else "MISSED",
        ),
        (f"sum of entries median ({args.naive_runs} runs)", f"{naive_median:.1f} ms"),
        ("sum of entries plan execution", f"{naive_execution_ms:.1f} ms"),
        ("sum of entries / balance ratio", f"{naive_median / balance_median:,.0f}x"),
        (f"holds/s, 1 client ({args.seconds:g} s)", f"{single['per_s']:.0f}"),
        ("hold latency p50 / p99, 1 client", f"{single['p50_ms']:.2f} / {single['p99_ms']:.2f} ms"),
        (f"holds/s, {args.clients} clients ({args.seconds:g} s)", f"{many['per_s']:.0f}"),
        (
            f"hold latency p50 / p99, {args.clients} clients",
            f"{many['p50_ms']:.2f} / {many['p99_ms']:.2f} ms",
        ),
        (f"{args.clients} clients / 1 client ratio", f"{many['per_s'] / single['per_s']:.2f}"),
        ("holds refused (quota)", f"{single['refused'] + many['refused']}"),
        ("ledger entries after holds", f"{after_entries:,}"),
        ("ledger drift rows after holds", f"{len(drift_after_holds)}"),
        ("available after holds", f"{available / 3600:,.0f} GPU-h"),
        ("available not negative", f"{available >= 0}"),
    ]
    width = max(len(label) for label, _ in rows) + 2
    for label, value in rows:
        print(f"{label:<{width}}{value:>20}")
    print()
    print("project_balance(project):")
    print(f"  {balance_sql}")
    print("\n".join(f"  {line}" for line in balance_plan))
    print()
    print("sum of the project's entries (baseline):")
    print(f"  {naive_sql}")
    print("\n".join(f"  {line}" for line in naive_plan))
    print(
        json.dumps(
            {
                "ledger_entries": entries,
                "fill_s": round(fill_s, 2),
                "ledger_drift_rows": len(drift_after_fill) + len(drift_after_holds),
                "balance_query_median_ms": round(balance_median, 3),
                "balance_query_p99_ms": round(p99(balance_ms), 3),
                "balance_query_plan_execution_ms": round(balance_execution_ms, 3),
                "balance_target_ms": TARGET_BALANCE_MS,
                "sum_of_entries_median_ms": round(naive_median, 1),
                "sum_vs_balance_ratio": round(naive_median / balance_median, 1),
                "holds_per_s_1_client": round(single["per_s"], 1),
                f"holds_per_s_{args.clients}_clients": round(many["per_s"], 1),
                f"hold_p50_ms_{args.clients}_clients": round(many["p50_ms"], 2),
                f"hold_p99_ms_{args.clients}_clients": round(many["p99_ms"], 2),
                "hold_p50_ms_1_client": round(single["p50_ms"], 2),
                "clients_vs_single_ratio": round(many["per_s"] / single["per_s"], 2),
                "holds_refused": single["refused"] + many["refused"],
                "available_after_holds_gpu_hours": round(available / 3600, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
