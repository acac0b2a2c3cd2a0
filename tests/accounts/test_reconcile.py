"""The reconciler makes Slurm follow the portal on the live dev cluster."""

import datetime as dt
import io
import subprocess
import threading
import uuid
from decimal import Decimal

import pytest
from django.core.cache import cache
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.utils import timezone

from accounts.ledger import allocation_grant, ledger_charge, ledger_hold
from accounts.models import AdoptedAccount, Membership
from accounts.reconcile import cpu_minutes_limit_for, gpu_minutes_limit_for, reconcile
from accounts.selectors import project_balance
from accounts.services import membership_set, project_create
from clusters.models import Partition
from clusters.slurm import client_for
from jobs.errors import JobInvalid
from jobs.services import job_create, job_estimate
from jobs.states import JobState
from jobs.submission import estimates_paused_key
from tests.factories import request_for, wait_for
from tests.slurm_accounts import DEV_CLUSTER, account_remove, sacctmgr_change

TODAY = dt.date.today()


def test_the_limit_is_usage_plus_what_the_portal_covers():
    assert (
        gpu_minutes_limit_for(
            raw_used_minutes=100, covered_gpu_seconds=3600, billing_weight=Decimal("1")
        )
        == 160
    )
    # A cheaper partition lets the same hours buy more raw minutes.
    assert (
        gpu_minutes_limit_for(
            raw_used_minutes=0, covered_gpu_seconds=3600, billing_weight=Decimal("0.5")
        )
        == 120
    )
    # Spent (or overspent): only what Slurm already counted, so the next job pends.
    assert (
        gpu_minutes_limit_for(
            raw_used_minutes=42, covered_gpu_seconds=-500, billing_weight=Decimal("1")
        )
        == 42
    )


def test_the_cpu_limit_is_usage_plus_the_cpu_minutes_the_portal_covers():
    one_hour = 3600
    assert (
        cpu_minutes_limit_for(
            raw_used_minutes=5, covered_gpu_seconds=one_hour, cpu_hour_rate=Decimal("0.01")
        )
        == 5 + 100 * 60
    )
    # Rounded up, never below what the portal covers.
    assert (
        cpu_minutes_limit_for(
            raw_used_minutes=0, covered_gpu_seconds=1, cpu_hour_rate=Decimal("0.0300")
        )
        == 1
    )
    assert (
        cpu_minutes_limit_for(
            raw_used_minutes=7, covered_gpu_seconds=-60, cpu_hour_rate=Decimal("0.01")
        )
        == 7
    )


@pytest.fixture
def project(dev_cluster, alice, bob):
    account = f"r{uuid.uuid4().hex[:10]}"
    project = project_create(slug=account, name=f"Reconcile {account}", slurm_account=account)
    membership_set(project=project, user=alice, role="pi")
    membership_set(project=project, user=bob, role="member")
    allocation_grant(
        project=project,
        cluster=dev_cluster,
        gpu_hours=10,
        starts_on=TODAY - dt.timedelta(days=1),
        ends_on=TODAY + dt.timedelta(days=30),
        actor=None,
        reason="test",
    )
    yield project
    account_remove(account)


def only(report, project):
    return [str(a) for a in report.actions if a.account == project.slurm_account]


@pytest.mark.slurm
def test_it_creates_the_account_members_and_limit_and_a_rerun_changes_nothing(project, dev_cluster):
    account = project.slurm_account
    dry = reconcile(cluster=dev_cluster, dry_run=True)
    assert only(dry, project) == [
        f"{account}: add account",
        f"{account}: add user alice",
        f"{account}: add user bob",
        f"{account}: GrpTRESMins gres/gpu None → 600",
        # 10 GPU-hours at 0.01 GPU-hours a CPU-hour buy 1000 CPU-hours.
        f"{account}: GrpTRESMins cpu None → 60000",
        f"{account}: MaxSubmitJobs None → 1000",
    ]
    client = client_for(dev_cluster)
    with pytest.raises(Exception, match="no account"):
        client.account_limits(account)  # the dry run changed nothing

    report = reconcile(cluster=dev_cluster)
    assert only(report, project) == only(dry, project) and report.errors == []
    assert client.account_limits(account).users == ("alice", "bob")
    assert client.account_limits(account).gpu_minutes == 600
    assert client.account_limits(account).cpu_minutes == 60000
    assert client.account_limits(account).max_submit_jobs == 1000
    assert only(reconcile(cluster=dev_cluster), project) == []


