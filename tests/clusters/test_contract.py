"""One contract, every adapter: the Slurm client against the live dev cluster.

Each test runs once per backend (cli, rest).
"""

import datetime as dt
import os
import pwd
import subprocess
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from clusters.locks import association_changes
from clusters.models import Cluster
from clusters.slurm import NotFound, SlurmRejected, SlurmUnavailable, client_for
from clusters.slurm.rest import RestClient
from clusters.slurm.states import SlurmJobState
from clusters.slurm.types import PORTAL_ORGANIZATION, SubmitRequest
from tests.conftest import DEV_CLUSTER, REPO, stack_value
from tests.slurm_accounts import sacctmgr_change

# It runs beside the other test processes: every test that adds, moves or deletes
# accounts and associations holds the reconciler's lock (``association_lock``), as two
# writers at once make slurmdbd lose rows; only the one that stops slurmctld is exclusive.
pytestmark = [pytest.mark.slurm]
STACK = str(REPO / "dev" / "stack")
USER = "alice"
FORGER = "bob"
ACCOUNT = "contract"


@pytest.fixture(scope="module", autouse=True)
def contract_account(slurm_stack):
    """A POSIX user with an association in an account of the tests' own."""
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--create-home", USER], check=True)
    sacctmgr_change("add", "account", ACCOUNT, f"cluster={DEV_CLUSTER}")
    sacctmgr_change("add", "user", USER, f"account={ACCOUNT}", f"cluster={DEV_CLUSTER}")
    with association_changes(DEV_CLUSTER):
        clear_limit()  # a limit left by an interrupted run would hold every job of the account


@pytest.fixture
def association_lock():
    """Held by a test that changes accounts or associations, for the whole test."""
    with association_changes(DEV_CLUSTER):
        yield


def clear_limit() -> None:
    """(Under the association lock.)"""
    subprocess.run(
        ["sacctmgr", "-i", "modify", "account", "where", f"name={ACCOUNT}",
         f"cluster={DEV_CLUSTER}", "set", "GrpTRESMins=gres/gpu=-1,cpu=-1", "MaxSubmitJobs=-1"],
        capture_output=True, check=False,
    )  # fmt: skip


@pytest.fixture(params=["cli", "rest"])
def client(request, slurm_stack):
    backend = request.param
    cluster = Cluster(
        name=DEV_CLUSTER,
        backend=backend,
        rest_url=stack_value("SLURM_REST_URL"),
        jwt_key_file=stack_value("SLURM_JWT_KEY_FILE"),
        admin_user="slurm",
    )
    return client_for(cluster, timeout_s=10)


def job(**changes) -> SubmitRequest:
    home = pwd.getpwnam(USER).pw_dir
    request = SubmitRequest(
        user=USER,
        script="#!/bin/bash\nid -un\n",
        account=ACCOUNT,
        partition="debug",
        name="contract",
        time_limit_minutes=5,
        working_directory=home,
        stdout_path=f"{home}/contract-%j.out",
        stderr_path=f"{home}/contract-%j.err",
        gpus_per_node=1,
        comment=f"portal:{uuid.uuid4()}",
    )
    return replace(request, **changes)


def wait_for(what: str, probe, timeout_s: float = 45):
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def accounted(client, job_id: int, *, ended: bool = True):
    since = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=10)

    def probe():
        for entry in client.accounting_since(since):
            if entry.job_id == job_id and (entry.ended_at or not ended):
                return entry
        return None

    return wait_for(f"job {job_id} in accounting", probe)


def queued(client, job_id: int):
    return next((entry for entry in client.queue() if entry.job_id == job_id), None)


def test_a_job_runs_as_its_owner_and_is_accounted_with_its_gpus(client):
    request = job(script="#!/bin/bash\nid -un\nsleep 2\n", gpus_per_node=2)
    job_id = client.submit(request)
    entry = accounted(client, job_id)
    assert entry.state == SlurmJobState.COMPLETED
    assert (entry.user, entry.account, entry.partition) == (USER, ACCOUNT, "debug")
    assert entry.allocated_gpus == 2
    assert entry.elapsed_s >= 2
    assert entry.exit_code == 0
    assert entry.comment == request.comment
    assert entry.started_at <= entry.ended_at
    output = request.stdout_path.replace("%j", str(job_id))
    assert Path(output).read_text().strip() == USER


