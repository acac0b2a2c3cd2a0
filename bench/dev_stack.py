"""The dev stack a benchmark runs on: wait for it, and run Slurm's tools."""

import subprocess
import sys
import time
from pathlib import Path

STACK = Path(__file__).resolve().parent.parent / "dev" / "stack"
NEEDED = ("postgresql", "redis", "slurmctld", "slurmd", "slurmdbd")


def stack_down() -> list[str]:
    status = subprocess.run([str(STACK), "status"], capture_output=True, text=True, check=False)
    up = {line.split()[0] for line in status.stdout.splitlines() if line.split()[1:2] == ["up"]}
    return [name for name in NEEDED if name not in up]


def wait_for_stack(timeout_s: float) -> None:
    """slurmctld may be stopped for a moment by a fault test: wait, never start it."""
    deadline = time.monotonic() + timeout_s
    while down := stack_down():
        if time.monotonic() > deadline:
            raise SystemExit(f"the dev stack is not up ({', '.join(down)}); `dev/stack status`")
        print(f"waiting for {', '.join(down)}…", file=sys.stderr)
        time.sleep(5)


def slurm(*argv: str) -> subprocess.CompletedProcess:
    """A Slurm tool run as the benchmark's user (root), with the portal's Slurm setup."""
    from clusters.slurm.cli import slurm_environment  # after django.setup()

    return subprocess.run(
        list(argv), capture_output=True, text=True, check=False, env=slurm_environment()
    )
