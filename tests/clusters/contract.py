"""One contract, every adapter: the Slurm client against the live dev clusters.

The tests and fixtures are here; each cluster's module imports them all and says which
cluster it is (``make_site``): ``test_contract_dev.py`` runs them on portal-dev (Slurm
22.05, ``dev/stack``; rest speaks v0.0.38 there), ``test_contract_next.py`` on
portal-next (Slurm 24.11, ``dev/cluster-next``; rest speaks v0.0.42 there), so the two
run on separate test processes. In each, every test runs for the cli and the rest
backend. Where 22.05's REST API cannot do something (account limits, usage) the tests
check that the rest adapter refuses plainly; on 24.11 they check that it does it.
"""

import copy
import datetime as dt
import os
import pwd
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from clusters.locks import association_changes
from clusters.models import Cluster
from clusters.slurm import NotFound, SlurmRejected, client_for
from clusters.slurm.cli import CliClient, slurm_environment
from clusters.slurm.parsing import TEXT_WIDTH, expand_hostlist, sacct_record, squeue_record
from clusters.slurm.rest import RestClient
from clusters.slurm.rest_parsing import reshaped
from clusters.slurm.states import SlurmJobState
from clusters.slurm.types import PORTAL_ORGANIZATION, Listing, Refused, SubmitRequest
from portal.devstack import CLUSTER_NEXT, NEXT_CLUSTER, STACK, is_running, script_env
from tests.conftest import DEV_CLUSTER
from tests.security.test_stack_secrets import Watcher
from tests.slurm_accounts import DEV, SlurmOperator

# It runs beside the other test processes: every test that adds, moves or deletes
# accounts and associations holds the reconciler's lock (``association_lock``), as two
# writers at once make slurmdbd lose rows; only the one that stops slurmctld is exclusive.
pytestmark = [pytest.mark.slurm]
USER = "alice"
FORGER = "bob"
ACCOUNT = "contract"


@dataclass(frozen=True)
class Site:
    """A cluster the contract runs on: how the worker reaches it, and what it has."""

    cluster: Cluster  # unsaved: its name, REST URL, JWT key and client tools
    slurm: SlurmOperator  # its tools as the worker's own user runs them
    default_partition: str
    short_partition: str  # one hour at most
    gpus_per_node: int
    gpu_type: str


def dev_site() -> Site:
    env = script_env(STACK)
    cluster = Cluster(
        name=DEV_CLUSTER,
        rest_url=env["SLURM_REST_URL"],
        jwt_key_file=env["SLURM_JWT_KEY_FILE"],
        admin_user="slurm",
    )
    return Site(cluster, DEV, "gpu", "debug", gpus_per_node=8, gpu_type="h200")


def next_site() -> Site:
    if os.environ.get("PORTAL_CLUSTER_NEXT") == "off":
        pytest.skip(f"PORTAL_CLUSTER_NEXT=off: the stack runs no {NEXT_CLUSTER}")
    if not is_running(CLUSTER_NEXT):
        pytest.fail(f"{NEXT_CLUSTER} is not running; `dev/stack start` starts it", pytrace=False)
    env = script_env(CLUSTER_NEXT)
    cluster = Cluster(
        name=env["SLURM_CLUSTER_NAME"],
        rest_url=env["SLURM_REST_URL"],
        jwt_key_file=env["SLURM_JWT_KEY_FILE"],
        admin_user="slurm",
        command_prefix=env["SLURM_COMMAND_PREFIX"],
        run_as_prefix=env["SLURM_RUN_AS_PREFIX"],
    )
    operator = SlurmOperator(cluster.name, cluster.command_prefix)
    return Site(cluster, operator, "batch", "short", gpus_per_node=4, gpu_type="b200")


@pytest.fixture(scope="module")
def site(request, slurm_stack) -> Site:
    """The test module's cluster (its ``make_site``), with a POSIX user associated to an
    account of the tests' own."""
    site = request.module.make_site()
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--create-home", USER], check=True)
    name = site.cluster.name
    site.slurm.sacctmgr_change("add", "account", ACCOUNT, f"cluster={name}")
    site.slurm.sacctmgr_change("add", "user", USER, f"account={ACCOUNT}", f"cluster={name}")
    with association_changes(name):
        clear_limit(site)  # a limit left by an interrupted run would hold every job of the account
    return site


@pytest.fixture
def association_lock(site):
    """Held by a test that changes accounts or associations, for the whole test. The lock
    polls (every 50 ms): a pause after each release lets another process's reconcile in
    between two such tests rather than wait out the whole module."""
    with association_changes(site.cluster.name):
        yield
    time.sleep(0.2)


def clear_limit(site: Site) -> None:
    """(Under the association lock.)"""
    site.slurm.run(
        "sacctmgr", "-i", "modify", "account", "where", f"name={ACCOUNT}",
        f"cluster={site.cluster.name}", "set", "GrpTRESMins=gres/gpu=-1,cpu=-1",
        "MaxSubmitJobs=-1",
    )  # fmt: skip


@pytest.fixture(params=["cli", "rest"])
def client(request, site):
    backend = request.param
    cluster = copy.copy(site.cluster)
    cluster.backend = backend
    return client_for(cluster, timeout_s=10)


@pytest.fixture
def job(site) -> Callable[..., SubmitRequest]:
    """job(**changes): a small GPU job of USER's in the test account, on the site's
    short partition."""
    return lambda **changes: replace(new_job(site), **changes)