def test_a_failing_job_keeps_its_exit_code(client):
    entry = accounted(client, client.submit(job(script="#!/bin/bash\nexit 3\n")))
    assert entry.state == SlurmJobState.FAILED
    assert entry.exit_code == 3


def test_a_job_sees_only_the_environment_it_was_given(client, monkeypatch):
    monkeypatch.setenv("SBATCH_TIMELIMIT", "1")
    monkeypatch.setenv("SLURM_PORTAL_LEAK", "leak")
    monkeypatch.setenv("PORTAL_SECRET_KEY", "s3cret-of-the-worker")
    request = job(script="#!/bin/bash\nenv\n", environment={"FOO": "bar baz", "N": "1"})
    job_id = client.submit(request)
    accounted(client, job_id)
    env = Path(request.stdout_path.replace("%j", str(job_id))).read_text()
    assert "FOO=bar baz\n" in env and "N=1\n" in env
    assert "s3cret-of-the-worker" not in env
    assert "SLURM_PORTAL_LEAK" not in env
    assert "SBATCH_TIMELIMIT" not in env
    assert "SLURM_JOB_PARTITION=debug" in env


def found(client, request: SubmitRequest, *, since: dt.datetime | None = None) -> list[int]:
    """What a submission's retry would find of ``request`` (its own user and account)."""
    since = since or dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    return client.find_by_comment(
        request.comment, user=request.user, account=request.account, since=since
    )


def test_a_job_whose_id_was_lost_is_found_by_its_token(client):
    request = job(script="#!/bin/bash\nsleep 20\n")
    job_id = client.submit(request)  # pretend the worker died before recording this id
    assert found(client, request) == [job_id]
    client.cancel(job_id, user=USER)
    assert found(client, replace(request, comment=f"portal:{uuid.uuid4()}")) == []


def test_a_job_that_left_the_queue_is_found_in_accounting(client):
    request = job(script="#!/bin/bash\ntrue\n")
    submitted = time.monotonic()
    job_id = client.submit(request)
    wait_for("the job to leave the queue", lambda: queued(client, job_id) is None, 60)
    assert found(client, request) == [job_id]
    # Accounting is read from ``since`` on (less the rest adapter's 10 s of slack for
    # slurmrestd's clock): a job submitted and ended before it is not looked at.
    time.sleep(max(0.0, submitted + 13 - time.monotonic()))
    assert found(client, request, since=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)) == []
    # Nor is anything when ``since`` is still to come on Slurm's clock.
    assert found(client, request, since=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)) == []


@pytest.fixture
def forger():
    """bob, with an association in the contract account: he may run jobs there too."""
    sacctmgr_change("add", "user", FORGER, f"account={ACCOUNT}", f"cluster={DEV_CLUSTER}")
    yield FORGER
    subprocess.run(
        ["scancel", f"--user={FORGER}", f"--account={ACCOUNT}"], capture_output=True, check=False
    )


def test_a_token_copied_onto_another_users_job_is_not_found(client, forger):
    request = job(script="#!/bin/bash\nsleep 20\n")
    home = pwd.getpwnam(forger).pw_dir
    forged = client.submit(
        replace(request, user=forger, working_directory=home,
                stdout_path=f"{home}/forged-%j.out", stderr_path=f"{home}/forged-%j.err")
    )  # fmt: skip
    assert found(client, request) == []  # queued: the queue is read
    client.cancel(forged, user=forger)
    accounted(client, forged)
    assert found(client, request) == []  # ended: accounting is read
    own = client.submit(request)
    assert found(client, request) == [own]
    client.cancel(own, user=USER)


def test_cancel_ends_a_job_and_is_safe_to_repeat(client):
    job_id = client.submit(job(script="#!/bin/bash\nsleep 60\n"))
    client.cancel(job_id, user=USER)
    assert accounted(client, job_id).state == SlurmJobState.CANCELLED
    client.cancel(job_id, user=USER)  # already ended: no error


def test_a_job_cancelled_before_it_was_ever_eligible_is_accounted_as_cancelled(client):
    running = client.submit(job(script="#!/bin/bash\nsleep 120\n"))
    try:
        waiting = client.submit(job(after_ok=(running,)))
        entry = wait_for("the job to wait", lambda: queued(client, waiting), 30)
        assert entry.reason == "Dependency"
        client.cancel(waiting, user=USER)
        ended = accounted(client, waiting)
        assert ended.state == SlurmJobState.CANCELLED
        assert (ended.elapsed_s, ended.allocated_gpus) == (0, 0)
    finally:
        client.cancel(running, user=USER)


