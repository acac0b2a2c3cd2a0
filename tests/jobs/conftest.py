"""Factories for job tests: a funded project known to Slurm, a request, a scratch directory."""

import datetime as dt
import os
import pwd
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from accounts.ledger import allocation_grant
from accounts.reconcile import reconcile
from accounts.services import membership_set, project_create
from jobs.requests import JobRequest

TODAY = dt.date.today()


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


@pytest.fixture
def make_project(dev_cluster):
    """make_project(members={user: role}, gpu_hours=…, in_slurm=True): a project with an
    active allocation on the dev cluster; with ``in_slurm`` the reconciler has given
    its account, associations and limit to Slurm. The Slurm account is unique per test."""
    accounts = []

    def make(*, members, gpu_hours=100, in_slurm=True):
        account = f"j{uuid.uuid4().hex[:10]}"
        accounts.append(account)
        project = project_create(slug=account, name=f"Jobs {account}", slurm_account=account)
        for user, role in members.items():
            membership_set(project=project, user=user, role=role)
        allocation_grant(
            project=project,
            cluster=dev_cluster,
            gpu_hours=gpu_hours,
            starts_on=TODAY - dt.timedelta(days=1),
            ends_on=TODAY + dt.timedelta(days=30),
            actor=None,
            reason="test",
        )
        if in_slurm:
            report = reconcile(cluster=dev_cluster)
            assert not report.errors, report.errors
        return project

    yield make
    for account in accounts:
        subprocess.run(["scancel", f"--account={account}"], capture_output=True, check=False)
        subprocess.run(
            ["sacctmgr", "-i", "delete", "account", account], capture_output=True, check=False
        )


@pytest.fixture
def workdir(alice):
    """A fresh directory in alice's home, owned by her; removed afterwards."""
    entry = pwd.getpwnam("alice")
    path = Path(entry.pw_dir) / "portal-tests" / uuid.uuid4().hex[:8]
    path.mkdir(parents=True)
    for part in (path.parent, path):
        os.chown(part, entry.pw_uid, entry.pw_gid)
    yield path
    shutil.rmtree(path, ignore_errors=True)


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
