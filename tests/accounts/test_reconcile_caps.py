"""The Slurm backstop of members' caps: the reconciler gives a capped member's own
association a GrpTRESMins gres/gpu and cpu (their raw usage plus what the cap still
covers, at the cheapest GPU weight and CPU-hour rate) and removes them when the cap is
lifted, so plain sbatch outside the portal stops at the cap, a CPU-only job too."""

import subprocess
import uuid

import pytest
from django.conf import settings

from accounts.caps import member_cap_clear, member_cap_set
from accounts.ledger import ledger_charge
from accounts.reconcile import reconcile
from accounts.services import membership_set, project_create
from clusters.prefixes import run_as_prefix_argv, run_as_prefix_template
from clusters.slurm import client_for
from tests.conftest import through_slurmrestd
from tests.factories import month_allocation, wait_for
from tests.slurm_accounts import SlurmOperator, account_remove

pytestmark = pytest.mark.slurm


@pytest.fixture
def project(dev_cluster, alice, bob):
    account = f"k{uuid.uuid4().hex[:10]}"
    project = project_create(slug=account, name=f"Caps {account}", slurm_account=account)
    membership_set(project=project, user=alice, role="pi")
    membership_set(project=project, user=bob, role="member")
    month_allocation(project, dev_cluster, gpu_hours=10)
    yield project
    subprocess.run(["scancel", f"--account={account}"], check=False)
    account_remove(account)


def changes(report, project) -> list[str]:
    return [str(a) for a in report.actions if a.account == project.slurm_account and a.user]


def test_a_members_cap_becomes_their_own_limit_and_goes_when_lifted(
    project, dev_cluster, alice, bob
):
    account = project.slurm_account
    allocation = project.allocations.get()
    assert not reconcile(cluster=dev_cluster).errors
    member_cap_set(actor=alice, allocation=allocation, user=bob, gpu_hours=2)
    # Half an hour of bob's work was charged: the cap covers 1.5 more (90 minutes).
    ledger_charge(allocation=allocation, reference="caps:1", gpu_seconds=1800, user=bob)
    report = reconcile(cluster=dev_cluster)
    assert not report.errors, report.errors
    # And as many CPU-minutes as 1.5 GPU-hours buy at 0.01 GPU-hours a CPU-hour: 150 hours.
    assert changes(report, project) == [
        f"{account}: GrpTRESMins gres/gpu of bob None → 90",
        f"{account}: GrpTRESMins cpu of bob None → 9000",
    ]
    client = client_for(dev_cluster)
    limits = client.account_limits(account)
    assert (limits.user_gpu_minutes, limits.user_cpu_minutes) == ({"bob": 90}, {"bob": 9000})
    assert changes(reconcile(cluster=dev_cluster), project) == []  # a rerun changes nothing

    member_cap_set(actor=alice, allocation=allocation, user=None, gpu_hours=1)  # a default
    member_cap_clear(actor=alice, allocation=allocation, user=bob)  # bob: the default now
    report = reconcile(cluster=dev_cluster)
    assert changes(report, project) == [
        f"{account}: GrpTRESMins gres/gpu of alice None → 60",
        f"{account}: GrpTRESMins cpu of alice None → 6000",
        f"{account}: GrpTRESMins gres/gpu of bob 90 → 30",
        f"{account}: GrpTRESMins cpu of bob 9000 → 3000",
    ]
    member_cap_clear(actor=alice, allocation=allocation, user=None)
    report = reconcile(cluster=dev_cluster)
    assert changes(report, project) == [
        f"{account}: GrpTRESMins gres/gpu of alice 60 → None",
        f"{account}: GrpTRESMins cpu of alice 6000 → None",
        f"{account}: GrpTRESMins gres/gpu of bob 30 → None",
        f"{account}: GrpTRESMins cpu of bob 3000 → None",
    ]
    limits = client.account_limits(account)
    assert (limits.user_gpu_minutes, limits.user_cpu_minutes) == ({}, {})