def test_cancelling_an_unknown_job_is_not_found(client):
    with pytest.raises(NotFound):
        client.cancel(99_999_999, user=USER)


def test_hold_and_release(client):
    blocker = client.submit(job(script="#!/bin/bash\nsleep 60\n"))
    job_id = client.submit(job(after_ok=(blocker,)))
    try:
        client.hold(job_id, user=USER)
        entry = wait_for("the hold", lambda: (e := queued(client, job_id)) and
                         e.reason.startswith("JobHeld") and e)  # fmt: skip
        assert entry.state == SlurmJobState.PENDING
        client.release(job_id, user=USER)
        entry = wait_for("the release", lambda: (e := queued(client, job_id)) and
                         not e.reason.startswith("JobHeld") and e)  # fmt: skip
        assert entry.state == SlurmJobState.PENDING  # still waiting for its dependency
        assert entry.reason in {"None", "Dependency"}
    finally:
        client.cancel(job_id, user=USER)
        client.cancel(blocker, user=USER)


@pytest.mark.parametrize(
    ("changes", "slurm_says"),
    [
        ({"account": "no-such-account"}, "Invalid account"),
        ({"gpus_per_node": 9}, "Requested node configuration is not available"),
        ({"partition": "no-such-partition"}, "nvalid partition"),
        ({"time_limit_minutes": 120}, "time limit"),
    ],
)
def test_a_refused_submission_carries_slurms_message(client, changes, slurm_says):
    with pytest.raises(SlurmRejected) as refused:
        client.submit(job(**changes))
    assert slurm_says.lower() in refused.value.message.lower()


def test_the_queue_lists_pending_array_tasks(client):
    blocker = client.submit(job(script="#!/bin/bash\nsleep 60\n"))
    array_id = client.submit(job(array="0-3%2", after_ok=(blocker,)))
    try:
        entries = [e for e in client.queue() if e.array_job_id == array_id]
        assert entries and all(e.state == SlurmJobState.PENDING for e in entries)
        assert entries[0].array_task in {"0-3%2", "[0-3%2]"}
    finally:
        client.cancel(array_id, user=USER)
        client.cancel(blocker, user=USER)


def test_it_lists_the_partitions_with_their_limits(client):
    partitions = {p.name: p for p in client.list_partitions()}
    assert partitions["gpu"].is_default and partitions["gpu"].max_time_minutes == 7 * 24 * 60
    assert partitions["debug"].max_time_minutes == 60
    assert partitions["debug"].gpus_per_node == 8 and partitions["debug"].gpu_type == "h200"


def test_an_estimate_submits_nothing(client):
    request = job()
    estimate = client.estimate_start(request)
    if estimate.starts_at is not None:
        assert estimate.starts_at < dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    assert found(client, request) == []


@pytest.mark.usefixtures("association_lock")
def test_accounts_and_associations_are_ensured_once(client):
    account = f"c{uuid.uuid4().hex[:10]}"
    try:
        assert client.ensure_account(account, description="contract test") is True
        assert client.ensure_account(account, description="contract test") is False
        assert client.ensure_user_association(user=USER, account=account) is True
        assert client.ensure_user_association(user=USER, account=account) is False
        if limits_supported(client):
            assert client.minutes_used(account).gpu == 0
    finally:
        subprocess.run(["sacctmgr", "-i", "delete", "account", account], capture_output=True)


@pytest.mark.usefixtures("association_lock")
def test_an_accounts_organization_tells_the_portals_accounts_from_others(client):
    account = f"c{uuid.uuid4().hex[:10]}"
    with pytest.raises(NotFound):
        client.account_organization(account)
    try:
        client.ensure_account(account, description="contract test")
        assert client.account_organization(account) == PORTAL_ORGANIZATION
        assert client.account_organization("root") == "root"  # made by Slurm, not us
    finally:
        subprocess.run(["sacctmgr", "-i", "delete", "account", account], capture_output=True)


# slurmrestd 22.05 answers "success" to a change of an account's own association
# but applies nothing, and exposes no usage: the adapter refuses plainly instead
# (see its module).
def limits_supported(client) -> bool:
    return client.__class__.__name__ != "RestClient"