def new_job(site: Site) -> SubmitRequest:
    home = pwd.getpwnam(USER).pw_dir
    return SubmitRequest(
        user=USER,
        script="#!/bin/bash\nid -un\n",
        account=ACCOUNT,
        partition=site.short_partition,
        name="contract",
        time_limit_minutes=5,
        working_directory=home,
        stdout_path=f"{home}/contract-%j.out",
        stderr_path=f"{home}/contract-%j.err",
        gpus_per_node=1,
        comment=f"portal:{uuid.uuid4()}",
    )


def wait_for(what: str, probe, timeout_s: float = 45):
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def accounted(client, job_id: int, *, ended: bool = True):
    # The job was submitted a moment ago: a short window, so the read stays small however
    # many jobs the cluster ran lately (a benchmark's 10,000 make a 10-minute window of
    # slurmrestd 24.11 take longer than the client's timeout).
    since = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=2)

    def probe():
        for entry in client.accounting_since(since):
            if entry.job_id == job_id and (entry.ended_at or not ended):
                return entry
        return None

    return wait_for(f"job {job_id} in accounting", probe)


def queued(client, job_id: int):
    return next((entry for entry in client.queue() if entry.job_id == job_id), None)


def test_a_job_runs_as_its_owner_and_is_accounted_with_its_gpus(client, job):
    request = job(script="#!/bin/bash\nid -un\nsleep 2\n", gpus_per_node=2)
    job_id = client.submit(request)
    entry = accounted(client, job_id)
    assert entry.state == SlurmJobState.COMPLETED
    assert (entry.user, entry.account, entry.partition) == (USER, ACCOUNT, request.partition)
    assert entry.allocated_gpus == 2
    assert entry.elapsed_s >= 2
    assert entry.exit_code == 0
    assert entry.comment == request.comment
    assert entry.started_at <= entry.ended_at
    output = request.stdout_path.replace("%j", str(job_id))
    assert Path(output).read_text().strip() == USER


def test_the_queue_gives_gpus_nodes_priority_and_a_pending_job_s_forecast(client, job, site):
    """What the status page and the queue's explanations read: a running job's GPUs and
    nodes, a pending job's GPUs and Slurm's forecast of its start; and the node listing
    counts the running job's GPUs as allocated on its node."""
    running = client.submit(job(script="#!/bin/bash\nsleep 60\n", gpus_per_node=2))
    # Every GPU of the node: it waits for the running job (Resources), with a forecast.
    waiting = client.submit(job(gpus_per_node=site.gpus_per_node))
    try:
        entry = wait_for(
            "the job to run",
            lambda: (e := queued(client, running)) and e.state == SlurmJobState.RUNNING and e,
        )
        assert (entry.gpus, entry.expected_start_at) == (2, None)
        assert entry.priority > 0 and entry.started_at is not None
        nodes = {node.name: node for node in client.nodes()}
        [name] = expand_hostlist(entry.nodes)
        node = nodes[name]
        assert node.gpus_by_type == ((site.gpu_type, site.gpus_per_node),)
        assert site.short_partition in node.partitions
        assert node.allocated_gpus >= 2 and node.cpus >= node.allocated_cpus >= 1
        assert node.states[0] in ("mixed", "allocated")
        pending = wait_for(
            "Slurm's forecast of the waiting job's start",
            lambda: (e := queued(client, waiting)) and e.expected_start_at and e,
        )
        assert pending.state == SlurmJobState.PENDING
        assert (pending.gpus, pending.nodes, pending.started_at) == (site.gpus_per_node, "", None)
        assert pending.expected_start_at > entry.started_at
    finally:
        client.cancel(waiting, user=USER)
        client.cancel(running, user=USER)


# Burns a CPU for about 3 s holding some 50 MB. jobacct_gather samples every 30 s on the
# dev clusters, so the work runs in an srun step that asks for a sample every second.
BURN = (
    "#!/bin/bash\n"
    "srun --acctg-freq=task=1 /bin/bash -c 'head -c 50000000 /dev/zero | tail >/dev/null;"
    " end=$((SECONDS+3)); while [ $SECONDS -lt $end ]; do :; done'\n"
)


def test_an_ended_jobs_usage_comes_back_from_its_steps(client, job):
    entry = accounted(client, client.submit(job(script=BURN, mem_per_gpu_mb=700)))
    assert entry.state == SlurmJobState.COMPLETED
    # TotalCPU, of the steps (the job's own says 0 in REST); 3 s of burning, less under load
    assert entry.cpu_time_s > 0.2
    assert entry.cpu_time_s <= entry.elapsed_s * entry.allocated_cpus + 1
    assert entry.mem_peak_bytes > 0  # MaxRSS, of the steps
    assert entry.mem_allocated_bytes == 700 * 2**20
    assert entry.time_limit_minutes == 5
    # Fake GPUs: no NVML, so nothing recorded, which is not 0.
    assert entry.gpu_util_percent is None and entry.gpu_mem_peak_bytes is None


def test_a_failing_job_keeps_its_exit_code(client, job):
    entry = accounted(client, client.submit(job(script="#!/bin/bash\nexit 3\n")))
    assert entry.state == SlurmJobState.FAILED
    assert entry.exit_code == 3


