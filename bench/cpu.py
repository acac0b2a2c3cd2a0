"""CPU seconds of processes, read from /proc: where a benchmark's time went."""

import contextlib
import os
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int, *, descendants: bool = True) -> float:
    """CPU seconds (user and system) of a process and its live descendants (or, without
    ``descendants``, of the process alone), with the children each has waited for (a
    worker's runuser and sbatch)."""
    total, pending = 0.0, [pid]
    while pending:
        one = pending.pop()
        with contextlib.suppress(OSError):  # it may have just ended
            fields = Path(f"/proc/{one}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(field) for field in fields[11:15]) / TICK
            for task in Path(f"/proc/{one}/task").iterdir() if descendants else ():
                pending += [int(child) for child in (task / "children").read_text().split()]
    return total


def named_cpu_s(name: str, *, database: str = "") -> float:
    """CPU seconds of every process called ``name`` (postgres, slurmctld), as cpu_s.

    With a ``database`` (postgres only) PostgreSQL's shared processes (WAL writer,
    checkpointer, …) and only the connections to that database: not those of tests
    running meanwhile on other databases."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "comm").read_text().strip() != name:
                    continue
                if database and not _serves(entry, database):
                    continue
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                total += sum(int(field) for field in fields[11:15]) / TICK
    return total


def _serves(entry: Path, database: str) -> bool:
    # A connection's title is "postgres: <cluster>: <user> <database> <client> <state>";
    # a shared process's has no client address.
    title = (entry / "cmdline").read_text().replace("\0", " ").split()
    connection = len(title) >= 5 and "(" in title[4]
    return not connection or title[3] == database


def machine_busy_s() -> tuple[float, float]:
    """CPU seconds the machine was busy and all in all since boot, every core summed."""
    ticks = [int(t) for t in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    return (sum(ticks) - idle) / TICK, sum(ticks) / TICK