def sbatch_as(user: str, account: str) -> int:
    submitted = subprocess.run(
        ["runuser", "-u", user, "--", "sbatch", "--parsable", f"--account={account}",
         "--partition=debug", "--gpus-per-node=1", "--time=5", "--chdir=/tmp",
         "--output=/dev/null", "--wrap=sleep 2"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return int(submitted.stdout.strip().split(";")[0])


def test_plain_sbatch_by_the_capped_member_pends_at_the_limit_while_a_teammates_runs(
    project, dev_cluster, alice, bob
):
    # A cap of 36 GPU-seconds: a one-minute limit, less than the job's five GPU-minutes.
    member_cap_set(actor=alice, allocation=project.allocations.get(), user=bob, gpu_hours=0.01)
    report = reconcile(cluster=dev_cluster)
    assert not report.errors, report.errors
    capped = sbatch_as("bob", project.slurm_account)
    teammate = sbatch_as("alice", project.slurm_account)
    client = client_for(dev_cluster)

    def seen(job_id: int):
        return next((e for e in client.queue() if e.job_id == job_id), None)

    def held_at_the_limit():
        entry = seen(capped)
        return (
            entry is not None and entry.state == "PENDING" and entry.reason.startswith("AssocGrp")
        )

    wait_for(held_at_the_limit, timeout_s=30, interval_s=0.5, what="bob's job to pend at his limit")
    assert seen(capped).reason == "AssocGrpGRESMinutes"

    def started_or_done():
        entry = seen(teammate)
        return entry is None or entry.state in ("RUNNING", "COMPLETING")

    wait_for(started_or_done, timeout_s=30, interval_s=0.5, what="alice's job to run")
    assert seen(capped).state == "PENDING"  # still held, not merely slow


def cpu_sbatch(run_as: list[str], account: str, partition: str) -> int:
    """Plain sbatch of a CPU-only job (no GPU) on a login node, as the user of ``run_as``."""
    submitted = subprocess.run(
        [*run_as, "sbatch", "--parsable", f"--account={account}", f"--partition={partition}",
         "--ntasks=1", "--cpus-per-task=1", "--time=5", "--chdir=/tmp", "--output=/dev/null",
         "--wrap=sleep 2"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return int(submitted.stdout.strip().split(";")[0])


def a_cap_of_zero_stops_cpu_only_sbatch(cluster, project, alice, bob, partition) -> None:
    """bob, capped at 0, sends a CPU-only job with plain sbatch: it pends at his own CPU
    limit while alice's identical job runs."""
    member_cap_set(actor=alice, allocation=project.allocations.get(), user=bob, gpu_hours=0)
    report = reconcile(cluster=cluster)
    assert not report.errors, report.errors
    client = client_for(cluster)
    limits = client.account_limits(project.slurm_account)
    assert limits.user_cpu_minutes["bob"] == client.minutes_used(
        project.slurm_account
    ).users_cpu.get("bob", 0)
    prefix = run_as_prefix_template(cluster.run_as_prefix or settings.SLURM_RUN_AS_PREFIX)
    capped = cpu_sbatch(run_as_prefix_argv(prefix, "bob"), project.slurm_account, partition)
    teammate = cpu_sbatch(run_as_prefix_argv(prefix, "alice"), project.slurm_account, partition)

    def seen(job_id: int):
        return next((e for e in client.queue() if e.job_id == job_id), None)

    def held_at_the_limit():
        entry = seen(capped)
        return entry is not None and entry.state == "PENDING" and entry.reason.startswith("Assoc")

    wait_for(held_at_the_limit, timeout_s=30, interval_s=0.5, what="bob's job to pend at his limit")
    assert seen(capped).reason == "AssocGrpCPUMinutesLimit"

    def started_or_done():
        entry = seen(teammate)
        return entry is None or entry.state in ("RUNNING", "COMPLETING")

    wait_for(started_or_done, timeout_s=30, interval_s=0.5, what="alice's job to run")
    assert seen(capped).state == "PENDING"  # still held, not merely slow


def test_a_member_capped_at_zero_cannot_run_cpu_only_plain_sbatch(project, dev_cluster, alice, bob):
    a_cap_of_zero_stops_cpu_only_sbatch(dev_cluster, project, alice, bob, "debug")


def test_the_rest_adapter_sets_the_members_cpu_limit_on_24_11(
    make_project, next_cluster, alice, bob
):
    cluster = through_slurmrestd(next_cluster)
    project = make_project(members={alice: "pi", bob: "member"}, gpu_hours=10, clusters=(cluster,))
    try:
        a_cap_of_zero_stops_cpu_only_sbatch(cluster, project, alice, bob, "short")
    finally:
        SlurmOperator(cluster.name, cluster.command_prefix).run(
            "scancel", f"--account={project.slurm_account}"
        )
