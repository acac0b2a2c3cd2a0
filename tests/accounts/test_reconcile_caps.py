"""The Slurm backstop of members' caps: the reconciler gives a capped member's own
association a GrpTRESMins gres/gpu (their raw usage plus what the cap still covers) and
removes it when the cap is lifted, so plain sbatch outside the portal stops at the cap."""

import subprocess
import uuid

import pytest

from accounts.caps import member_cap_clear, member_cap_set
from accounts.ledger import ledger_charge
from accounts.reconcile import reconcile
from accounts.services import membership_set, project_create
from clusters.slurm import client_for
from tests.factories import month_allocation, wait_for
from tests.slurm_accounts import account_remove

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
    assert changes(report, project) == [f"{account}: GrpTRESMins gres/gpu of bob None → 90"]
    client = client_for(dev_cluster)
    assert client.account_limits(account).user_gpu_minutes == {"bob": 90}
    assert changes(reconcile(cluster=dev_cluster), project) == []  # a rerun changes nothing

    member_cap_set(actor=alice, allocation=allocation, user=None, gpu_hours=1)  # a default
    member_cap_clear(actor=alice, allocation=allocation, user=bob)  # bob: the default now
    report = reconcile(cluster=dev_cluster)
    assert changes(report, project) == [
        f"{account}: GrpTRESMins gres/gpu of alice None → 60",
        f"{account}: GrpTRESMins gres/gpu of bob 90 → 30",
    ]
    member_cap_clear(actor=alice, allocation=allocation, user=None)
    report = reconcile(cluster=dev_cluster)
    assert changes(report, project) == [
        f"{account}: GrpTRESMins gres/gpu of alice 60 → None",
        f"{account}: GrpTRESMins gres/gpu of bob 30 → None",
    ]
    assert client.account_limits(account).user_gpu_minutes == {}


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
