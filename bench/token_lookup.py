"""The cost of a submission's token look-up does not grow with the cluster's history.

A submission's retry looks its token up in Slurm (the queue, then accounting) before
it submits again. The look-up reads the owner's jobs under the project's account
since the job was saved (``find_by_comment``), not everyone's last 14 days. This
times it, for each adapter and each dev cluster (portal-dev's 22.05, portal-next's
24.11), for one ended job of alice's, in three stages:

1. the cluster as it is;
2. after ``--history`` ended jobs of alice's own, under the same account, all before
   the job was saved, by more than the look-up's clock slack (the time bound must
   leave them out);
3. after as many ended jobs of another user and account, after the job was saved
   (the owner and account bound must leave them out);

beside the 14-day read of all accounting the look-up used to make, measured in the
same run. For contrast it also times the look-up of a job saved before alice's
history, whose window does hold it.

The history jobs are queued under an association that may run none (``GrpJobs=0``)
and cancelled: each leaves one accounting record, eligible (so a time window lists
it, unlike a held job), and no other job on the cluster waits for them.

    .venv/bin/python bench/token_lookup.py [--cluster NAME] [--history 5000] [--repeat 5]

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
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("PORTAL_ENV", "dev")  # benchmarks run on the dev stack

import django

django.setup()

from bench.dev_clusters import DevCluster, dev_clusters  # noqa: E402
from bench.dev_stack import wait_for_stack  # noqa: E402
from bench.slurm_client import median_ms  # noqa: E402
from clusters.slurm.protocol import SlurmClient  # noqa: E402
from clusters.slurm.types import SubmitRequest  # noqa: E402
from jobs.tokens import CLOCK_SLACK, comment_for  # noqa: E402

USER, ACCOUNT, OWN_HISTORY = "alice", "benchlookup", "bench-history-own"
OTHER_USER, OTHER_ACCOUNT, OTHER_HISTORY = "root", "benchhistory", "bench-history"
BATCH = 1000  # jobs queued at once (each dev cluster's MaxJobCount is 110,000)
OLD_WINDOW = dt.timedelta(days=14)
HISTORY_AGE_SLACK = dt.timedelta(seconds=30)
STAGES = ("as it is", "+ alice's before saving", "+ others' after saving")


class Target:
    """One ended job of alice's with a portal token: the look-up goes on to accounting."""

    def __init__(self, cluster: DevCluster, cli: SlurmClient) -> None:
        self.comment = comment_for(uuid.uuid4())
        request = SubmitRequest(
            user=USER, script="#!/bin/bash\ntrue\n", account=ACCOUNT,
            partition=cluster.partition, name="bench-lookup", time_limit_minutes=1,
            working_directory="/tmp", stdout_path="/dev/null", stderr_path="/dev/null",
            comment=self.comment,
        )  # fmt: skip
        self.saved_at = dt.datetime.now(dt.UTC)
        self.job_id = cli.submit(request)
        deadline = time.monotonic() + 120
        while any(e.job_id == self.job_id for e in cli.queue()):
            if time.monotonic() > deadline:
                raise SystemExit(f"{cluster.name}: job {self.job_id} did not end in 2 minutes")
            time.sleep(0.5)

    def look_up(self, client: SlurmClient) -> list[int]:
        return client.find_by_comment(
            self.comment, user=USER, account=ACCOUNT, since=self.saved_at - CLOCK_SLACK
        )


def association(cluster: DevCluster, user: str, account: str) -> None:
    """The account and the user in it, on the cluster; a limit left by an interrupted
    run is lifted."""
    where = f"cluster={cluster.name}"
    cluster.run(["sacctmgr", "-i", "add", "account", account, where])
    cluster.run(["sacctmgr", "-i", "add", "user", user, f"account={account}", where])
    runs_none(cluster, user, account, limit="-1")


def runs_none(cluster: DevCluster, user: str, account: str, *, limit: str = "0") -> None:
    cluster.output(["sacctmgr", "-i", "modify", "user", user, "where", f"account={account}",
                    f"cluster={cluster.name}", "set", f"GrpJobs={limit}"])  # fmt: skip


@contextmanager
def none_may_run(cluster: DevCluster, user: str, account: str):
    runs_none(cluster, user, account)
    try:
        yield
    finally:
        runs_none(cluster, user, account, limit="-1")


def accounted(cluster: DevCluster, user: str, name: str) -> int:
    """Records of the user's jobs of that name in accounting (ended ones only)."""
    output = cluster.output(["sacct", f"--user={user}", "-X", "-n", "-P", f"--name={name}",
                             "--starttime=now-30days", "--endtime=now", "--state=CA,CD,F",
                             "-o", "JobID"])  # fmt: skip
    return len(output.splitlines())