@pytest.mark.slurm
def test_a_run_that_finds_another_writer_changing_the_cluster_reports_it_and_changes_nothing(
    project, dev_cluster, tmp_path, monkeypatch
):
    from django.test import override_settings

    from accounts import reconcile as module
    from tests.clusters.test_locks import hold_in_another_process

    monkeypatch.setattr(module, "LOCK_WAIT_S", 0.3)
    with override_settings(LOCK_DIR=tmp_path):
        holder = hold_in_another_process(tmp_path, dev_cluster.name)
        try:
            # A dry run changes nothing and does not wait for the lock.
            assert f"{project.slurm_account}: add account" in map(
                str, reconcile(cluster=dev_cluster, dry_run=True).actions
            )
            report = reconcile(cluster=dev_cluster)
        finally:
            holder.communicate("")
    assert only(report, project) == []
    assert report.errors == [
        f"{project.slurm_account}: another process has been changing {dev_cluster.name}'s "
        f"Slurm associations for over 0 s ({tmp_path}/slurm-associations-{dev_cluster.name}.lock)"
    ]
    with pytest.raises(Exception, match="no account"):
        client_for(dev_cluster).account_limits(project.slurm_account)


@pytest.mark.slurm
def test_a_removed_member_loses_their_association(project, dev_cluster, bob):
    reconcile(cluster=dev_cluster)
    Membership.objects.filter(project=project, user=bob).delete()
    report = reconcile(cluster=dev_cluster)
    assert f"{project.slurm_account}: remove user bob" in only(report, project)
    assert client_for(dev_cluster).account_limits(project.slurm_account).users == ("alice",)


@pytest.mark.slurm
def test_the_limit_follows_charges_but_keeps_room_for_held_jobs(project, dev_cluster):
    reconcile(cluster=dev_cluster)
    allocation = project.allocations.get()
    ledger_hold(allocation=allocation, reference=f"job-{project.slug}", gpu_seconds=2 * 3600)
    ledger_charge(
        allocation=allocation, reference=f"{DEV_CLUSTER}:{project.slug}", gpu_seconds=3 * 3600
    )
    reconcile(cluster=dev_cluster)
    # 10 granted - 3 used = 7 covered (5 available + 2 held), Slurm's own usage ~0.
    assert client_for(dev_cluster).account_limits(project.slurm_account).gpu_minutes == 7 * 60


@pytest.mark.slurm
def test_billing_weights_convert_portal_hours_into_raw_minutes(project, dev_cluster):
    Partition.objects.filter(cluster=dev_cluster).update(billing_weight=Decimal("2"))
    reconcile(cluster=dev_cluster)
    assert client_for(dev_cluster).account_limits(project.slurm_account).gpu_minutes == 300


@pytest.mark.slurm
def test_slurm_unreachable_is_reported_and_nothing_changes(project, dev_cluster, tmp_path):
    with override_settings(SLURM_BIN_DIR=str(tmp_path)):
        report = reconcile(cluster=dev_cluster)
    assert any(project.slurm_account in error for error in report.errors)
    assert report.actions == [] or all(a.account != project.slurm_account for a in report.actions)
    # The next run catches up.
    assert only(reconcile(cluster=dev_cluster), project)[0].endswith("add account")


@pytest.mark.slurm
def test_a_member_without_a_posix_user_is_reported_not_added(project, dev_cluster):
    from accounts.services import user_create

    nobody = user_create(username="nobody", password="pw-nobody-1234")
    membership_set(project=project, user=nobody, role="member")
    report = reconcile(cluster=dev_cluster)
    assert any("nobody has no POSIX user name" in w for w in report.warnings)
    assert client_for(dev_cluster).account_limits(project.slurm_account).users == ("alice", "bob")


