"""Factories and helpers for tests: job requests, many jobs at once, polling."""

import time

import pytest

from jobs.requests import JobRequest


def wait_for(predicate, *, timeout_s: float = 60, interval_s: float = 0.5, what: str = "it"):
    """Poll until ``predicate()`` is truthy; return its value or fail saying what did not happen."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}", pytrace=False)
        time.sleep(interval_s)


def request_for(project, workdir, **fields) -> JobRequest:
    values = {
        "project": project.slug,
        "partition": "debug",
        "name": "test",
        "gpus_per_node": 1,
        "time_limit_minutes": 5,
        "working_directory": str(workdir),
        "script": "echo hello from $(id -un)\n",
        **fields,
    }
    return JobRequest(**values)


def bulk_jobs(*, owner, project, count: int, state: str = "completed", **fields):
    """``count`` jobs saved in one query (no holds): for pages and query counts."""
    from decimal import Decimal

    from clusters.models import Partition
    from jobs.models import Job

    partition = fields.pop("partition", None) or Partition.objects.order_by("-is_default").first()
    name = fields.pop("name", "bulk")
    return Job.objects.bulk_create(
        Job(
            owner=owner,
            project=project,
            cluster=partition.cluster,
            partition=partition,
            name=f"{name}{n}",
            time_limit_minutes=10,
            gpus_per_node=1,
            working_directory="/home/alice",
            output_path="/home/alice/slurm-%j.out",
            error_path="/home/alice/slurm-%j.out",
            script="true\n",
            rendered_script="#!/bin/bash\ntrue\n",
            billing_weight=Decimal("1"),
            requested_gpu_seconds=600,
            used_gpu_seconds=300 if state == "completed" else None,
            slurm_job_id=None,
            state=state,
            **fields,
        )
        for n in range(count)
    )


def run_to_the_end(job, *, timeout_s: float = 120):
    """Do what beat does (queue sync, then accounting once the job is gone) until the job
    is charged; returns it refreshed."""
    from jobs.states import TERMINAL_STATES
    from jobs.sync import accounting_sync, queue_sync

    def charged():
        result = queue_sync(cluster=job.cluster)
        job.refresh_from_db()
        if job.state in TERMINAL_STATES or result.vanished:
            accounting_sync(cluster=job.cluster)
            job.refresh_from_db()
        return job.used_gpu_seconds is not None

    wait_for(charged, timeout_s=timeout_s, interval_s=0.3, what=f"job {job.pk} to be charged")
    return job


def slurm_ids_of(job, *, client=None) -> list[int]:
    """The Slurm ids of the job's own submissions (its owner, its account, since it was
    saved), looked up as a submission's retry looks them up."""
    from clusters.slurm import client_for
    from jobs.tokens import CLOCK_SLACK

    return (client or client_for(job.cluster)).find_by_comment(
        job.comment,
        user=job.owner.posix_username,
        account=job.project.slurm_account,
        since=job.created_at - CLOCK_SLACK,
    )