def test_a_job_sees_only_the_environment_it_was_given(client, job, monkeypatch):
    monkeypatch.setenv("SBATCH_TIMELIMIT", "1")
    monkeypatch.setenv("SLURM_PORTAL_LEAK", "leak")
    monkeypatch.setenv("PORTAL_SECRET_KEY", "s3cret-of-the-worker")
    token = f"s3cret-{uuid.uuid4().hex}"
    request = job(
        script="#!/bin/bash\nenv\nsrun --ntasks=1 /usr/bin/env | sed s/^/step:/\n",
        environment={"FOO": "bar baz", "N": "1", "API_TOKEN": f"{token}, and more"},
    )
    # Any local user may read every command line: none of them holds a value.
    with Watcher() as watcher:
        job_id = client.submit(request)
    assert [line for line in watcher.seen if token in line] == []
    accounted(client, job_id)
    env = Path(request.stdout_path.replace("%j", str(job_id))).read_text()
    assert "FOO=bar baz\n" in env and "N=1\n" in env
    assert f"\nAPI_TOKEN={token}, and more\n" in env
    # srun steps inside the job get them too, by name.
    assert f"\nstep:API_TOKEN={token}, and more\n" in env and "step:FOO=bar baz\n" in env
    assert "s3cret-of-the-worker" not in env
    assert "SLURM_PORTAL_LEAK" not in env
    assert "SBATCH_TIMELIMIT" not in env
    assert f"SLURM_JOB_PARTITION={request.partition}\n" in env


def found(client, request: SubmitRequest, *, since: dt.datetime | None = None) -> list[int]:
    """What a submission's retry would find of ``request`` (its own user and account)."""
    since = since or dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    return client.find_by_comment(
        request.comment, user=request.user, account=request.account, since=since
    )


def test_a_job_whose_id_was_lost_is_found_by_its_token(client, job):
    request = job(script="#!/bin/bash\nsleep 20\n")
    job_id = client.submit(request)  # pretend the worker died before recording this id
    assert found(client, request) == [job_id]
    client.cancel(job_id, user=USER)
    assert found(client, replace(request, comment=f"portal:{uuid.uuid4()}")) == []


def test_a_job_that_left_the_queue_is_found_in_accounting(client, job):
    request = job(script="#!/bin/bash\ntrue\n")
    job_id = client.submit(request)
    wait_for("the job to leave the queue", lambda: queued(client, job_id) is None, 60)
    left = time.monotonic()  # it ended before (on a busy machine, long after its submission)
    assert found(client, request) == [job_id]
    # Accounting is read from ``since`` on (less the rest adapter's 10 s of slack for
    # slurmrestd's clock, and the second it rounds up): a job submitted and ended before
    # it is not looked at. Slurm keeps whole seconds, so its times may read up to a second
    # late.
    time.sleep(max(0.0, left + 15 - time.monotonic()))
    assert found(client, request, since=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)) == []
    # Nor is anything when ``since`` is still to come on Slurm's clock.
    assert found(client, request, since=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)) == []


@pytest.fixture
def forger(site):
    """bob, with an association in the contract account: he may run jobs there too."""
    site.slurm.sacctmgr_change(
        "add", "user", FORGER, f"account={ACCOUNT}", f"cluster={site.cluster.name}"
    )
    yield FORGER
    site.slurm.run("scancel", f"--user={FORGER}", f"--account={ACCOUNT}")


def test_a_token_copied_onto_another_users_job_is_not_found(client, job, forger):
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


def test_cancel_ends_a_job_and_is_safe_to_repeat(client, job):
    job_id = client.submit(job(script="#!/bin/bash\nsleep 60\n"))
    client.cancel(job_id, user=USER)
    assert accounted(client, job_id).state == SlurmJobState.CANCELLED
    client.cancel(job_id, user=USER)  # already ended: no error


def test_a_job_cancelled_before_it_was_ever_eligible_is_accounted_as_cancelled(client, job):
    running = client.submit(job(script="#!/bin/bash\nsleep 120\n"))
    try:
        waiting = client.submit(job(after_ok=(running,)))
        # Queued with the reason "None" until the scheduler's next pass looks at it.
        wait_for(
            "the job to wait on its dependency",
            lambda: getattr(queued(client, waiting), "reason", "") == "Dependency",
            30,
        )
        client.cancel(waiting, user=USER)
        ended = accounted(client, waiting)
        assert ended.state == SlurmJobState.CANCELLED
        assert (ended.elapsed_s, ended.allocated_gpus) == (0, 0)
    finally:
        client.cancel(running, user=USER)


def test_cancelling_an_unknown_job_is_not_found(client):
    with pytest.raises(NotFound):
        client.cancel(99_999_999, user=USER)


def test_hold_and_release(client, job):
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
        (lambda site: {"account": "no-such-account"}, "Invalid account"),
        (
            lambda site: {"gpus_per_node": site.gpus_per_node + 1},
            "Requested node configuration is not available",
        ),
        (lambda site: {"partition": "no-such-partition"}, "nvalid partition"),
        (lambda site: {"time_limit_minutes": 120}, "time limit"),
    ],
    ids=["account", "gpus", "partition", "time"],
)
def test_a_refused_submission_carries_slurms_message(client, site, job, changes, slurm_says):
    with pytest.raises(SlurmRejected) as refused:
        client.submit(job(**changes(site)))
    assert slurm_says.lower() in refused.value.message.lower()


def test_the_queue_lists_pending_array_tasks(client, job):
    blocker = client.submit(job(script="#!/bin/bash\nsleep 60\n"))
    array_id = client.submit(job(array="0-3%2", after_ok=(blocker,)))
    try:
        entries = [e for e in client.queue() if e.array_job_id == array_id]
        assert entries and all(e.state == SlurmJobState.PENDING for e in entries)
        assert entries[0].array_task in {"0-3%2", "[0-3%2]"}
    finally:
        client.cancel(array_id, user=USER)
        client.cancel(blocker, user=USER)