@pytest.mark.slurm
def test_an_account_made_by_hand_is_refused_and_given_nothing(project, dev_cluster):
    # Someone's account that exists in Slurm already; the project was bound to its name.
    account = project.slurm_account
    sacctmgr_change("add", "account", account, check=True)
    client = client_for(dev_cluster)
    assert client.account_organization(account) != "portal"
    for dry_run in (True, False):
        report = reconcile(cluster=dev_cluster, dry_run=dry_run)
        assert only(report, project) == []
        [error] = [e for e in report.errors if e.startswith(f"{account}:")]
        assert "the portal did not create it" in error
        assert "adds no users, associations or limits" in error
    assert client.account_limits(account).users == ()
    assert client.account_limits(account).gpu_minutes is None


@pytest.mark.slurm
@pytest.mark.django_db(transaction=True)  # the worker that estimates reads the rows
def test_no_job_is_estimated_or_submitted_under_an_account_made_by_hand(
    project, dev_cluster, alice, workdir
):
    # Someone's account, and alice may already submit under it: the portal neither
    # estimates nor submits her jobs there until an allocation manager adopts it.
    account = project.slurm_account
    sacctmgr_change("add", "account", account, check=True)
    sacctmgr_change("add", "user", "alice", f"account={account}", check=True)
    says = f"The project's Slurm account {account} on {dev_cluster.name} was made outside"
    # An estimate an earlier test of this process waited out pauses the cluster's
    # estimates for a while (ESTIMATE_PAUSE_S): this one must reach a worker.
    cache.delete(estimates_paused_key(dev_cluster.pk))
    with pytest.raises(JobInvalid) as refused:
        job_estimate(user=alice, request=request_for(project, workdir))
    assert refused.value.fields["project"][0].startswith(says)

    job = job_create(user=alice, request=request_for(project, workdir))
    assert project_balance(project).held_gpu_seconds > 0

    def ended() -> bool:  # submitted by the session's worker, once committed
        job.refresh_from_db()
        return job.state not in (JobState.NEW, JobState.SUBMITTING)

    wait_for(ended, what=f"a worker to take job {job.pk}")
    assert job.state == JobState.SUBMIT_FAILED
    assert job.submit_error.startswith(says)
    assert job.slurm_job_id is None
    assert project_balance(project).held_gpu_seconds == 0
    assert (
        client_for(dev_cluster).find_by_comment(
            job.comment,
            user="alice",
            account=account,
            since=job.created_at - dt.timedelta(minutes=1),
        )
        == []
    )

    AdoptedAccount.objects.create(cluster=dev_cluster, account=account, project=project)
    assert job_estimate(user=alice, request=request_for(project, workdir)).expected_start


@pytest.mark.slurm
def test_the_portals_own_accounts_are_marked_as_its_own(project, dev_cluster):
    reconcile(cluster=dev_cluster)
    assert client_for(dev_cluster).account_organization(project.slurm_account) == "portal"


@pytest.mark.slurm
def test_the_beat_task_keeps_each_clusters_last_report_with_its_time(project, dev_cluster):
    from accounts.models import ReconcileReport
    from accounts.tasks import reconcile_task

    account = project.slurm_account
    before = timezone.now()
    reconcile_task()
    first = ReconcileReport.objects.get(cluster=dev_cluster)
    assert first.ran_at >= before and not first.dry_run
    assert {"account": account, "change": f"{account}: add account"} in first.actions
    assert first.errors == []
    # The next run replaces it: nothing is left to change for this project.
    reconcile_task()
    again = ReconcileReport.objects.get(cluster=dev_cluster)
    assert again.ran_at > first.ran_at
    assert [a for a in again.actions if a["account"] == account] == []


