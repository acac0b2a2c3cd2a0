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
    from jobs.accounting import accounting_sync
    from jobs.queue_sync import queue_sync
    from jobs.states import TERMINAL_STATES

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


def recorded_cluster(name: str = "recorded"):
    """A cluster the portal knows with one "gpu" partition (weight 1.5), and no Slurm
    behind it: for tests that feed recorded queue and accounting entries."""
    from decimal import Decimal

    from clusters.models import Cluster, Partition

    cluster = Cluster.objects.create(name=name)
    Partition.objects.create(
        cluster=cluster, name="gpu", gpus_per_node=8, nodes=1, billing_weight=Decimal("1.5")
    )
    return cluster


def month_allocation(project, cluster, *, gpu_hours, reason: str = "test"):
    """An active allocation of ``project`` on ``cluster``, from yesterday for 30 days."""
    import datetime as dt

    from accounts.ledger import allocation_grant

    today = dt.date.today()
    return allocation_grant(
        project=project,
        cluster=cluster,
        gpu_hours=gpu_hours,
        starts_on=today - dt.timedelta(days=1),
        ends_on=today + dt.timedelta(days=30),
        actor=None,
        reason=reason,
    )


def project_with_allocation(cluster, *, pi, account: str = "vision", gpu_hours: int = 10):
    """A project led by ``pi`` with an active allocation on ``cluster``; Slurm is not told."""

    from accounts.services import membership_set, project_create

    project = project_create(slug=account, name=account.title(), slurm_account=account)
    membership_set(project=project, user=pi, role="pi")
    month_allocation(project, cluster, gpu_hours=gpu_hours)
    return project


def in_thread(target, errors: list):
    """Run ``target`` in a started thread with its own database connection (closed at
    the end); what it raises is appended to ``errors``."""
    import threading

    from django.db import connection

    def run() -> None:
        try:
            target()
        except Exception as error:  # noqa: BLE001 - the test asserts what was collected
            errors.append(error)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def waiting_for_a_lock(query_like: str) -> bool:
    """Whether a session of the test database waits for a lock in a query LIKE this:
    how a test knows a thread has reached the lock it means to be blocked on.
    PostgreSQL keeps only the first 1,024 bytes of a query's text: match its start."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query LIKE %s",
            [query_like],
        )
        return cursor.fetchone()[0] > 0


def blocked_on_a_lock(thread, query_like: str, errors: list, *, what: str) -> None:
    """Wait until ``thread`` waits for a lock in a query LIKE ``query_like`` (see
    ``waiting_for_a_lock``); fail if it ended instead (what it raised is in ``errors``)."""
    wait_for(
        lambda: waiting_for_a_lock(query_like) or not thread.is_alive(),
        timeout_s=30,
        interval_s=0.05,
        what=what,
    )
    assert thread.is_alive(), errors  # it waits for the lock, it did not go on alone


def listed_account_row(name: str, **changes) -> dict:
    """An account as a worker stores it in a cluster's ``SlurmAccountListing`` (see
    ``accounts.adoption.listing_row``): by default one a site made by hand, of no project."""
    return {
        "name": name,
        "description": "lattice qcd",
        "organization": "physics",
        "parent": "root",
        "users": ["charlie"],
        "limits": {
            "gpu_minutes": 5000,
            "cpu_minutes": None,
            "max_submit_jobs": 50,
            "GrpSubmitJobs": None,
            "GrpJobs": None,
        },
        "project": None,
        "changes": [],
        "others": [],
        "problem": "",
        **changes,
    }


def outside_job(client, project, workdir, *, gpus: int = 1, seconds: int = 120, name="outside"):
    """alice's job submitted straight to Slurm (as from a login node) under the project's
    account on the debug partition; its Slurm id. The caller cancels it."""
    import uuid

    from clusters.slurm.types import SubmitRequest

    return client.submit(
        SubmitRequest(
            user="alice", script=f"#!/bin/bash\nsleep {seconds}\n", account=project.slurm_account,
            partition="debug", name=name, time_limit_minutes=max(2, seconds // 60 + 1),
            working_directory=str(workdir), stdout_path=f"{workdir}/%j.out",
            stderr_path=f"{workdir}/%j.err", gpus_per_node=gpus, comment=f"x:{uuid.uuid4()}",
        )
    )  # fmt: skip