def test_the_queue_read_as_it_comes_lists_what_the_queue_lists(client, job):
    blocker = client.submit(job(script="#!/bin/bash\nsleep 60\n"))
    array_id = client.submit(job(array="0-3%2", after_ok=(blocker,)))
    try:
        with client.queue_stream() as entries:
            streamed = [
                (e.job_id, e.array_task, e.state) for e in entries if e.array_job_id == array_id
            ]
        listed = [
            (e.job_id, e.array_task, e.state) for e in client.queue() if e.array_job_id == array_id
        ]
        assert streamed and streamed == listed
        with client.queue_stream() as entries:
            next(entries)  # left after one entry: the read stops, nothing is raised
        assert queued(client, blocker) is not None
    finally:
        client.cancel(array_id, user=USER)
        client.cancel(blocker, user=USER)


def test_it_lists_the_partitions_with_their_limits(client, site):
    partitions = {p.name: p for p in client.list_partitions()}
    default, short = partitions[site.default_partition], partitions[site.short_partition]
    if limits_supported(client) and isinstance(client, RestClient):
        # 24.11's REST partitions carry no flags: which one is the default is unknown there.
        assert not any(p.is_default for p in partitions.values())
    else:
        assert default.is_default
    assert default.max_time_minutes == 7 * 24 * 60
    assert not short.is_default and short.max_time_minutes == 60
    assert (short.gpus_per_node, short.gpu_type) == (site.gpus_per_node, site.gpu_type)
    assert short.total_gpus == site.gpus_per_node and short.is_up


def test_an_estimate_submits_nothing(client, job):
    request = job()
    estimate = client.estimate_start(request)
    if estimate.starts_at is not None:
        assert estimate.starts_at < dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    assert found(client, request) == []


@pytest.mark.usefixtures("association_lock")
def test_accounts_and_associations_are_ensured_once(client, site):
    account = f"c{uuid.uuid4().hex[:10]}"
    try:
        assert client.ensure_account(account, description="contract test") is True
        assert client.ensure_account(account, description="contract test") is False
        assert client.ensure_user_association(user=USER, account=account) is True
        assert client.ensure_user_association(user=USER, account=account) is False
        with pytest.raises(NotFound):
            client.ensure_user_association(user=USER, account=f"n{uuid.uuid4().hex[:10]}")
        if limits_supported(client):
            used = client.minutes_used(account)
            assert used.gpu == 0
            # Its fair-share standing comes with it: a share of the tree, no usage yet.
            assert used.share is not None and 0 < used.share <= 1
            assert used.usage == 0
    finally:
        site.slurm.run("sacctmgr", "-i", "delete", "account", account)


@pytest.mark.usefixtures("association_lock")
def test_an_accounts_organization_tells_the_portals_accounts_from_others(client, site):
    account = f"c{uuid.uuid4().hex[:10]}"
    with pytest.raises(NotFound):
        client.account_organization(account)
    try:
        client.ensure_account(account, description="contract test")
        assert client.account_organization(account) == PORTAL_ORGANIZATION
        assert client.account_organization("root") == "root"  # made by Slurm, not us
    finally:
        site.slurm.run("sacctmgr", "-i", "delete", "account", account)


# slurmrestd 22.05 answers "success" to a change of an account's own association
# but applies nothing, and exposes no usage: the adapter refuses plainly instead
# (see its module). 24.11's (v0.0.40+) does both.
def limits_supported(client) -> bool:
    return not isinstance(client, RestClient) or reshaped(client._paths()[1])


@pytest.mark.usefixtures("association_lock")
def test_a_gpu_minutes_limit_makes_an_over_budget_job_pend(client, job, site):
    if not limits_supported(client):
        # slurmrestd 22.05 usually answers "success" and applies nothing (sometimes it
        # does apply): the adapter reads the limit back and refuses when it did not stick.
        try:
            client.set_account_limits(ACCOUNT, minutes={"gres/gpu": 1})
        except SlurmRejected as refused:
            assert "22.05" in refused.message or "22.5" in refused.message
        else:
            assert client.account_limits(ACCOUNT).gpu_minutes == 1
        finally:
            clear_limit(site)
        with pytest.raises(SlurmRejected):
            client.minutes_used(ACCOUNT)
        return
    client.set_account_limits(ACCOUNT, minutes={"gres/gpu": 1})
    try:
        job_id = client.submit(job(time_limit_minutes=5, script="#!/bin/bash\nsleep 1\n"))
        entry = wait_for("the limit to hold the job", lambda: (e := queued(client, job_id)) and
                         e.reason.startswith("AssocGrp") and e)  # fmt: skip
        assert entry.state == SlurmJobState.PENDING
        assert entry.reason == "AssocGrpGRESMinutes"
        client.set_account_limits(ACCOUNT, minutes={"gres/gpu": None})
        assert accounted(client, job_id).state == SlurmJobState.COMPLETED
    finally:
        client.set_account_limits(ACCOUNT, minutes={"gres/gpu": None})