@pytest.mark.slurm
def test_the_beat_task_leaves_a_cluster_to_a_run_under_way_on_another_host(project, dev_cluster):
    """Another worker reconciling the cluster (here a thread with a database connection of
    its own, as a worker on another host has): this run leaves the cluster alone rather
    than change Slurm's associations beside it; once that run is over, the next one
    reconciles."""
    from django.db import connection

    from accounts.models import ReconcileReport
    from accounts.tasks import reconcile_task
    from clusters.locks import one_run_per_cluster

    under_way, over = threading.Event(), threading.Event()

    def other_worker() -> None:
        try:
            with one_run_per_cluster("reconcile", dev_cluster.id) as acquired:
                if acquired:
                    under_way.set()
                    over.wait(timeout=30)
        finally:
            connection.close()

    other = threading.Thread(target=other_worker)
    other.start()
    try:
        assert under_way.wait(timeout=10)
        reconcile_task()
        assert not ReconcileReport.objects.filter(cluster=dev_cluster).exists()
        with pytest.raises(CommandError):  # nor does an operator's run by hand
            call_command("reconcile_slurm", stderr=(said := io.StringIO()))
        assert f"{dev_cluster.name}: another reconcile run is under way" in said.getvalue()
        assert not ReconcileReport.objects.filter(cluster=dev_cluster).exists()
    finally:
        over.set()
        other.join(timeout=30)
    reconcile_task()
    account = project.slurm_account
    report = ReconcileReport.objects.get(cluster=dev_cluster)
    assert {"account": account, "change": f"{account}: add account"} in report.actions


# A project without an active allocation: new work blocked, running work goes on.