def add_history(cluster: DevCluster, count: int, *, user: str, account: str, name: str) -> None:
    """``count`` ended jobs of the user under the account, each with a portal token:
    queued in batches where none may run, and cancelled."""
    before = accounted(cluster, user, name)
    done = 0
    with none_may_run(cluster, user, account):
        while done < count:
            batch = min(BATCH, count - done)
            for _ in range(batch):
                argv = ["sbatch", f"--account={account}", f"--partition={cluster.partition}",
                        f"--job-name={name}", "--output=/dev/null", "--chdir=/tmp",
                        f"--comment={comment_for(uuid.uuid4())}", "--wrap=true"]  # fmt: skip
                cluster.output(argv, as_user=None if user == OTHER_USER else user)
            cancel(cluster, user, name)
            done += batch
            print(f"  {cluster.name}: {done}/{count} jobs of {user}", file=sys.stderr)
    # Ended jobs also stay in slurmctld's memory, and the queue's listing, for MinJobAge:
    # wait them out too, as the look-up's queue part measures the queue, not the history.
    deadline = time.monotonic() + 600
    while (
        accounted(cluster, user, name) < before + count
        or cluster.output(["squeue", "--noheader", "--states=all", f"--name={name}"]).strip()
    ):
        if time.monotonic() > deadline:
            raise SystemExit(f"{cluster.name}: the history did not reach accounting in 10 min")
        time.sleep(1)


def cancel(cluster: DevCluster, user: str, name: str) -> None:
    cluster.run(["scancel", f"--user={user}", f"--name={name}"])


def measure(found: dict[str, SlurmClient], target: Target, repeat: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    for backend, client in found.items():
        found_ids = target.look_up(client)
        assert found_ids == [target.job_id], f"{backend}: found {found_ids}, not {target.job_id}"
        figures[f"{backend}_lookup_ms"] = median_ms(lambda c=client: target.look_up(c), repeat)

        def old_read(client=client) -> int:
            return len(client.accounting_since(dt.datetime.now(dt.UTC) - OLD_WINDOW))

        figures[f"{backend}_14_day_read_ms"] = median_ms(old_read, repeat)
        figures[f"{backend}_14_day_records"] = old_read()
    return figures


def bench(cluster: DevCluster, history: int, repeat: int) -> dict[str, float]:
    association(cluster, USER, ACCOUNT)
    association(cluster, OTHER_USER, OTHER_ACCOUNT)
    found = cluster.adapters(timeout_s=120)
    try:
        earlier = Target(cluster, found["cli"])
        stages = [measure(found, earlier, repeat)]
        add_history(cluster, history, user=USER, account=ACCOUNT, name=OWN_HISTORY)
        # The window opens CLOCK_SLACK before the saving (Slurm's clock may be behind the
        # database's), and the rest client adds seconds of its own: jobs that recent are
        # in it by design. A history is older.
        print(f"  {cluster.name}: waiting out the look-up's clock slack…", file=sys.stderr)
        time.sleep((CLOCK_SLACK + HISTORY_AGE_SLACK).total_seconds())
        target = Target(cluster, found["cli"])
        stages.append(measure(found, target, repeat))
        add_history(cluster, history, user=OTHER_USER, account=OTHER_ACCOUNT, name=OTHER_HISTORY)
        stages.append(measure(found, target, repeat))
        contrast = {b: median_ms(lambda c=c: earlier.look_up(c), repeat) for b, c in found.items()}
    finally:
        cancel(cluster, USER, OWN_HISTORY)
        cancel(cluster, OTHER_USER, OTHER_HISTORY)
    report(cluster, found, stages, contrast, history, repeat)
    figures: dict[str, float] = {"history_jobs_added_per_stage": history}
    for backend in found:
        for what in ("lookup_ms", "14_day_read_ms", "14_day_records"):
            for stage, measured in enumerate(stages):
                figures[f"{backend}_{what}_stage{stage}"] = measured[f"{backend}_{what}"]
        first, last = stages[0], stages[-1]
        figures[f"{backend}_lookup_growth_ratio"] = (
            last[f"{backend}_lookup_ms"] / first[f"{backend}_lookup_ms"]
        )
        figures[f"{backend}_14_day_read_growth_ratio"] = (
            last[f"{backend}_14_day_read_ms"] / first[f"{backend}_14_day_read_ms"]
        )
        figures[f"{backend}_lookup_of_a_job_saved_before_the_history_ms"] = contrast[backend]
    return figures


def report(cluster, found, stages, contrast, history: int, repeat: int) -> None:
    print(f"{cluster.name}, {cluster.version()}: token look-up of one ended job, median of "
          f"{repeat}; each stage adds {history} ended jobs")  # fmt: skip
    print(f"{'':<30}{'look-up':>10}{'14-day read (records)':>26}")
    for backend in found:
        for stage, measured in zip(STAGES, stages, strict=True):
            print(f"{backend:<5}{stage:<25}{measured[f'{backend}_lookup_ms']:>7.1f} ms"
                  f"{measured[f'{backend}_14_day_read_ms']:>12.1f} ms"
                  f" ({measured[f'{backend}_14_day_records']:.0f})")  # fmt: skip
        growth = stages[-1][f"{backend}_lookup_ms"] / stages[0][f"{backend}_lookup_ms"]
        print(f"{backend:<5}{'look-up, last/first':<25}{growth:>7.2f}")
        print(f"{backend:<5}{'a job saved before':<25}{contrast[backend]:>7.1f} ms"
              f"  (alice's {history} are in its window)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", help="one dev cluster (default: each that runs)")
    parser.add_argument("--history", type=int, default=5000, help="ended jobs per stage")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    wait_for_stack(60)
    for cluster in dev_clusters(args.cluster):
        figures = bench(cluster, args.history, args.repeat)
        rounded = {k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()}
        print(json.dumps({"cluster": cluster.name, **rounded}))


if __name__ == "__main__":
    main()