@pytest.mark.usefixtures("association_lock")
def test_a_cpu_minutes_limit_and_max_submit_jobs_are_set_read_and_removed(client, job, site):
    # An account of its own: slurmctld's copy of the shared one's associations can lag
    # behind slurmdbd after the daemons were restarted, and other runs change its limits.
    account = f"c{uuid.uuid4().hex[:10]}"
    try:
        client.ensure_account(account, description="contract test")
        client.ensure_user_association(user=USER, account=account)
        if not limits_supported(client):
            for change in (
                lambda: client.set_account_limits(account, minutes={"cpu": 7}),
                lambda: client.set_account_limits(account, jobs={"MaxSubmitJobs": 7}),
            ):
                try:
                    change()
                except SlurmRejected as refused:
                    assert "22.05" in refused.message
            with pytest.raises(SlurmRejected):
                client.minutes_used(account)
            return
        # Several limits in one change, as the reconciler sets them.
        client.set_account_limits(
            account, minutes={"gres/gpu": 50, "cpu": 7}, jobs={"MaxSubmitJobs": 3}
        )
        # One TRES changes without the other; a repeat is no error.
        assert (
            client.account_limits(account).gpu_minutes,
            client.account_limits(account).cpu_minutes,
        ) == (50, 7)
        client.set_account_limits(account, minutes={"cpu": 7})
        assert client.account_limits(account).max_submit_jobs == 3
        assert client.minutes_used(account).cpu == 0
        # Slurm counts each array task: four are one too many.
        with pytest.raises(SlurmRejected, match="job submit limit"):
            client.submit(job(account=account, array="0-3"))
        client.set_account_limits(account, minutes={"cpu": None})
        client.set_account_limits(account, jobs={"MaxSubmitJobs": None})
        assert (
            client.account_limits(account).cpu_minutes,
            client.account_limits(account).max_submit_jobs,
        ) == (None, None)
        assert client.account_limits(account).gpu_minutes == 50
    finally:
        site.slurm.run("scancel", f"--account={account}")
        site.slurm.run("sacctmgr", "-i", "delete", "account", account)


@pytest.mark.usefixtures("association_lock")
def test_a_users_own_gpu_and_cpu_minutes_limits_are_set_read_and_removed(client, site):
    """A member's cap (accounts.caps) on the member's own association under the account."""
    account = f"c{uuid.uuid4().hex[:10]}"
    both = {"gres/gpu": 5, "cpu": 700}
    try:
        client.ensure_account(account, description="contract test")
        client.ensure_user_association(user=USER, account=account)
        client.ensure_user_association(user=FORGER, account=account)
        with pytest.raises(NotFound):
            client.set_user_limits(user="charlie", account=account, minutes={"gres/gpu": 1})
        if not limits_supported(client):
            with pytest.raises(SlurmRejected, match=r"22\.05"):
                client.set_user_limits(user=USER, account=account, minutes=both)
            none = {"gres/gpu": None, "cpu": None}
            client.set_user_limits(user=USER, account=account, minutes=none)  # holds
            assert client.account_limits(account).user_gpu_minutes == {}
            return
        client.set_user_limits(user=USER, account=account, minutes=both)
        client.set_user_limits(user=USER, account=account, minutes=both)  # a repeat
        limits = client.account_limits(account)
        assert (limits.user_gpu_minutes, limits.user_cpu_minutes) == ({USER: 5}, {USER: 700})
        # the account's own are not the user's
        assert (limits.gpu_minutes, limits.cpu_minutes) == (None, None)
        # One TRES changed, the other kept.
        client.set_user_limits(user=USER, account=account, minutes={"cpu": 701})
        limits = client.account_limits(account)
        assert (limits.user_gpu_minutes, limits.user_cpu_minutes) == ({USER: 5}, {USER: 701})
        wait_for(
            "each user's usage line",
            lambda: (
                set(client.minutes_used(account).users_gpu) == {USER, FORGER}
                and set(client.minutes_used(account).users_cpu) == {USER, FORGER}
            ),
            timeout_s=15,
        )
        client.set_user_limits(user=USER, account=account, minutes={"gres/gpu": None, "cpu": None})
        limits = client.account_limits(account)
        assert (limits.user_gpu_minutes, limits.user_cpu_minutes) == ({}, {})
    finally:
        site.slurm.run("sacctmgr", "-i", "delete", "account", account)


def test_usage_of_an_unknown_account_is_not_found(client):
    with pytest.raises(NotFound):
        client.minutes_used("no-such-account")
    with pytest.raises(NotFound):
        client.account_limits("no-such-account")


def test_the_worker_environment_is_not_passed_to_slurm_tools(client, monkeypatch):
    # A worker's SLURM_* variables would redirect or reshape every command.
    monkeypatch.setenv("SLURM_CONF", "/nonexistent/slurm.conf")
    monkeypatch.setenv("SQUEUE_FORMAT", "%i")
    assert isinstance(client.queue(), list)
    assert os.environ["SLURM_CONF"] == "/nonexistent/slurm.conf"


@pytest.mark.usefixtures("association_lock")
def test_associations_are_listed_and_removed_with_the_default_account_moved(client, site):
    first, second = (f"c{uuid.uuid4().hex[:10]}" for _ in range(2))
    user = "bob"  # a demo POSIX user; created here if the demo data is not seeded
    try:
        pwd.getpwnam(user)
    except KeyError:
        subprocess.run(["useradd", "--create-home", user], check=True)
    try:
        for account in (first, second):
            site.slurm.run("sacctmgr", "-i", "add", "account", account)
            site.slurm.run("sacctmgr", "-i", "add", "user", user, f"account={account}")
        site.slurm.run("sacctmgr", "-i", "modify", "user", user, "set", f"DefaultAccount={first}")
        assert user in client.account_limits(first).users
        assert client.remove_user_association(user=user, account=first) is True
        assert client.remove_user_association(user=user, account=first) is False
        assert user not in client.account_limits(first).users
        assert user in client.account_limits(second).users
        with pytest.raises(NotFound):
            client.account_limits("no-such-account")
    finally:
        # The default moved to one of the others: back to the shared account if bob has
        # it (the forger fixture's), or Slurm refuses to delete his default.
        site.slurm.run("sacctmgr", "-i", "modify", "user", user, "set", f"DefaultAccount={ACCOUNT}")
        for account in (first, second):
            site.slurm.run("sacctmgr", "-i", "delete", "account", account)


