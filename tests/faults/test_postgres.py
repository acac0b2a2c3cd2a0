"""A private PostgreSQL instance restarts while a worker with beat processes a burst:
tasks that meet the restart fail or retry, the sweeper picks their jobs up, no job is
left in new/submitting, each reaches Slurm once, the invariants hold.

Other engineers share the machine's PostgreSQL, so this test never touches it: it
starts its own (initdb into a temporary directory, on a free port) and runs the portal's
processes — the worker and the web side's job creation — against that one. Like the
shared one (dev/stack), it wants a password from every role: code inside a job runs on
this host too, and a server that trusted it would hand it a superuser for the test's
length."""

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.conftest import REPO, running_worker
from tests.factories import wait_for

# Its PostgreSQL, worker and beat are its own: it runs beside the other tests.
pytestmark = [pytest.mark.fault(own_processes=True), pytest.mark.slurm]

DATABASE = "portal_faults_pg"


def free_port() -> int:
    """A port nobody listens on now: a fixed one fails the run when a stray server holds it."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


PORT = free_port()
# The portal's own role, as on the shared server: no superuser (portal.E005 stops migrate).
URL = f"postgresql://portal@127.0.0.1:{PORT}/{DATABASE}"
# Made for this run; the portal's processes get theirs as a deployment passes it.
SUPERUSER_PASSWORD = secrets.token_urlsafe(24)
PORTAL_PASSWORD = secrets.token_urlsafe(24)
PORTAL_ENV = {"PORTAL_DATABASE_URL": URL, "PORTAL_DATABASE_PASSWORD": PORTAL_PASSWORD}


def as_postgres(*command: str) -> None:
    subprocess.run(["runuser", "-u", "postgres", "--", *command], check=True, capture_output=True)


def as_superuser(*statements: sql.Composed) -> None:
    with psycopg.connect(
        host="127.0.0.1", port=PORT, dbname="postgres", user="postgres",
        password=SUPERUSER_PASSWORD, autocommit=True, connect_timeout=5,
    ) as db:  # fmt: skip
        for statement in statements:
            db.execute(statement)


def refusal_without_password(user: str) -> str:
    """What the server says to ``user`` coming without a password (a job would)."""
    try:
        psycopg.connect(
            host="127.0.0.1", port=PORT, dbname="postgres", user=user,
            password="", connect_timeout=5,
        ).close()  # fmt: skip
    except psycopg.OperationalError as exc:
        return str(exc)
    return f"{user} got in without a password"


@pytest.fixture
def private_postgres():
    binaries = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: p.parent.name)[-1]
    home = Path(tempfile.mkdtemp(prefix="pg-faults-"))
    shutil.chown(home, "postgres", "postgres")
    data = home / "data"
    options = f"-p {PORT} -k {home} -c listen_addresses=127.0.0.1 -c fsync=off"
    pg_ctl = [str(binaries / "pg_ctl"), "-D", str(data), "-l", str(home / "log"), "-o", options]
    password_file = home / "password"
    password_file.write_text(SUPERUSER_PASSWORD)
    shutil.chown(password_file, "postgres", "postgres")
    password_file.chmod(0o600)
    as_postgres(str(binaries / "initdb"), "-D", str(data), "-U", "postgres",
                "-A", "scram-sha-256", f"--pwfile={password_file}")  # fmt: skip
    password_file.unlink()
    try:
        as_postgres(*pg_ctl, "-w", "start")
    except subprocess.CalledProcessError:
        log = home / "log"
        printed = log.read_text() if log.exists() else "(no log)"
        shutil.rmtree(home, ignore_errors=True)
        pytest.fail(f"the private PostgreSQL did not start:\n{printed}")
    try:
        as_superuser(
            sql.SQL("CREATE ROLE portal LOGIN CREATEDB PASSWORD {}").format(PORTAL_PASSWORD),
            sql.SQL("CREATE DATABASE {} OWNER portal").format(sql.Identifier(DATABASE)),
        )
        for user in ("postgres", "portal"):
            refusal = refusal_without_password(user)
            assert "no password supplied" in refusal, refusal
        yield lambda: as_postgres(*pg_ctl, "-w", "-m", "fast", "restart")
    finally:
        as_postgres(*pg_ctl, "-m", "immediate", "stop")
        shutil.rmtree(home, ignore_errors=True)


def portal(*arguments: str, queue: str = "unused") -> dict:
    env = {**os.environ, **PORTAL_ENV, "PORTAL_TASK_QUEUE": queue}
    result = subprocess.run(
        [sys.executable, "-m", "tests.faults.pg_driver", *arguments],
        cwd=REPO, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def count(query: str) -> int:
    with psycopg.connect(URL, password=PORTAL_PASSWORD, connect_timeout=2) as db:
        return db.execute(query).fetchone()[0]


def test_a_burst_survives_postgresql_restarting_under_it(private_postgres, slurm_stack, workdir):
    restart = private_postgres
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input"],
        cwd=REPO, env={**os.environ, **PORTAL_ENV}, check=True, capture_output=True,
    )  # fmt: skip
    account = portal("setup", str(workdir))["account"]
    try:
        with running_worker(
            beat=True,
            **PORTAL_ENV,
            PORTAL_SLURM_COMMAND_TIMEOUT_S="5",
            PORTAL_JOB_SUBMIT_CLAIM_S="20",
        ) as (queue, _, worker):
            env = {**os.environ, **PORTAL_ENV, "PORTAL_TASK_QUEUE": queue}
            burst = subprocess.Popen(
                [sys.executable, "-m", "tests.faults.pg_driver", "burst", str(workdir), account,
                 "16"],
                cwd=REPO, env=env, stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            wait_for(
                lambda: count("SELECT count(*) FROM jobs_job WHERE slurm_job_id IS NOT NULL") >= 3,
                timeout_s=60,
                what="the burst to flow",
            )
            restart()
            out, _ = burst.communicate(timeout=120)
            assert burst.returncode == 0
            created = json.loads(out.strip().splitlines()[-1])
            assert len(created["ids"]) == 16

            def settled() -> bool:
                return not count(
                    "SELECT count(*) FROM jobs_job WHERE state IN ('new', 'submitting') "
                    "OR (slurm_job_id IS NOT NULL AND used_gpu_seconds IS NULL)"
                )

            wait_for(settled, timeout_s=120, interval_s=1, what="the jobs to settle")
            assert worker.poll() is None, "the worker lived through the restart"
        report = portal("check", account)
    finally:
        subprocess.run(["scancel", f"--account={account}"], capture_output=True, check=False)
        subprocess.run(
            ["sacctmgr", "-i", "delete", "account", account], capture_output=True, check=False
        )
    assert report["states"] == ["completed"] * 16
    assert {c: [i] for c, i in report["portal"].items()} == report["in_slurm"]
    assert report["violations"] == []
