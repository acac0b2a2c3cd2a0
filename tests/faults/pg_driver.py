"""The portal side of the PostgreSQL fault test, run in a process of its own against
the private PostgreSQL instance (PORTAL_DATABASE_URL): ``python -m tests.faults.pg_driver
setup|burst|check ...``; each prints one JSON object."""

import datetime as dt
import json
import sys
import time
import uuid

import django


def setup(workdir: str) -> dict:
    from accounts.ledger import allocation_grant
    from accounts.reconcile import reconcile
    from accounts.services import membership_set, project_create, user_create
    from clusters.services import cluster_register, partitions_sync

    cluster = cluster_register(name="portal-dev")
    partitions_sync(cluster=cluster)
    alice = user_create(username="alice", password="alice-pass-1234", posix_username="alice")
    account = f"p{uuid.uuid4().hex[:10]}"
    project = project_create(slug=account, name=account, slurm_account=account)
    membership_set(project=project, user=alice, role="pi")
    today = dt.date.today()
    allocation_grant(
        project=project, cluster=cluster, gpu_hours=100, actor=None, reason="fault test",
        starts_on=today - dt.timedelta(days=1), ends_on=today + dt.timedelta(days=30),
    )  # fmt: skip
    report = reconcile(cluster=cluster)
    return {"account": account, "errors": report.errors}


def burst(workdir: str, account: str, count: int) -> dict:
    """Jobs one after another; a request that meets the database restarting is retried,
    as a user (or the API client) would."""
    from django.db import OperationalError, close_old_connections

    from accounts.models import User
    from jobs.services import job_create
    from tests.faults.support import quick_job

    ids, retries = [], 0
    for index in range(count):
        deadline = time.monotonic() + 60
        while True:
            try:
                alice = User.objects.get(username="alice")
                project = alice.projects.get(slurm_account=account)
                ids.append(job_create(user=alice, request=quick_job(project, workdir, index)).pk)
                break
            except OperationalError:
                if time.monotonic() > deadline:
                    raise
                retries += 1
                close_old_connections()
                time.sleep(0.5)
        time.sleep(0.3)
    return {"ids": ids, "retries": retries}


def check(account: str) -> dict:
    from clusters.models import Cluster
    from clusters.slurm import client_for
    from jobs.invariants import invariants_check
    from jobs.models import Job

    cluster = Cluster.objects.get(name="portal-dev")
    client = client_for(cluster)
    seen: dict[str, set[int]] = {}
    for entry in [*client.queue(), *client.accounting_since(cluster.created_at)]:
        if entry.account == account:
            seen.setdefault(entry.comment, set()).add(entry.array_job_id or entry.job_id)
    jobs = {job.comment: job.slurm_job_id for job in Job.objects.all()}
    return {
        "violations": [str(v) for v in invariants_check(cluster=cluster).violations],
        "states": sorted(Job.objects.values_list("state", flat=True)),
        "in_slurm": {comment: sorted(ids) for comment, ids in seen.items()},
        "portal": jobs,
    }


if __name__ == "__main__":
    django.setup()
    command, *arguments = sys.argv[1:]
    if command == "setup":
        result = setup(*arguments)
    elif command == "burst":
        result = burst(arguments[0], arguments[1], int(arguments[2]))
    else:
        result = check(*arguments)
    print(json.dumps(result))