@pytest.mark.usefixtures("association_lock")
def test_the_gpu_minutes_limit_reads_back(client):
    if not limits_supported(client):
        # slurmrestd can still read it, even where it cannot set it.
        if isinstance(client, RestClient):
            assert client.account_limits(ACCOUNT).gpu_minutes is None
        return
    try:
        client.set_account_limits(ACCOUNT, minutes={"gres/gpu": 6000})
        assert client.account_limits(ACCOUNT).gpu_minutes == 6000
    finally:
        client.set_account_limits(ACCOUNT, minutes={"gres/gpu": None})
    assert client.account_limits(ACCOUNT).gpu_minutes is None


@pytest.mark.usefixtures("association_lock")
def test_job_count_limits_read_back_and_blocking_refuses_sbatch(client, job, site):
    # An account of its own: blocking the shared one would refuse other tests' jobs.
    account = f"b{uuid.uuid4().hex[:10]}"
    name = site.cluster.name
    site.slurm.run("sacctmgr", "-i", "add", "account", account, f"cluster={name}", check=True)
    site.slurm.run(
        "sacctmgr", "-i", "add", "user", USER, f"account={account}", f"cluster={name}", check=True
    )
    blocked = {"GrpSubmitJobs": 0, "GrpJobs": 0}
    try:
        assert client.account_limits(account).job_counts == {"GrpSubmitJobs": None, "GrpJobs": None}
        if limits_supported(client):
            client.set_account_limits(account, jobs=blocked)
        else:
            # As with GrpTRESMins: slurmrestd 22.05 says success and (usually) applies
            # nothing; the adapter reads back and refuses plainly. sacctmgr blocks instead.
            try:
                client.set_account_limits(account, jobs=blocked)
            except SlurmRejected as refused:
                assert "22.05" in refused.message
            site.slurm.run(
                "sacctmgr", "-i", "modify", "account", "where", f"name={account}",
                f"cluster={name}", "set", "GrpSubmitJobs=0", "GrpJobs=0", check=True,
            )  # fmt: skip
        assert client.account_limits(account).job_counts == blocked
        with pytest.raises(SlurmRejected, match=r"AssocGrpSubmitJobsLimit|job submit limit"):
            client.submit(replace(job(), account=account))
        if limits_supported(client):
            client.set_account_limits(account, jobs={"GrpSubmitJobs": None, "GrpJobs": 3})
            assert client.account_limits(account).job_counts == {
                "GrpSubmitJobs": None,
                "GrpJobs": 3,
            }
    finally:
        site.slurm.run("sacctmgr", "-i", "delete", "account", account)
    with pytest.raises(NotFound):
        client.account_limits(account)


@pytest.mark.usefixtures("association_lock")
def test_accounts_made_by_hand_are_listed_and_the_portals_go_under_the_parent_given(client, site):
    suffix = uuid.uuid4().hex[:8]
    parent, by_hand, ours = f"cp{suffix}", f"ch{suffix}", f"co{suffix}"
    name = f"cluster={site.cluster.name}"
    try:
        site.slurm.run("sacctmgr", "-i", "add", "account", parent, name, check=True)
        site.slurm.run(
            "sacctmgr", "-i", "add", "account", by_hand, name, f"parent={parent}",
            "organization=physics", "description=by hand", check=True,
        )  # fmt: skip
        site.slurm.run("sacctmgr", "-i", "add", "user", USER, f"account={by_hand}", name)
        site.slurm.run(
            "sacctmgr", "-i", "modify", "account", "where", f"name={by_hand}", name, "set",
            "GrpTRESMins=gres/gpu=70", check=True,
        )  # fmt: skip
        assert client.ensure_account(ours, description="contract test", parent=parent) is True
        with pytest.raises(NotFound, match="parent"):
            client.ensure_account(f"cx{suffix}", description="x", parent=f"cn{suffix}")
        listed = {account.name: account for account in client.list_accounts()}
        assert "root" not in listed and ACCOUNT in listed
        assert (listed[by_hand].organization, listed[by_hand].parent) == ("physics", parent)
        assert listed[by_hand].description == "by hand"
        assert listed[by_hand].users == (USER,) and listed[by_hand].limits.gpu_minutes == 70
        assert (listed[ours].organization, listed[ours].parent) == (PORTAL_ORGANIZATION, parent)
        assert listed[ours].users == ()
        assert f"cx{suffix}" not in listed
    finally:
        for account in (ours, by_hand, parent):
            site.slurm.run("sacctmgr", "-i", "delete", "account", account)


# --- what users write: every byte, the longest text, whole forged records ---------------
#
# A job's owner writes its name and comment (sbatch --job-name/--comment, scontrol update
# name=/comment=): every byte but NUL, up to LONGEST_TEXT bytes each, which squeue and
# sacct print raw. The listings carry the first TEXT_WIDTH bytes of each (parsing.py),
# whatever they hold; accounting has what slurmdbd kept of them (``kept_by_slurmdbd``).

LONGEST_TEXT = 1024  # bytes: slurmctld refuses 1025 ("... parameter too long"), 22.05 and 24.11
EVERY_BYTE = bytes(range(1, 256))
FORGED_ID = 987_650_001  # issue 33's: an id no job of the stack's clusters has
# issue 33's name that made every queue sync of the cluster fail while its job was queued
HALTING_NAME = b"x\ny\x1ez\x1fw"


