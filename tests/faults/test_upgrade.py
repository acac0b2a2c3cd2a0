"""The upgrade drill (docs/RELIABILITY.md, "Backup, restore and upgrade"): the previous
release's code made the schema and the data, with jobs in flight, and this release's
migrations and processes take over.

The previous release is ``PREVIOUS_RELEASE``: main as it stood before issue 22's first
migration (accounts 0016_webhooks). Its files are taken from git into a folder of their
own and run there, on a database of their own: ``manage.py migrate``, then a project
with a job run and charged, one in Slurm, and one saved whose submission task waits in
the broker. Then this release migrates that database and its worker (with beat) starts:
it takes the old release's task, the queue sync and accounting finish the jobs, each is
charged once, and ``check_invariants`` is clean.
"""

import json
import os
import subprocess
import sys
import tarfile
import uuid

import psycopg
import pytest
from django.conf import settings
from django.db import connection
from psycopg import sql

from tests.conftest import REPO, running_worker, workdir_of
from tests.factories import wait_for
from tests.slurm_accounts import DEV_CLUSTER, SlurmOperator

# Runs only processes and a database of its own: it runs beside the other tests.
# Exclusive: the previous release reads everyone's queue with the parser issue 33 replaced,
# which another test's crafted job name (tests/security/test_crafted_names.py) stops.
pytestmark = [pytest.mark.fault(own_processes=True), pytest.mark.slurm, pytest.mark.exclusive]

# The last commit on main before issue 22's migrations (git log -- */migrations).
PREVIOUS_RELEASE = "37ee6782a8f1a438fb2c87b2ff416fef56f44562"

# Run by the previous release (``manage.py shell -c``), so only with what it had.
OLD_RELEASE_AT_WORK = """
import datetime as dt, json, os, time
from django.utils import timezone
from accounts.ledger import allocation_grant
from accounts.reconcile import reconcile
from accounts.services import membership_set, project_create, user_create
from clusters.services import cluster_probe, cluster_register, partitions_sync
from jobs.accounting import accounting_sync
from jobs.models import Job
from jobs.queue_sync import queue_sync
from jobs.requests import JobRequest
from jobs.services import job_create
from jobs.submission import job_submit

account, workdir = os.environ["DRILL_ACCOUNT"], os.environ["DRILL_WORKDIR"]
alice = user_create(username="alice", password="alice-pass-1234", posix_username="alice")
cluster = cluster_register(name=os.environ["DRILL_CLUSTER"])
partitions_sync(cluster=cluster)
cluster_probe(cluster=cluster)
project = project_create(slug=account, name=account, slurm_account=account)
membership_set(project=project, user=alice, role="pi")
today = timezone.localdate()
allocation_grant(project=project, cluster=cluster, gpu_hours=100, actor=None, reason="drill",
                 starts_on=today - dt.timedelta(days=1), ends_on=today + dt.timedelta(days=30))
report = reconcile(cluster=cluster)
assert not report.errors, report.errors

def job(name, script):
    request = JobRequest(project=account, partition="debug", name=name, gpus_per_node=1,
                         time_limit_minutes=5, working_directory=workdir, script=script)
    return job_create(user=alice, request=request)

done = job("done", "true\\n")
job_submit(job_id=done.pk)
deadline = time.monotonic() + 60
while Job.objects.get(pk=done.pk).used_gpu_seconds is None:
    assert time.monotonic() < deadline, "the previous release did not charge its job"
    queue_sync(cluster=cluster)
    accounting_sync(cluster=cluster)
    time.sleep(0.3)
in_slurm = job("in-slurm", "sleep 3\\n")
job_submit(job_id=in_slurm.pk)
saved = job("saved", "true\\n")  # its task waits in the broker
print(json.dumps({"done": done.pk, "in_slurm": in_slurm.pk, "saved": saved.pk}))
"""


@pytest.fixture
def previous_release(tmp_path):
    """The previous release's files, from git, in a folder of their own."""
    found = subprocess.run(
        ["git", "-C", str(REPO), "cat-file", "-e", f"{PREVIOUS_RELEASE}^{{commit}}"],
        capture_output=True, check=False,
    )  # fmt: skip
    if found.returncode != 0:
        pytest.fail(
            f"The upgrade drill needs the previous release, commit {PREVIOUS_RELEASE}, in "
            f"the git history of {REPO}: run it from a full clone (`git fetch --unshallow`).",
            pytrace=False,
        )
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", PREVIOUS_RELEASE],
        capture_output=True, check=True,
    )  # fmt: skip
    folder = tmp_path / "previous-release"
    folder.mkdir()
    (tmp_path / "previous.tar").write_bytes(archive.stdout)
    with tarfile.open(tmp_path / "previous.tar") as tar:
        tar.extractall(folder, filter="data")
    return folder


