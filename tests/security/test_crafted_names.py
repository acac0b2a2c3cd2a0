"""The researcher who crafts names and comments (issue 33; docs/RELIABILITY.md).

Slurm takes every byte but NUL in a job's name and comment and prints them raw. alice,
from a login node, under her own project's account on portal-dev, writes whole forged
records there: accounting's, charging bob's project 8 GPUs for 100 hours of a job that
never was and of bob's real running job; the queue's, showing bob's job suspended and a
job that does not exist; and the name that once stopped every queue sync of the cluster.
Through the portal itself (its queue syncs, accounting ingests and invariant check): bob's
project pays for his own job only, at what Slurm ran; the portal keeps no record of a job
Slurm does not have; bob's job follows Slurm; alice's jobs are charged to her project;
the syncs and ingests go on and the watermark moves; the check finds nothing wrong.
"""

import subprocess

import pytest

from accounts.models import LedgerEntry
from accounts.selectors import project_balance
from clusters.models import RefusedRecord
from clusters.slurm import client_for
from clusters.slurm.types import Refused
from jobs.accounting import accounting_sync
from jobs.invariants import invariants_check
from jobs.models import AccountingRecord, ClusterSync, Job
from jobs.queue_sync import queue_sync
from jobs.services import job_create
from jobs.states import JobState
from jobs.submission import job_submit
from tests.clusters.contract import (
    FORGED_ID,
    HALTING_NAME,
    forged_records,
    sbatch_crafted,
    submitted,
)
from tests.conftest import through_slurmrestd, workdir_of
from tests.factories import request_for, run_to_the_end, wait_for
from tests.jobs.test_forged_tokens import nobody_takes_submissions

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def bobs_workdir(bob):
    yield from workdir_of("bob")


def portal_job(project, owner, workdir, *, seconds: int) -> Job:
    """A portal job of ``owner``'s, submitted (by the test, not the session's worker)."""
    request = request_for(project, workdir, script=f"sleep {seconds}\n", name="portal")
    with nobody_takes_submissions():
        job = job_create(user=owner, request=request)
    job_submit(job_id=job.pk)
    job.refresh_from_db()
    assert job.slurm_job_id is not None
    return job


def crafted_by_alice(cluster, project, *, name: bytes, comment: bytes, seconds=None) -> int:
    """alice's plain sbatch job on the debug partition under her project's account."""
    return submitted(
        sbatch_crafted(
            cluster, "alice", project.slurm_account, "debug",
            name=name, comment=comment, seconds=seconds,
        )
    )  # fmt: skip