@pytest.mark.usefixtures("association_lock")
def test_a_gpu_minutes_limit_makes_an_over_budget_job_pend(client):
    if not limits_supported(client):
        # slurmrestd 22.05 usually answers "success" and applies nothing (sometimes it
        # does apply): the adapter reads the limit back and refuses when it did not stick.
        try:
            client.set_gpu_minutes_limit(ACCOUNT, 1)
        except SlurmRejected as refused:
            assert "22.05" in refused.message or "22.5" in refused.message
        else:
            assert client.account_limits(ACCOUNT).gpu_minutes == 1
        finally:
            clear_limit()
        with pytest.raises(SlurmRejected):
            client.minutes_used(ACCOUNT)
        return
    client.set_gpu_minutes_limit(ACCOUNT, 1)
    try:
        job_id = client.submit(job(time_limit_minutes=5, script="#!/bin/bash\nsleep 1\n"))
        entry = wait_for("the limit to hold the job", lambda: (e := queued(client, job_id)) and
                         e.reason.startswith("AssocGrp") and e)  # fmt: skip
        assert entry.state == SlurmJobState.PENDING
        assert entry.reason == "AssocGrpGRESMinutes"
        client.set_gpu_minutes_limit(ACCOUNT, None)
        assert accounted(client, job_id).state == SlurmJobState.COMPLETED
    finally:
        client.set_gpu_minutes_limit(ACCOUNT, None)


@pytest.mark.usefixtures("association_lock")
def test_a_cpu_minutes_limit_and_max_submit_jobs_are_set_read_and_removed(client):
    # An account of its own: slurmctld's copy of the shared one's associations can lag
    # behind slurmdbd after the daemons were restarted, and other runs change its limits.
    account = f"c{uuid.uuid4().hex[:10]}"
    try:
        client.ensure_account(account, description="contract test")
        client.ensure_user_association(user=USER, account=account)
        if not limits_supported(client):
            for change in (
                lambda: client.set_cpu_minutes_limit(account, 7),
                lambda: client.set_max_submit_jobs(account, 7),
            ):
                try:
                    change()
                except SlurmRejected as refused:
                    assert "22.05" in refused.message
            with pytest.raises(SlurmRejected):
                client.minutes_used(account)
            return
        client.set_gpu_minutes_limit(account, 50)
        client.set_cpu_minutes_limit(account, 7)
        client.set_max_submit_jobs(account, 3)
        # One TRES changes without the other; a repeat is no error.
        assert (
            client.account_limits(account).gpu_minutes,
            client.account_limits(account).cpu_minutes,
        ) == (50, 7)
        client.set_cpu_minutes_limit(account, 7)
        assert client.account_limits(account).max_submit_jobs == 3
        assert client.minutes_used(account).cpu == 0
        # Slurm counts each array task: four are one too many.
        with pytest.raises(SlurmRejected, match="job submit limit"):
            client.submit(job(account=account, array="0-3"))
        client.set_cpu_minutes_limit(account, None)
        client.set_max_submit_jobs(account, None)
        assert (
            client.account_limits(account).cpu_minutes,
            client.account_limits(account).max_submit_jobs,
        ) == (None, None)
        assert client.account_limits(account).gpu_minutes == 50
    finally:
        subprocess.run(["scancel", f"--account={account}"], capture_output=True)
        subprocess.run(["sacctmgr", "-i", "delete", "account", account], capture_output=True)


def test_usage_of_an_unknown_account_is_not_found(client):
    with pytest.raises(NotFound):
        client.minutes_used("no-such-account")
    with pytest.raises(NotFound):
        client.account_limits("no-such-account")


@pytest.mark.exclusive  # it stops the controller every test process uses
@pytest.mark.parametrize("component", ["slurmctld"])
def test_a_stopped_controller_is_unavailable_within_the_timeout(client, component):
    subprocess.run([STACK, "stop", component], check=True, capture_output=True)
    try:
        started = time.monotonic()
        with pytest.raises(SlurmUnavailable):
            client.queue()
        with pytest.raises(SlurmUnavailable):
            client.ping()
        assert time.monotonic() - started < 2 * 12  # two calls, each bounded by its timeout
    finally:
        subprocess.run([STACK, "start", component], check=True, capture_output=True)