def listed(text: bytes) -> str:
    """A user's text as every listing carries it, whatever the adapter: its first
    TEXT_WIDTH bytes without the spaces that end them (squeue and sacct pad a shorter text
    with spaces: which ones were the user's cannot be told), bytes that are not UTF-8
    replaced."""
    return text[:TEXT_WIDTH].rstrip(b" ").decode("utf-8", errors="replace")


def kept_by_slurmdbd(text: bytes, *, name: bool) -> bytes:
    """What accounting keeps of a text its owner wrote, 22.05 and 24.11 alike (both found
    so through sacct): each byte of what is not UTF-8 becomes "?" (MariaDB's utf8mb4
    columns; MariaDB does keep the UTF-8 form of a surrogate, which Python refuses: no text
    here holds one), and a job name's double quotes become backticks (slurmdbd's doing; a
    comment keeps them). The queue shows the text as written."""
    kept = "".join(
        "?" if "\udc80" <= char <= "\udcff" else char
        for char in text.decode("utf-8", errors="surrogateescape")
    )
    return (kept.replace('"', "`") if name else kept).encode()


def forged_records(
    *, job_id: int, user: str, account: str, partition: str, state: str = "RUNNING"
) -> dict[str, bytes]:
    """A record of each listing shape the portal reads or has read, claiming Slurm job
    ``job_id`` for ``user`` under ``account``: in ``state`` on 8 GPUs in the queue, completed
    after 100 hours on them in accounting (issue 33's 808 GPU-hours). Today's shapes
    (parsing.py's own writers) and those before issue 33 (fields joined by the unit
    separator; the queue's records ended by the record separator, accounting's by a line's
    end), each with a submit token of its own."""
    now = dt.datetime.now(dt.UTC)
    began, ended = (f"{at:%Y-%m-%dT%H:%M:%S}" for at in (now - dt.timedelta(hours=100), now))
    queue = [
        str(job_id), str(job_id), "N/A", user, account, partition, state, "None", began,
        began, "7-00:00:00", "4294967294", "gres:gpu:8", "1", "vm",
    ]  # fmt: skip
    accounting = [
        str(job_id), str(job_id), user, account, partition, "COMPLETED", "0:0",
        "billing=8,cpu=8,gres/gpu=8,mem=64G,node=1", "360000", began, began, ended, "10080",
        "4-04:00:00", "", "",
    ]  # fmt: skip
    token = f"portal:{uuid.uuid4()}"
    return {
        "squeue": squeue_record(queue, comment=token.encode(), name=b"forged"),
        "sacct": sacct_record(accounting, comment=token.encode(), name=b"forged"),
        "squeue before issue 33": "\x1f".join([*queue, token, "forged"]).encode() + b"\x1e",
        "sacct before issue 33": "\x1f".join(
            [*accounting[:12], token, *accounting[12:], "forged"]
        ).encode()
        + b"\n",
    }


def crafted_texts(
    victim: int, *, user: str, account: str, partition: str
) -> list[tuple[bytes, bytes]]:
    """The name and comment of each job a researcher crafts: between them every byte Slurm
    takes, each within the first TEXT_WIDTH bytes that the listings carry; text that is
    not UTF-8; issue 33's two names; whole records of every listing shape, as a name after
    a line's end and as a comment, claiming ``user``'s job ``victim`` or an id no job has;
    and the longest texts Slurm takes, made of them all."""
    on_victim = forged_records(job_id=victim, user=user, account=account, partition=partition)
    on_nobody = forged_records(job_id=FORGED_ID, user=user, account=account, partition=partition)
    records = [*on_victim.values(), *on_nobody.values()]
    pieces = [EVERY_BYTE[at : at + TEXT_WIDTH] for at in range(0, len(EVERY_BYTE), TEXT_WIDTH)]
    return [
        *zip(pieces[::2], pieces[1::2], strict=True),
        # A character of each length, a lone continuation byte, an overlong form, a code
        # point past U+10FFFF, a character cut short; a character cut by the width.
        (
            b"\xc3\xa9\xe6\x97\xa5\xf0\x9f\x99\x82 \x80\xbf \xc0\xaf \xf5\x80\x80\x80 \xf0\x9f\x99",
            b"a" * (TEXT_WIDTH - 1) + "é".encode(),
        ),
        (
            b"inj\n" + on_nobody["sacct before issue 33"] + on_victim["squeue before issue 33"],
            HALTING_NAME,
        ),
        *(((b"\n" + record)[:LONGEST_TEXT], record[:LONGEST_TEXT]) for record in records),
        ((b"".join(records) * 2)[:LONGEST_TEXT], (b"".join(reversed(records)) * 2)[:LONGEST_TEXT]),
    ]