def sbatch_as(user: str, account: str, *extra: str) -> subprocess.CompletedProcess:
    """Plain sbatch on a login node, outside the portal."""
    return subprocess.run(
        ["runuser", "-u", user, "--", "sbatch", "--parsable", f"--account={account}",
         "--partition=debug", "--time=5", "--chdir=/tmp", "--output=/dev/null", *extra],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def queued(slurm_job_id: str) -> tuple[str, str]:
    """(state, reason) of a job in the queue."""
    shown = subprocess.run(
        ["squeue", "--noheader", "--jobs", slurm_job_id, "--format=%T|%r"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    state, _, reason = shown.partition("|")
    return state, reason


def job_limits(account: str) -> str:
    """GrpSubmitJobs|GrpJobs of the account's own association, as sacctmgr shows them."""
    lines = subprocess.run(
        ["sacctmgr", "--noheader", "--parsable2", "show", "assoc", "where",
         f"account={account}", f"cluster={DEV_CLUSTER}", "format=User,GrpSubmitJobs,GrpJobs"],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    return next(line.split("|", 1)[1] for line in lines if line.startswith("|"))


@pytest.mark.slurm
def test_an_expired_project_takes_no_new_work_but_lets_running_work_finish(project, dev_cluster):
    from accounts.ledger import allocation_expire
    from tests.factories import wait_for

    account = project.slurm_account
    reconcile(cluster=dev_cluster)
    running = sbatch_as("alice", account, "--wrap=sleep 120")
    assert running.returncode == 0, running.stderr
    running_id = running.stdout.strip().split(";")[0]
    wait_for(lambda: queued(running_id)[0] == "RUNNING", timeout_s=60, what="the job to run")
    # Queued, and held until the block is in place (however long the reconcile takes),
    # so it cannot have started before.
    later = sbatch_as("alice", account, "--hold", "--wrap=sleep 30")
    assert later.returncode == 0, later.stderr
    later_id = later.stdout.strip().split(";")[0]

    allocation_expire(allocation=project.allocations.get())
    report = reconcile(cluster=dev_cluster)
    assert only(report, project) == [f"{account}: block new work"]
    assert job_limits(account) == "0|0"
    refused = sbatch_as("alice", account, "--wrap=true")
    assert refused.returncode != 0
    assert "AssocGrpSubmitJobsLimit" in refused.stderr
    subprocess.run(["scontrol", "release", later_id], capture_output=True, check=True)
    # The job already queued does not start; the one running goes on.
    wait_for(
        lambda: queued(later_id) == ("PENDING", "AssocGrpJobsLimit"),
        timeout_s=60,
        what="the queued job to wait for the account's limit",
    )
    assert queued(running_id)[0] == "RUNNING"
    assert only(reconcile(cluster=dev_cluster), project) == []  # a rerun changes nothing

    # A new allocation lifts the block.
    allocation_grant(
        project=project,
        cluster=dev_cluster,
        gpu_hours=5,
        starts_on=TODAY,
        ends_on=TODAY + dt.timedelta(days=30),
        actor=None,
        reason="renewed",
    )
    report = reconcile(cluster=dev_cluster)
    assert f"{account}: unblock new work" in only(report, project)
    assert job_limits(account) == "|"
    accepted = sbatch_as("alice", account, "--wrap=true")
    assert accepted.returncode == 0, accepted.stderr
    wait_for(
        lambda: queued(later_id)[1] != "AssocGrpJobsLimit",
        timeout_s=60,
        what="the queued job to be free to start",
    )
    assert queued(running_id)[0] == "RUNNING"
    subprocess.run(["scancel", f"--account={account}"], capture_output=True, check=False)


def site_caps_running_jobs(account: str, count: int) -> None:
    sacctmgr_change(
        "modify", "account", "where", f"name={account}", f"cluster={DEV_CLUSTER}",
        "set", f"GrpJobs={count}", check=True,
    )  # fmt: skip


@pytest.mark.slurm
def test_a_revoked_allocation_blocks_new_work_too_and_a_lift_clears_only_the_zeros(
    project, dev_cluster, manny
):
    from accounts.ledger import allocation_revoke

    account = project.slurm_account
    reconcile(cluster=dev_cluster)
    site_caps_running_jobs(account, 4)
    allocation_revoke(allocation=project.allocations.get(), actor=manny, reason="closed")
    assert only(reconcile(cluster=dev_cluster, dry_run=True), project) == [
        f"{account}: block new work"
    ]
    assert job_limits(account) == "|4"  # the dry run changed nothing
    reconcile(cluster=dev_cluster)
    assert job_limits(account) == "0|0"
    # Someone raises the cap while the project has no allocation: the next run blocks again.
    site_caps_running_jobs(account, 4)
    assert only(reconcile(cluster=dev_cluster), project) == [f"{account}: block new work"]
    assert job_limits(account) == "0|0"
    site_caps_running_jobs(account, 4)
    allocation_grant(
        project=project,
        cluster=dev_cluster,
        gpu_hours=5,
        starts_on=TODAY,
        ends_on=TODAY + dt.timedelta(days=30),
        actor=None,
        reason="renewed",
    )
    # The lift clears the zero (sbatch is taken again) and keeps the value a site set.
    assert f"{account}: unblock new work" in only(reconcile(cluster=dev_cluster), project)
    assert job_limits(account) == "|4"


def test_the_cpu_limit_follows_the_cheapest_cpu_rate(project, dev_cluster):
    Partition.objects.filter(cluster=dev_cluster, name="debug").update(
        cpu_hour_rate=Decimal("0.02")
    )
    Partition.objects.filter(cluster=dev_cluster).exclude(name="debug").update(
        cpu_hour_rate=Decimal("0.05")
    )
    reconcile(cluster=dev_cluster)
    # 10 GPU-hours at the cheapest rate, 0.02: 500 CPU-hours.
    assert client_for(dev_cluster).account_limits(project.slurm_account).cpu_minutes == 500 * 60


@pytest.mark.slurm
def test_max_submit_jobs_is_set_drift_is_reported_and_members_inherit_it(project, dev_cluster):
    account = project.slurm_account
    with override_settings(SLURM_MAX_SUBMIT_JOBS=25):
        assert reconcile(cluster=dev_cluster).errors == []
    shown = subprocess.run(
        ["sacctmgr", "-nP", "show", "assoc", "where", f"account={account}",
         "format=User,MaxSubmitJobs"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    # The account's own association and each member's, which inherits it.
    assert set(shown) == {"|25", "alice|25", "bob|25"}
    # Changed by hand in Slurm: the dry run reports it, the next run puts it back.
    sacctmgr_change(
        "modify", "account", "where", f"name={account}", "set", "MaxSubmitJobs=-1", check=True
    )
    with override_settings(SLURM_MAX_SUBMIT_JOBS=25):
        assert only(reconcile(cluster=dev_cluster, dry_run=True), project) == [
            f"{account}: MaxSubmitJobs None → 25"
        ]
        reconcile(cluster=dev_cluster)
        assert only(reconcile(cluster=dev_cluster, dry_run=True), project) == []
    assert client_for(dev_cluster).account_limits(account).max_submit_jobs == 25
