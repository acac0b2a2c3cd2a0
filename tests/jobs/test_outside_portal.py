"""Work submitted with plain sbatch is charged on ingest; once the balance is spent, Slurm
stops the next such job (the reconciler's limit is the hard stop)."""

import subprocess
from decimal import Decimal

import pytest

from accounts.models import LedgerEntry
from accounts.reconcile import reconcile
from accounts.selectors import project_balance
from clusters.slurm import client_for
from jobs.accounting import accounting_sync
from jobs.models import AccountingRecord
from tests.conftest import DEV_CLUSTER
from tests.factories import wait_for

pytestmark = pytest.mark.slurm


def plain_sbatch(account: str, command: str, *, gpus: int = 1) -> int:
    gpu_option = [f"--gpus-per-node={gpus}"] if gpus else []
    submitted = subprocess.run(
        ["runuser", "-u", "alice", "--", "sbatch", "--parsable", f"--account={account}",
         "--partition=debug", *gpu_option, "--time=2", "--chdir=/tmp",
         "--output=/dev/null", f"--wrap={command}"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return int(submitted.stdout.strip().split(";")[0])


def test_plain_sbatch_work_is_charged_and_the_next_job_is_stopped_once_spent(
    make_project, dev_cluster, alice
):
    project = make_project(members={alice: "pi"}, gpu_hours=1)
    # On this partition a few seconds of one GPU cost more than the whole hour.
    dev_cluster.partitions.filter(name="debug").update(billing_weight=Decimal("999"))
    first = plain_sbatch(project.slurm_account, "sleep 4")
    reference = f"{DEV_CLUSTER}:{first}@"

    def charged():
        accounting_sync(cluster=dev_cluster)
        return LedgerEntry.objects.filter(kind="charge", reference__startswith=reference).first()

    charge = wait_for(charged, timeout_s=90, interval_s=1, what="the sbatch job to be charged")
    assert charge.user == alice
    assert charge.partition.name == "debug"
    assert -charge.gpu_seconds >= 4 * 999
    balance = project_balance(project)
    assert balance.available_gpu_seconds <= 0
    assert balance.held_gpu_seconds == 0

    report = reconcile(cluster=dev_cluster)
    assert not report.errors, report.errors
    second = plain_sbatch(project.slurm_account, "true")
    client = client_for(dev_cluster)

    def stopped_by_the_limit():
        entry = next((e for e in client.queue() if e.job_id == second), None)
        return entry is not None and entry.state == "PENDING" and "AssocGrp" in entry.reason

    wait_for(stopped_by_the_limit, timeout_s=30, what="Slurm to hold the job at the limit")
    # Ingesting again charges nothing twice.
    accounting_sync(cluster=dev_cluster)
    assert LedgerEntry.objects.filter(kind="charge", reference__startswith=reference).count() == 1


def test_plain_sbatch_cpu_only_work_is_charged_and_stopped_by_the_cpu_limit(
    make_project, dev_cluster, alice
):
    """Issue 16: a job without GPUs was free and unlimited from a login node."""
    project = make_project(members={alice: "pi"}, gpu_hours=1)
    # A few seconds of one CPU cost more than the whole GPU-hour here.
    dev_cluster.partitions.update(cpu_hour_rate=Decimal("999"))
    first = plain_sbatch(project.slurm_account, "sleep 4", gpus=0)
    reference = f"{DEV_CLUSTER}:{first}@"

    def charged():
        accounting_sync(cluster=dev_cluster)
        return LedgerEntry.objects.filter(kind="charge", reference__startswith=reference).first()

    charge = wait_for(charged, timeout_s=90, interval_s=1, what="the sbatch job to be charged")
    record = AccountingRecord.objects.get(cluster=dev_cluster, slurm_job_id=first)
    assert (record.allocated_gpus, record.allocated_cpus) == (0, 1)
    assert -charge.gpu_seconds == record.elapsed_s * 999 >= 4 * 999
    assert project_balance(project).available_gpu_seconds <= 0

    report = reconcile(cluster=dev_cluster)
    assert not report.errors, report.errors
    client = client_for(dev_cluster)
    # Nothing left to cover: the CPU limit is what Slurm has counted so far.
    assert (
        client.account_limits(project.slurm_account).cpu_minutes
        == client.minutes_used(project.slurm_account).cpu
    )
    second = plain_sbatch(project.slurm_account, "true", gpus=0)

    def stopped_by_the_cpu_limit():
        entry = next((e for e in client.queue() if e.job_id == second), None)
        return (
            entry is not None and entry.state == "PENDING" and "AssocGrp" in entry.reason and entry
        )

    entry = wait_for(stopped_by_the_cpu_limit, timeout_s=30, what="Slurm to hold the CPU job")
    assert entry.reason == "AssocGrpCPUMinutesLimit"
