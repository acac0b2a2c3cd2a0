"""The dev stack a benchmark runs on: wait for it, and run Slurm's tools."""

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def no_job_starts(partition: str) -> Iterator[None]:
    """The partition's nodes drained meanwhile: the benchmark's jobs wait in the queue
    (eligible, so accounting lists them once they end) and none starts. A job starting
    and ending costs this machine more CPU than its submission (about 50 ms against
    sbatch's 12), and left to run, the jobs of one timed run would be paid for by
    whichever run came next."""
    nodes = slurm("sinfo", "--noheader", f"--partition={partition}", "-o", "%N").stdout.strip()
    drained = slurm("scontrol", "update", f"nodename={nodes}", "state=drain", "reason=benchmark")
    if drained.returncode != 0:
        raise SystemExit(f"could not drain {nodes}: {drained.stderr.strip()}")
    try:
        yield
    finally:
        slurm("scontrol", "update", f"nodename={nodes}", "state=resume")


@contextmanager
def account_jobs_wait(account: str) -> Iterator[None]:
    """The account's jobs wait in the queue (``GrpJobs=0``: reason AssocGrpJobsLimit) and
    none starts, as with ``no_job_starts`` but touching nobody else's jobs: for a machine
    whose cluster others' tests use meanwhile."""
    from tests.slurm_accounts import DEV  # after django.setup(): under the reconciler's lock

    DEV.sacctmgr_change("modify", "account", account, "set", "GrpJobs=0", check=True)
    try:
        yield
    finally:
        DEV.sacctmgr_change("modify", "account", account, "set", "GrpJobs=-1")
