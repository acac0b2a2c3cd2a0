"""What the fault tests share: the stack's daemons, bursts of jobs, settling, killing workers."""

import contextlib
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from django.db import connection
from django.db.models import Q

from clusters.slurm import client_for
from jobs.models import Job
from jobs.services import job_create
from jobs.states import JobState
from tests.conftest import REPO
from tests.factories import request_for, wait_for


def stack(*arguments: str) -> None:
    subprocess.run([str(REPO / "dev" / "stack"), *arguments], check=True, capture_output=True)


def quick_job(project, workdir, index: int, **fields):
    values = {"name": f"fault{index}", "gpus_per_node": 1, "script": "true\n", **fields}
    return request_for(project, workdir, **values)


def in_slurm(cluster, account: str) -> dict[str, list[int]]:
    """Slurm job ids by comment, for the account's jobs (queue and accounting)."""
    client = client_for(cluster)
    found: dict[str, set[int]] = {}
    for entry in [*client.queue(), *client.accounting_since(cluster.created_at)]:
        if entry.account == account:
            found.setdefault(entry.comment, set()).add(entry.array_job_id or entry.job_id)
    return {comment: sorted(ids) for comment, ids in found.items()}


def assert_in_slurm_once_each(cluster, project, ids: list[int]) -> None:
    jobs = {job.comment: job for job in Job.objects.filter(pk__in=ids)}
    seen = in_slurm(cluster, project.slurm_account)
    assert set(seen) == set(jobs), "every job reached Slurm, and nothing else did"
    for comment, slurm_ids in seen.items():
        assert slurm_ids == [jobs[comment].slurm_job_id], f"{comment} is in Slurm once"


class Burst:
    """Jobs created one after another in a thread of their own, as users would keep
    submitting while something breaks; ``ids`` grows as they are saved."""

    def __init__(self, *, user, project, workdir, count: int, every_s: float, **fields) -> None:
        self.ids: list[int] = []
        self._thread = threading.Thread(
            target=self._run, args=(user, project, workdir, count, every_s, fields), daemon=True
        )
        self._error: BaseException | None = None

    def _run(self, user, project, workdir, count, every_s, fields) -> None:
        try:
            for index in range(count):
                job = job_create(user=user, request=quick_job(project, workdir, index, **fields))
                self.ids.append(job.pk)
                time.sleep(every_s)
        except BaseException as error:  # noqa: BLE001 - re-raised in the test's thread
            self._error = error
        finally:
            connection.close()

    def __enter__(self) -> "Burst":
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.join()

    def join(self) -> list[int]:
        self._thread.join(timeout=120)
        if self._error is not None:
            raise self._error
        return self.ids


def submitted(ids: list[int]) -> int:
    return Job.objects.filter(pk__in=ids, slurm_job_id__isnull=False).count()


def unsettled(ids: list[int]):
    """Jobs not yet at rest: waiting to be submitted, in Slurm, or ended but not charged."""
    return Job.objects.filter(pk__in=ids).filter(
        Q(state__in=[JobState.NEW, JobState.SUBMITTING])
        | Q(slurm_job_id__isnull=False, used_gpu_seconds__isnull=True)
    )


def settle(ids: list[int], *, timeout_s: float = 90) -> None:
    """Wait until every job has been submitted, has ended and has been charged."""
    wait_for(
        lambda: not unsettled(ids).exists(),
        timeout_s=timeout_s,
        interval_s=1,
        what=f"{len(ids)} jobs to be submitted, end and be charged",
    )


def worker_log(queue: str) -> Path:
    return REPO / "var" / f"{queue}.log"


def process_tree(pid: int) -> list[int]:
    """The process and its descendants, from /proc."""
    pids = [pid]
    for each in pids:
        try:
            children = Path(f"/proc/{each}/task/{each}/children").read_text().split()
        except OSError:
            continue
        pids += [int(child) for child in children]
    return pids


def sigkill_worker(process: subprocess.Popen) -> None:
    """SIGKILL a worker and its pool processes at once, as the OOM killer or a lost node
    would: no task finishes, nothing is acknowledged, no lock is let go."""
    pids = process_tree(process.pid)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    process.wait(timeout=10)