def test_the_worker_environment_is_not_passed_to_slurm_tools(client, monkeypatch):
    # A worker's SLURM_* variables would redirect or reshape every command.
    monkeypatch.setenv("SLURM_CONF", "/nonexistent/slurm.conf")
    monkeypatch.setenv("SQUEUE_FORMAT", "%i")
    assert isinstance(client.queue(), list)
    assert os.environ["SLURM_CONF"] == "/nonexistent/slurm.conf"


@pytest.mark.usefixtures("association_lock")
def test_associations_are_listed_and_removed_with_the_default_account_moved(client):
    first, second = (f"c{uuid.uuid4().hex[:10]}" for _ in range(2))
    user = "bob"  # a demo POSIX user; created here if the demo data is not seeded
    try:
        pwd.getpwnam(user)
    except KeyError:
        subprocess.run(["useradd", "--create-home", user], check=True)
    try:
        for account in (first, second):
            subprocess.run(["sacctmgr", "-i", "add", "account", account], capture_output=True)
            subprocess.run(
                ["sacctmgr", "-i", "add", "user", user, f"account={account}"], capture_output=True
            )
        subprocess.run(
            ["sacctmgr", "-i", "modify", "user", user, "set", f"DefaultAccount={first}"],
            capture_output=True,
        )
        assert user in client.account_limits(first).users
        assert client.remove_user_association(user=user, account=first) is True
        assert client.remove_user_association(user=user, account=first) is False
        assert user not in client.account_limits(first).users
        assert user in client.account_limits(second).users
        with pytest.raises(NotFound):
            client.account_limits("no-such-account")
    finally:
        for account in (first, second):
            subprocess.run(["sacctmgr", "-i", "delete", "account", account], capture_output=True)


@pytest.mark.usefixtures("association_lock")
def test_the_gpu_minutes_limit_reads_back(client):
    if not limits_supported(client):
        # slurmrestd can still read it, even where it cannot set it.
        if isinstance(client, RestClient):
            assert client.account_limits(ACCOUNT).gpu_minutes is None
        return
    try:
        client.set_gpu_minutes_limit(ACCOUNT, 6000)
        assert client.account_limits(ACCOUNT).gpu_minutes == 6000
    finally:
        client.set_gpu_minutes_limit(ACCOUNT, None)
    assert client.account_limits(ACCOUNT).gpu_minutes is None


@pytest.mark.usefixtures("association_lock")
def test_job_count_limits_read_back_and_blocking_refuses_sbatch(client):
    # An account of its own: blocking the shared one would refuse other tests' jobs.
    account = f"b{uuid.uuid4().hex[:10]}"
    subprocess.run(
        ["sacctmgr", "-i", "add", "account", account, f"cluster={DEV_CLUSTER}"],
        capture_output=True, check=True,
    )  # fmt: skip
    subprocess.run(
        ["sacctmgr", "-i", "add", "user", USER, f"account={account}", f"cluster={DEV_CLUSTER}"],
        capture_output=True, check=True,
    )  # fmt: skip
    blocked = {"GrpSubmitJobs": 0, "GrpJobs": 0}
    try:
        assert client.account_limits(account).job_counts == {"GrpSubmitJobs": None, "GrpJobs": None}
        if limits_supported(client):
            client.set_job_count_limits(account, blocked)
        else:
            # As with GrpTRESMins: slurmrestd 22.05 says success and (usually) applies
            # nothing; the adapter reads back and refuses plainly. sacctmgr blocks instead.
            try:
                client.set_job_count_limits(account, blocked)
            except SlurmRejected as refused:
                assert "22.05" in refused.message
            subprocess.run(
                ["sacctmgr", "-i", "modify", "account", "where", f"name={account}",
                 f"cluster={DEV_CLUSTER}", "set", "GrpSubmitJobs=0", "GrpJobs=0"],
                capture_output=True, check=True,
            )  # fmt: skip
        assert client.account_limits(account).job_counts == blocked
        with pytest.raises(SlurmRejected, match=r"AssocGrpSubmitJobsLimit|job submit limit"):
            client.submit(replace(job(), account=account))
        if limits_supported(client):
            client.set_job_count_limits(account, {"GrpSubmitJobs": None, "GrpJobs": 3})
            assert client.account_limits(account).job_counts == {
                "GrpSubmitJobs": None,
                "GrpJobs": 3,
            }
    finally:
        subprocess.run(["sacctmgr", "-i", "delete", "account", account], capture_output=True)
    with pytest.raises(NotFound):
        client.account_limits(account)
