"""The cost of a submission's token look-up does not grow with the cluster's history.

A submission's retry looks its token up in Slurm (the queue, then accounting) before
it submits again. The look-up reads the owner's jobs under the project's account
since the job was saved (``find_by_comment``), not everyone's last 14 days. This
times it, for each adapter, on the dev cluster as it is and again after adding
``--history`` ended jobs of another user and account (queued on a drained node and
cancelled: each leaves one accounting record), beside the 14-day read of all accounting
that the look-up used to make, measured in the same run.

    .venv/bin/python bench/token_lookup.py [--history 20000] [--repeat 5]

Needs the dev stack (`make up` or `dev/stack start`). The history it adds stays in
accounting (it is what a cluster's history is); a second run adds as much again.
"""

import argparse
import datetime as dt
import json
import os
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("PORTAL_ENV", "dev")  # benchmarks run on the dev stack

import django

django.setup()

from bench.dev_stack import STACK, no_job_starts, slurm, wait_for_stack  # noqa: E402
from bench.slurm_client import median_ms  # noqa: E402
from clusters.models import Cluster  # noqa: E402
from clusters.slurm import client_for  # noqa: E402
from clusters.slurm.protocol import SlurmClient  # noqa: E402
from clusters.slurm.types import SubmitRequest  # noqa: E402
from jobs.tokens import CLOCK_SLACK, comment_for  # noqa: E402

CLUSTER, USER, ACCOUNT = "portal-dev", "alice", "benchlookup"
HISTORY_USER, HISTORY_ACCOUNT, HISTORY_NAME = "root", "root", "bench-history"
BATCH = 2000  # held jobs queued at once (the dev cluster's MaxJobCount is 20,000)
OLD_WINDOW = dt.timedelta(days=14)


def clients() -> dict[str, SlurmClient]:
    env = dict(line.split("=", 1) for line in slurm(str(STACK), "env").stdout.splitlines())
    return {
        backend: client_for(
            Cluster(
                name=CLUSTER,
                backend=backend,
                rest_url=env["SLURM_REST_URL"],
                jwt_key_file=env["SLURM_JWT_KEY_FILE"],
                admin_user="slurm",
            ),
            timeout_s=120,
        )
        for backend in Cluster.Backend.values
    }


def accounted(name: str, user: str) -> int:
    """Records of the user's jobs of that name in accounting (ended ones only)."""
    output = slurm("sacct", f"--user={user}", "-X", "-n", "-P", f"--name={name}",
                   "--starttime=now-30days", "--endtime=now", "--state=CA,CD,F",
                   "-o", "JobID").stdout  # fmt: skip
    return len(output.splitlines())


def target_job(cli: SlurmClient) -> tuple[SubmitRequest, int, dt.datetime]:
    """One ended job of alice's with a portal token: the look-up goes on to accounting."""
    slurm("sacctmgr", "-i", "add", "account", ACCOUNT, f"cluster={CLUSTER}")
    slurm("sacctmgr", "-i", "add", "user", USER, f"account={ACCOUNT}", f"cluster={CLUSTER}")
    request = SubmitRequest(
        user=USER, script="#!/bin/bash\ntrue\n", account=ACCOUNT, partition="debug",
        name="bench-lookup", time_limit_minutes=1, working_directory="/tmp",
        stdout_path="/dev/null", stderr_path="/dev/null",
        comment=comment_for(uuid.uuid4()),
    )  # fmt: skip
    saved_at = dt.datetime.now(dt.UTC)
    job_id = cli.submit(request)
    deadline = time.monotonic() + 120
    while any(e.job_id == job_id for e in cli.queue()):
        if time.monotonic() > deadline:
            raise SystemExit(f"job {job_id} did not end within 2 minutes")
        time.sleep(0.5)
    return request, job_id, saved_at


def add_history(count: int) -> None:
    """``count`` ended jobs of another user and account: queued in batches on a drained
    node (eligible, so accounting's time window lists them, unlike held jobs) and
    cancelled."""
    before = accounted(HISTORY_NAME, HISTORY_USER)
    done = 0
    with no_job_starts("debug"):
        while done < count:
            batch = min(BATCH, count - done)
            for _ in range(batch):
                slurm("sbatch", f"--account={HISTORY_ACCOUNT}", "--partition=debug",
                      f"--job-name={HISTORY_NAME}", "--output=/dev/null", "--chdir=/tmp",
                      f"--comment={comment_for(uuid.uuid4())}", "--wrap=true")  # fmt: skip
            slurm("scancel", f"--user={HISTORY_USER}", f"--name={HISTORY_NAME}")
            done += batch
            print(f"  {done}/{count} history jobs", file=sys.stderr)
    deadline = time.monotonic() + 600
    while accounted(HISTORY_NAME, HISTORY_USER) < before + count:
        if time.monotonic() > deadline:
            raise SystemExit("the history jobs did not reach accounting in 10 minutes")
        time.sleep(1)


def measure(found: dict[str, SlurmClient], target, repeat: int) -> dict[str, float]:
    request, job_id, saved_at = target
    figures: dict[str, float] = {}
    for backend, client in found.items():

        def look_up(client=client) -> list[int]:
            return client.find_by_comment(
                request.comment, user=USER, account=ACCOUNT, since=saved_at - CLOCK_SLACK
            )

        assert look_up() == [job_id], f"{backend}: the look-up did not find job {job_id}"
        figures[f"{backend}_lookup_ms"] = median_ms(look_up, repeat)

        def old_read(client=client) -> int:
            return len(client.accounting_since(dt.datetime.now(dt.UTC) - OLD_WINDOW))

        figures[f"{backend}_14_day_read_ms"] = median_ms(old_read, repeat)
        figures[f"{backend}_14_day_records"] = old_read()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    wait_for_stack(60)
    found = clients()
    target = target_job(found["cli"])
    before = measure(found, target, args.repeat)
    print(f"adding {args.history} ended jobs to accounting…", file=sys.stderr)
    add_history(args.history)
    after = measure(found, target, args.repeat)

    version = slurm("sinfo", "--version").stdout.strip()
    print(f"{version}: token look-up of one ended job, median of {args.repeat}")
    print(f"{'':<26}{'before':>12}{'after':>12}{'after/before':>14}")
    figures: dict[str, float] = {"history_jobs_added": args.history}
    for backend in found:
        for what in ("lookup_ms", "14_day_read_ms", "14_day_records"):
            key = f"{backend}_{what}"
            ratio = after[key] / before[key] if before[key] else float("nan")
            unit = "" if what.endswith("records") else " ms"
            print(f"{backend + ' ' + what.removesuffix('_ms'):<26}{before[key]:>10.1f}{unit:3}"
                  f"{after[key]:>9.1f}{unit:3}{ratio:>11.2f}")  # fmt: skip
            figures[f"{key}_before"] = before[key]
            figures[f"{key}_after"] = after[key]
        figures[f"{backend}_lookup_growth_ratio"] = (
            after[f"{backend}_lookup_ms"] / before[f"{backend}_lookup_ms"]
        )
        figures[f"{backend}_14_day_read_growth_ratio"] = (
            after[f"{backend}_14_day_read_ms"] / before[f"{backend}_14_day_read_ms"]
        )
        figures[f"{backend}_lookup_vs_14_day_read_ratio"] = (
            after[f"{backend}_lookup_ms"] / after[f"{backend}_14_day_read_ms"]
        )
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()}))


if __name__ == "__main__":
    main()
