"""Load from client threads at once against a benchmark's server: each request's latency
and the wall time, and the percentiles the benchmarks print."""

import itertools
import statistics
import threading
import time
from collections.abc import Sequence

import httpx


def percentile(values: list[float], p: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def load(
    url: str,
    paths: str | Sequence[str],
    *,
    clients: int,
    requests: int,
    headers: dict[str, str] | None = None,
    cookies: dict[str, str] | None = None,
) -> tuple[list[float], float]:
    """``requests`` GETs from ``clients`` threads at once, of ``paths`` in turn (one path,
    or several the requests cycle through): each one's latency (to the last byte of the
    body) and the wall time. Any answer but 200 ends the benchmark."""
    latencies: list[float] = []
    lock = threading.Lock()
    left = [requests]
    failures: list[str] = []
    following = itertools.cycle([paths] if isinstance(paths, str) else paths)
    start = threading.Barrier(clients + 1)

    def client() -> None:
        with httpx.Client(headers=headers, cookies=cookies, timeout=60) as http:
            start.wait()
            while True:
                with lock:
                    if left[0] == 0:
                        return
                    left[0] -= 1
                    path = next(following)
                began = time.perf_counter()
                response = http.get(f"{url}{path}")
                elapsed = time.perf_counter() - began
                with lock:
                    latencies.append(elapsed)
                    if response.status_code != 200:
                        failures.append(f"{path}: {response.status_code} {response.text[:200]}")

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    if failures:
        raise SystemExit(f"{len(failures)} requests failed, e.g. {failures[0]}")
    return latencies, wall