def queued_in_slurm(account: str) -> set[int]:
    """The ids of the jobs of ``account`` in portal-dev's queue, as root reads them."""
    shown = subprocess.run(
        ["squeue", "--noheader", "--all", f"--account={account}", "--format=%A"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return {int(job_id) for job_id in shown.stdout.split()}


def of_these(refused: list[Refused], ids: set[int]) -> list[Refused]:
    return [record for record in refused if record.job_id in ids | {FORGED_ID}]


def test_forged_records_in_names_charge_no_one_else_and_change_no_job(
    make_project, dev_cluster, alice, bob, workdir, bobs_workdir
):
    """alice's forged records claim bob's running portal job (suspended; completed after
    100 hours on 8 GPUs) and a job that never was, under bob's project's account."""
    vision = make_project(members={alice: "pi"})
    genomics = make_project(members={bob: "pi"})
    victim = portal_job(genomics, bob, bobs_workdir, seconds=8)
    slurm_id = victim.slurm_job_id

    def forged(job_id: int, state: str = "RUNNING") -> dict[str, bytes]:
        return forged_records(
            job_id=job_id, user="bob", account=genomics.slurm_account, partition="debug",
            state=state,
        )  # fmt: skip

    on_nobody, on_victim = forged(FORGED_ID), forged(slurm_id, "SUSPENDED")
    # Issue 33's attack: a record of accounting for a job that never was, then one of
    # the queue, in the name; today's accounting record of bob's job in the comment. It
    # runs, ends and is accounted with them.
    ran = crafted_by_alice(
        dev_cluster, vision,
        name=b"inj\n" + on_nobody["sacct before issue 33"] + on_victim["squeue before issue 33"],
        comment=on_victim["sacct"][:1024], seconds=2,
    )  # fmt: skip
    # Queued while bob's job runs: it suspended, in either shape; the name that stopped
    # every sync; a job that does not exist after a record separator, which the cli
    # adapter's queue once listed.
    held = {
        crafted_by_alice(
            dev_cluster, vision,
            name=b"\n" + on_victim["squeue"], comment=on_victim["squeue before issue 33"],
        ),
        crafted_by_alice(dev_cluster, vision, name=HALTING_NAME, comment=b"x"),
        crafted_by_alice(
            dev_cluster, vision,
            name=b"\x1e" + on_nobody["squeue before issue 33"], comment=on_nobody["squeue"],
        ),
    }  # fmt: skip
    crafted = {ran, *held}

    def seen_running():
        result = queue_sync(cluster=dev_cluster)
        assert of_these(result.refused, crafted | {slurm_id}) == []
        victim.refresh_from_db()
        return victim.state == JobState.RUNNING

    wait_for(seen_running, timeout_s=60, interval_s=0.3, what="bob's job to run")
    assert (victim.slurm_state, victim.reason) == ("RUNNING", "")
    listing = client_for(dev_cluster).queue()
    assert {e.job_id for e in listing if e.account == vision.slurm_account} == queued_in_slurm(
        vision.slurm_account
    )
    assert not [e for e in listing if e.job_id == FORGED_ID]
    seen = next(e for e in listing if e.job_id == slurm_id)
    assert (seen.state, seen.gpus, seen.user, seen.account) == (
        "RUNNING", 1, "bob", genomics.slurm_account,
    )  # fmt: skip

    subprocess.run(["scancel", *map(str, held)], check=True)
    victim = run_to_the_end(victim)
    assert victim.state == JobState.COMPLETED
    assert not victim.events.filter(state=JobState.SUSPENDED).exists()

    def all_charged():
        result = accounting_sync(cluster=dev_cluster)
        assert result.records > 0
        return AccountingRecord.objects.filter(
            cluster=dev_cluster, slurm_job_id__in=crafted, charged_gpu_seconds__isnull=False
        ).count() == len(crafted)

    wait_for(all_charged, timeout_s=60, interval_s=1, what="alice's jobs to be charged")

    # No record of a job Slurm does not have; bob's project has his job's only.
    assert not AccountingRecord.objects.filter(slurm_job_id=FORGED_ID).exists()
    records = AccountingRecord.objects.filter(cluster=dev_cluster)
    assert {r.slurm_job_id for r in records.filter(account=genomics.slurm_account)} == {slurm_id}
    assert {r.slurm_job_id for r in records.filter(account=vision.slurm_account)} == crafted
    (own,) = records.filter(slurm_job_id=slurm_id)
    in_slurm = subprocess.run(
        ["sacct", "--noheader", "--parsable2", "--allocations", f"--jobs={slurm_id}",
         "--format=ElapsedRaw,AllocTRES"],
        capture_output=True, text=True, check=True,
    ).stdout.split("|")  # fmt: skip
    assert (own.elapsed_s, own.allocated_gpus) == (int(in_slurm[0]), 1)
    assert "gres/gpu=1" in in_slurm[1]

    # bob's project: his job's hold, its release and its one charge, nothing else.
    moved = LedgerEntry.objects.filter(allocation__project=genomics).exclude(
        kind=LedgerEntry.Kind.GRANT
    )
    charge = moved.get(kind=LedgerEntry.Kind.CHARGE)
    assert charge.reference.startswith(f"{dev_cluster.name}:{slurm_id}@")
    assert -charge.gpu_seconds == victim.used_gpu_seconds == own.charged_gpu_seconds > 0
    assert {e.reference for e in moved.exclude(pk=charge.pk)} == set(victim.hold_references)
    granted = LedgerEntry.objects.get(allocation__project=genomics, kind=LedgerEntry.Kind.GRANT)
    balance = project_balance(genomics)
    assert balance.available_gpu_seconds == granted.gpu_seconds - victim.used_gpu_seconds
    assert balance.held_gpu_seconds == 0

    # alice's jobs are charged to her project, on her name; the one that ran for its time.
    # (One cancelled before its first record reached 22.05's slurmdbd is listed for some
    # seconds without its partition: it may be charged its 0 without a ledger entry.)
    for slurm_job_id in crafted:
        charges = LedgerEntry.objects.filter(
            kind=LedgerEntry.Kind.CHARGE,
            reference__startswith=f"{dev_cluster.name}:{slurm_job_id}@",
        )
        assert {(c.allocation.project, c.user) for c in charges} <= {(vision, alice)}
        assert (
            -sum(c.gpu_seconds for c in charges)
            == records.get(slurm_job_id=slurm_job_id).charged_gpu_seconds
        )
    ran_charge = LedgerEntry.objects.get(
        kind=LedgerEntry.Kind.CHARGE, reference__startswith=f"{dev_cluster.name}:{ran}@"
    )
    assert (ran_charge.allocation.project, ran_charge.user) == (vision, alice)
    assert -ran_charge.gpu_seconds == records.get(slurm_job_id=ran).charged_gpu_seconds > 0

    # The ingest went on past the crafted records, and nothing was refused or is wrong.
    mark = ClusterSync.objects.get(cluster=dev_cluster).accounting_until
    assert mark >= records.get(slurm_job_id=ran).ended_at
    assert not RefusedRecord.objects.filter(slurm_job_id__in=crafted | {slurm_id, FORGED_ID})
    findings = invariants_check(cluster=dev_cluster)
    assert findings.violations == []
    # A forged queue record begins with its comment's column: a made-up token, padded.
    # The listing carries a comment's first 64 bytes without the spaces that end them,
    # so that job reads as carrying the token, as if alice had copied it whole (which
    # anyone can): reported as such, charged as her own work outside the portal.
    named = [w for w in findings.warnings if any(f"job {i} " in w.detail for i in crafted)]
    assert {w.name for w in named} <= {"unknown-token"}
    assert all("of alice under" in w.detail for w in named)


@pytest.mark.parametrize("backend", ["cli", "rest"])
def test_a_crafted_name_stops_neither_the_queue_sync_nor_the_ingest(
    make_project, dev_cluster, alice, workdir, backend
):
    """Issue 33's halt: a held job named so, and bytes that are not UTF-8 in the queue
    and in accounting (slurmdbd keeps the UTF-8 form of a surrogate as it is), while
    alice's portal job runs: every sync and ingest returns, her job is followed and
    charged, the watermark moves past the crafted job's end."""
    vision = make_project(members={alice: "pi"})
    if backend == "rest":  # after the limits were set through the CLI (see test_forged_tokens)
        through_slurmrestd(dev_cluster)
    held = crafted_by_alice(dev_cluster, vision, name=HALTING_NAME, comment=b"\xff\xfe\x1e\n")
    ran = crafted_by_alice(
        dev_cluster, vision, name=b"a\xed\xa0\x80" + HALTING_NAME, comment=b"\xc3", seconds=1
    )
    try:
        job = run_to_the_end(portal_job(vision, alice, workdir, seconds=2))
        assert job.state == JobState.COMPLETED and job.used_gpu_seconds > 0
        result = queue_sync(cluster=dev_cluster)
        assert of_these(result.refused, {held, ran}) == []
    finally:
        subprocess.run(["scancel", str(held)], check=True)

    def crafted_charged():
        accounting_sync(cluster=dev_cluster)
        return (
            AccountingRecord.objects.filter(
                cluster=dev_cluster, slurm_job_id__in=(held, ran), charged_gpu_seconds__isnull=False
            ).count()
            == 2
        )

    wait_for(crafted_charged, timeout_s=60, interval_s=1, what="the crafted jobs to be charged")
    ended = AccountingRecord.objects.get(cluster=dev_cluster, slurm_job_id=ran).ended_at
    assert ClusterSync.objects.get(cluster=dev_cluster).accounting_until >= ended
    assert not RefusedRecord.objects.filter(slurm_job_id__in=(held, ran))