def admin(statement: sql.Composed) -> None:
    with psycopg.connect(
        host="127.0.0.1", dbname="postgres", user="portal",
        password=settings.DATABASE_PASSWORD, autocommit=True, connect_timeout=5,
    ) as db:  # fmt: skip
        db.execute(statement)


@pytest.fixture
def drill_database():
    """A database of the drill's own; yields its URL."""
    name = sql.Identifier(f"{connection.settings_dict['NAME']}_upgrade")
    admin(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
    admin(sql.SQL("CREATE DATABASE {}").format(name))
    try:
        yield f"postgresql://portal@127.0.0.1:5432/{connection.settings_dict['NAME']}_upgrade"
    finally:
        admin(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))


@pytest.fixture
def alices_workdir():
    yield from workdir_of("alice")


def manage(code_dir, env: dict[str, str], *arguments: str) -> str:
    """``manage.py`` of the release in ``code_dir``; its output."""
    done = subprocess.run(
        [sys.executable, "manage.py", *arguments], cwd=code_dir,
        env={**os.environ, **env}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"manage.py {arguments[0]} in {code_dir}:\n{done.stderr[-3000:]}"
    return done.stdout


def test_an_upgrade_from_the_previous_release_with_jobs_in_flight(
    previous_release, drill_database, alices_workdir, slurm_stack
):
    account = f"u{uuid.uuid4().hex[:10]}"
    queue = f"test-{uuid.uuid4().hex[:8]}"
    env = {"PORTAL_DATABASE_URL": drill_database, "PORTAL_TASK_QUEUE": queue}

    def rows(query: str, *params: object) -> list[tuple]:
        with psycopg.connect(
            drill_database, password=settings.DATABASE_PASSWORD, connect_timeout=5
        ) as db:
            return db.execute(query, params).fetchall()

    try:
        manage(previous_release, env, "migrate", "--no-input")
        old_env = {**env, "DRILL_ACCOUNT": account, "DRILL_WORKDIR": str(alices_workdir),
                   "DRILL_CLUSTER": DEV_CLUSTER}  # fmt: skip
        out = manage(previous_release, old_env, "shell", "-c", OLD_RELEASE_AT_WORK)
        jobs = json.loads(out.strip().splitlines()[-1])
        assert rows("SELECT id, state FROM jobs_job ORDER BY id") == [
            (jobs["done"], "completed"),
            (jobs["in_slurm"], "pending"),
            (jobs["saved"], "new"),
        ]
        assert rows("SELECT count(*) FROM django_migrations WHERE name = '0016_webhooks'") == [
            (0,)
        ], "the previous release predates issue 22's migrations"

        # This release: migrate first, then its worker and beat.
        manage(REPO, env, "migrate", "--no-input")
        with running_worker(beat=True, queue=queue, **env):
            wait_for(
                lambda: (
                    rows(
                        "SELECT count(*) FROM jobs_job WHERE state = 'completed' "
                        "AND used_gpu_seconds IS NOT NULL"
                    )
                    == [(3,)]
                ),
                what="the jobs in flight to end and be charged",
                interval_s=1,
            )
            invariants = manage(REPO, env, "check_invariants", f"--cluster={DEV_CLUSTER}")
    finally:
        SlurmOperator(DEV_CLUSTER).account_remove(account)

    # Each job once in Slurm and charged once, what accounting says it used: the one the
    # previous release charged under its old reference (`<cluster>:<id>`), the others per run.
    charged = rows(
        "SELECT job.id, job.slurm_job_id, job.used_gpu_seconds, -entry.gpu_seconds "
        "FROM jobs_job job JOIN accounts_ledgerentry entry "
        "ON entry.kind = 'charge' AND (entry.reference = %s || ':' || job.slurm_job_id "
        "OR entry.reference LIKE %s || ':' || job.slurm_job_id || '@%%') "
        "ORDER BY job.id",
        DEV_CLUSTER,
        DEV_CLUSTER,
    )
    assert [row[0] for row in charged] == [jobs["done"], jobs["in_slurm"], jobs["saved"]]
    assert [(used, charge) for _, _, used, charge in charged if used != charge] == []
    assert charged[1][2] > 0, "three seconds on a GPU"
    assert rows("SELECT count(*) FROM accounts_ledgerentry WHERE kind = 'charge'") == [(3,)]
    submissions = rows(
        "SELECT job.id, count(record.id) FROM jobs_job job LEFT JOIN jobs_accountingrecord "
        "record ON record.comment = 'portal:' || job.submit_token GROUP BY job.id ORDER BY job.id"
    )
    assert [count for _, count in submissions] == [1, 1, 1]
    used = sum(row[3] for row in charged)
    assert rows(
        "SELECT granted_gpu_seconds, used_gpu_seconds, held_gpu_seconds FROM accounts_allocation"
    ) == [(100 * 3600, used, 0)]
    assert invariants.endswith("No invariant violations.\n"), invariants