def sbatch_crafted(
    cluster: Cluster,
    user: str,
    account: str,
    partition: str,
    *,
    name: bytes,
    comment: bytes = b"victim",
    seconds: int | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """A one-GPU job as its owner submits it from a login node: plain sbatch through the
    cluster's run-as prefix, its name and comment given as bytes; held, or running for
    ``seconds``."""
    tools = copy.copy(cluster)
    tools.backend = Cluster.Backend.CLI
    sbatch = client_for(tools)
    assert isinstance(sbatch, CliClient)
    run = ["--hold", "--wrap=true"] if seconds is None else [f"--wrap=sleep {seconds}"]
    return subprocess.run(
        [*sbatch.command(["sbatch"], as_user=user), "--parsable", f"--account={account}",
         f"--partition={partition}", "--gpus-per-node=1", "--time=1", "--chdir=/tmp",
         "--output=/dev/null", b"--job-name=" + name, b"--comment=" + comment, *run],
        capture_output=True, env=slurm_environment(), check=False,
    )  # fmt: skip


def submitted(result: subprocess.CompletedProcess[bytes]) -> int:
    assert result.returncode == 0, result.stderr
    return int(result.stdout.split(b";")[0])


@pytest.fixture
def crafters_account(site):
    """An account of the test's own where alice and bob may run jobs: its queue is the
    test's jobs and nothing else. Its jobs are cancelled and it is removed afterwards."""
    account = f"x{uuid.uuid4().hex[:10]}"
    where = f"cluster={site.cluster.name}"
    site.slurm.sacctmgr_change("add", "account", account, where, check=True)
    for user in (USER, FORGER):
        site.slurm.sacctmgr_change("add", "user", user, f"account={account}", where, check=True)
    yield account
    site.slurm.account_remove(account)


def queued_in_slurm(site: Site, account: str) -> dict[int, str]:
    """Each job of ``account`` Slurm holds, and its state, as the operator reads them with
    squeue's job ids and states (nothing a user writes)."""
    shown = site.slurm.run(
        "squeue", "--noheader", "--all", "--states=all", f"--account={account}", "--format=%A %T",
        check=True,
    )  # fmt: skip
    return {int(job_id): state for job_id, state in map(str.split, shown.stdout.splitlines())}


def refused_of(listing: Listing, ids: set[int], account: str) -> list[Refused]:
    """The records of ``listing`` refused that are (or claim to be) the test's."""
    return [r for r in listing.refused if r.job_id in ids | {FORGED_ID} or account in r.text]


def ended_in_accounting(client, since: dt.datetime, ids: set[int]) -> Listing | None:
    """Accounting since ``since`` once it has the end of each job of ``ids``. Slurm 22.05
    names a job that ended before its first record reached slurmdbd "allocation", with its
    start at its end, for some seconds, until that record comes: its name is waited for."""
    listing = client.accounting_since(since)
    ended = {e.job_id for e in listing if e.ended_at and e.name != "allocation"}
    return listing if ids <= ended else None


def misread(entries: dict, texts: dict[int, tuple[str, str]]) -> list[str]:
    """Each job whose name and comment, among a listing's ``entries`` by job id, are not
    ``texts``, said."""
    return [
        f"job {job_id}: {(entries[job_id].name, entries[job_id].comment)!r}, not {expected!r}"
        for job_id, expected in texts.items()
        if (entries[job_id].name, entries[job_id].comment) != expected
    ]


def test_names_and_comments_of_any_bytes_forge_nothing_and_read_as_written(
    client, site, crafters_account
):
    """Issue 33, through Slurm: a researcher's names and comments hold every byte Slurm
    takes, text that is not UTF-8, the longest texts Slurm takes, and whole records of
    every listing shape claiming another user's held job (running on 8 GPUs; completed
    after 100 hours on them) or a job that does not exist. The queue, then accounting,
    list exactly the jobs Slurm has, the victim's as it is, and refuse none of them; each
    text reads as written (in accounting as slurmdbd kept it)."""
    account = crafters_account
    since = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    partition = site.short_partition
    victim = submitted(sbatch_crafted(site.cluster, FORGER, account, partition, name=b"victim"))
    crafted: dict[int, tuple[bytes, bytes]] = {}
    for name, comment in crafted_texts(victim, user=FORGER, account=account, partition=partition):
        job = sbatch_crafted(site.cluster, USER, account, partition, name=name, comment=comment)
        crafted[submitted(job)] = (name, comment)
    longer = sbatch_crafted(site.cluster, USER, account, partition, name=b"n" * (LONGEST_TEXT + 1))
    assert longer.returncode != 0 and b"too long" in longer.stderr
    ids = {victim, *crafted}

    queue = client.queue()
    mine = [e for e in queue if e.account == account]
    assert {e.job_id: e.state for e in mine} == queued_in_slurm(site, account)
    assert len(mine) == len(ids) and {e.job_id for e in mine} == ids
    assert not [e for e in queue if e.job_id == FORGED_ID]
    assert refused_of(queue, ids, account) == []
    queued = {e.job_id: e for e in mine}
    seen = queued[victim]
    assert (seen.state, seen.reason, seen.gpus, seen.user) == (
        SlurmJobState.PENDING, "JobHeldUser", 1, FORGER,
    )  # fmt: skip

    site.slurm.run("scancel", f"--account={account}", check=True)
    accounting = wait_for(
        "the jobs' ends in accounting", lambda: ended_in_accounting(client, since, ids), 60
    )
    runs = [e for e in accounting if e.account == account]
    assert sorted(e.job_id for e in runs) == sorted(ids)  # each once
    assert not [e for e in accounting if e.job_id == FORGED_ID]
    assert refused_of(accounting, ids, account) == []
    ended = {e.job_id: e for e in runs}
    seen = ended[victim]
    assert (seen.state, seen.allocated_gpus, seen.elapsed_s, seen.user) == (
        SlurmJobState.CANCELLED, 0, 0, FORGER,
    )  # fmt: skip

    written = {
        job_id: (listed(name), listed(comment)) for job_id, (name, comment) in crafted.items()
    }
    kept = {
        job_id: (
            listed(kept_by_slurmdbd(name, name=True)),
            listed(kept_by_slurmdbd(comment, name=False)),
        )
        for job_id, (name, comment) in crafted.items()
    }
    problems = [
        *(f"queue, {problem}" for problem in misread(queued, written)),
        *(f"accounting, {problem}" for problem in misread(ended, kept)),
    ]
    assert not problems, "\n".join(problems)
