"""Every run Slurm runs is charged once, at what it ran on (issue 33), through real Slurm.

An owner can run their job again with ``scontrol requeue`` (from a login node, or from
inside the job's own script, even after it completed while slurmctld still holds it) and
change a pending job with ``scontrol update``: each run is its own accounting record and
its own charge, at the dearer of the price the job was quoted and the partition Slurm
ran it on; the ledger ends equal to what ``sacct --duplicates`` says Slurm ran.

A requeued job waits before it may start again, until its revoked credential expires
(AuthInfo's cred_expire: 120 s by default, 10 s on the dev clusters); forcing it to start
sooner (``StartTime=now``) makes its launch fail now and then.
"""

import subprocess
import time
from decimal import Decimal

import pytest
from django.conf import settings

from accounts.models import LedgerEntry
from accounts.selectors import project_balance
from clusters.prefixes import run_as_prefix_argv, run_as_prefix_template
from jobs.accounting import accounting_sync
from jobs.models import AccountingRecord, Job
from jobs.pricing import charge_gpu_seconds
from jobs.queue_sync import queue_sync
from jobs.services import job_create
from jobs.states import JobState
from tests.conftest import through_slurmrestd
from tests.factories import request_for, run_to_the_end, wait_for
from tests.slurm_accounts import SlurmOperator

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]


def as_owner(cluster, *argv: str) -> subprocess.CompletedProcess[str]:
    """A Slurm command run by alice, as on a login node of ``cluster``."""
    prefix = run_as_prefix_template(cluster.run_as_prefix or settings.SLURM_RUN_AS_PREFIX)
    return subprocess.run(
        [*run_as_prefix_argv(prefix, "alice"), *argv], capture_output=True, text=True, check=False
    )


def operator(cluster) -> SlurmOperator:
    return SlurmOperator(cluster.name, cluster.command_prefix)


def requeue_as_owner(cluster, slurm_job_id: int, *, allow: bool = True) -> None:
    """What any owner can do to a job of theirs, whatever the portal submitted it with:
    allow it to be requeued (while it has not ended), then requeue it."""
    steps = [("update", f"jobid={slurm_job_id}", "Requeue=1")] if allow else []
    for argv in [*steps, ("requeue", str(slurm_job_id))]:
        done = as_owner(cluster, "scontrol", *argv)
        assert done.returncode == 0, done.stderr


def slurm_state(cluster, slurm_job_id: int) -> str:
    shown = operator(cluster).run(
        "squeue", "--noheader", "--states=all", f"--jobs={slurm_job_id}", "-o", "%T"
    )
    return shown.stdout.strip()


def runs_in_sacct(cluster, slurm_job_id: int) -> list[dict]:
    """Every run of the job as ``sacct --duplicates`` prints it, read apart from the
    portal's own parser (these fields hold nothing a user writes)."""
    shown = operator(cluster).run(
        "sacct", "--duplicates", "--allocations", "--noheader", "--parsable2",
        f"--jobs={slurm_job_id}", "--starttime=now-1days",
        "--format=JobIDRaw,Submit,State,Partition,ElapsedRaw,AllocTRES",
        check=True,
    )  # fmt: skip
    runs = []
    for line in shown.stdout.splitlines():
        _raw_id, submit_time, state, partition, elapsed, tres = line.split("|")
        counts = dict(item.split("=", 1) for item in tres.split(",") if "=" in item)
        runs.append(
            {
                "submitted": submit_time,
                "state": state.split()[0],
                "partition": partition,
                "elapsed_s": int(elapsed),
                "gpus": int(counts.get("gres/gpu", 0)),
                "cpus": int(counts.get("cpu", 0)),
            }
        )
    return runs


def charges_of(job: Job) -> dict[str, int]:
    return dict(
        LedgerEntry.objects.filter(
            kind="charge", reference__startswith=f"{job.cluster.name}:{job.slurm_job_id}@"
        ).values_list("reference", "gpu_seconds")
    )


def assert_every_run_charged_once(job: Job, *, runs: int, weight: Decimal) -> None:
    """The ledger holds one charge per run sacct lists, each what that run used at
    ``weight``, and the job's use is their sum; nothing is held for it any more."""
    in_sacct = runs_in_sacct(job.cluster, job.slurm_job_id)
    assert len(in_sacct) == runs, in_sacct
    assert [run["state"] for run in in_sacct[:-1]] == ["REQUEUED"] * (runs - 1)
    expected = sorted(
        charge_gpu_seconds(
            allocated_gpus=run["gpus"],
            allocated_cpus=run["cpus"],
            elapsed_s=run["elapsed_s"],
            billing_weight=weight,
            cpu_hour_rate=job.cpu_hour_rate,
        )
        for run in in_sacct
    )
    charges = charges_of(job)
    assert sorted(-gpu_seconds for gpu_seconds in charges.values()) == expected
    records = AccountingRecord.objects.filter(job=job)
    assert records.count() == runs
    assert {record.charge_reference for record in records} == set(charges)
    job.refresh_from_db()
    assert job.used_gpu_seconds == sum(expected)
    assert project_balance(job.project).held_gpu_seconds == 0
    # Reading accounting again charges nothing twice.
    accounting_sync(cluster=job.cluster)
    assert charges_of(job) == charges


def submitted(job: Job) -> Job:
    wait_for(lambda: Job.objects.get(pk=job.pk).slurm_job_id, what="the worker to submit the job")
    job.refresh_from_db()
    return job


def running(job: Job) -> None:
    def seen_running():
        queue_sync(cluster=job.cluster)
        return Job.objects.get(pk=job.pk).state == JobState.RUNNING

    wait_for(seen_running, timeout_s=60, interval_s=0.3, what=f"job {job.pk} to run")


@pytest.fixture
def project(make_project, alice):
    return make_project(members={alice: "pi"}, gpu_hours=10)


def test_a_job_its_owner_requeues_is_charged_for_both_runs(
    celery_worker, dev_cluster, project, alice, workdir
):
    job = submitted(
        job_create(user=alice, request=request_for(project, workdir, script="sleep 6\n"))
    )
    running(job)
    time.sleep(2)  # the first run uses GPU time that must not be free
    requeue_as_owner(dev_cluster, job.slurm_job_id)
    run_to_the_end(job, timeout_s=120)
    assert job.state == JobState.COMPLETED
    assert_every_run_charged_once(job, runs=2, weight=job.billing_weight)
    assert "requeued 1 time, every run charged" in job.events.last().detail


def test_a_job_that_requeues_itself_from_its_own_script_is_charged_for_both_runs(
    celery_worker, dev_cluster, project, alice, workdir
):
    script = (
        'if [ -z "$SLURM_RESTART_COUNT" ]; then\n'
        "  sleep 3\n"
        "  scontrol update jobid=$SLURM_JOB_ID Requeue=1\n"
        "  scontrol requeue $SLURM_JOB_ID\n"
        "  sleep 60\n"
        "fi\n"
        "sleep 2\n"
    )
    job = submitted(job_create(user=alice, request=request_for(project, workdir, script=script)))
    running(job)
    run_to_the_end(job, timeout_s=120)
    assert job.state == JobState.COMPLETED
    assert_every_run_charged_once(job, runs=2, weight=job.billing_weight)


def test_a_job_requeued_after_it_completed_is_followed_and_charged_again(
    celery_worker, dev_cluster, project, alice, workdir
):
    # A job submitted --no-requeue can no longer be allowed to requeue once it ended; one
    # whose template asked for requeue can, while slurmctld still holds it (MinJobAge,
    # 10 s on the dev cluster), after the portal finished it.
    request = request_for(project, workdir, script="sleep 3\n", requeue=True)
    job = submitted(job_create(user=alice, request=request))
    wait_for(
        lambda: slurm_state(dev_cluster, job.slurm_job_id) == "COMPLETED",
        timeout_s=60,
        interval_s=0.2,
        what="the job to complete",
    )
    requeue_as_owner(dev_cluster, job.slurm_job_id, allow=False)
    run_to_the_end(job)  # the first run, charged as the job ended
    assert job.state == JobState.COMPLETED

    def charged_again():
        queue_sync(cluster=dev_cluster)
        accounting_sync(cluster=dev_cluster)
        job.refresh_from_db()
        return job.state == JobState.COMPLETED and len(charges_of(job)) == 2

    wait_for(charged_again, timeout_s=120, interval_s=0.5, what="the second run to be charged")
    # Finished before the second run reached accounting, it was followed again ("requeued
    # after it ended"); if the second run came first, it ended once, "requeued 1 time".
    assert "requeued" in " ".join(job.events.values_list("detail", flat=True))
    assert_every_run_charged_once(job, runs=2, weight=job.billing_weight)


def test_a_pending_job_moved_to_a_dearer_partition_with_more_gpus_pays_what_it_ran_on(
    celery_worker, dev_cluster, project, alice, workdir
):
    dev_cluster.partitions.filter(name="debug").update(billing_weight=Decimal("0.25"))
    dev_cluster.partitions.filter(name="gpu").update(billing_weight=Decimal("2"))
    # It waits on another job of hers, so it is still pending when she changes it.
    blocker = submitted(
        job_create(
            user=alice,
            request=request_for(
                project, workdir, name="blocker", gpus_per_node=0, script="sleep 120\n"
            ),
        )
    )
    request = request_for(
        project, workdir, partition="debug", time_limit_minutes=2, depends_on=[blocker.pk],
        script="sleep 3\n",
    )  # fmt: skip
    job = submitted(job_create(user=alice, request=request))
    assert job.billing_weight == Decimal("0.25")
    for change in ("partition=gpu", "TimeLimit=3", "TresPerNode=gres:gpu:4", "Dependency="):
        changed = as_owner(dev_cluster, "scontrol", "update", f"jobid={job.slurm_job_id}", change)
        assert changed.returncode == 0, changed.stderr
    as_owner(dev_cluster, "scancel", str(blocker.slurm_job_id))
    run_to_the_end(job)
    record = AccountingRecord.objects.get(job=job)
    assert (record.partition, record.allocated_gpus) == ("gpu", 4)
    assert_every_run_charged_once(job, runs=1, weight=Decimal("2"))
    assert "partition debug -> gpu" in record.charge_note
    assert "GPUs 1 -> 4" in record.charge_note
    assert any("partition debug -> gpu" in e.detail for e in job.events.all())


def test_a_plain_sbatch_job_requeued_is_charged_to_its_project_for_both_runs(
    dev_cluster, project, alice, workdir
):
    done = as_owner(
        dev_cluster, "sbatch", "--parsable", "--requeue", f"--account={project.slurm_account}",
        "--partition=debug", "--gpus-per-node=1", "--time=2", f"--chdir={workdir}",
        "--output=/dev/null", "--wrap=sleep 5",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    slurm_job_id = int(done.stdout.strip().split(";")[0])
    wait_for(lambda: slurm_state(dev_cluster, slurm_job_id) == "RUNNING", what="the job to run")
    time.sleep(2)
    requeue_as_owner(dev_cluster, slurm_job_id)

    def both_charged():
        accounting_sync(cluster=dev_cluster)
        return (
            LedgerEntry.objects.filter(
                kind="charge", reference__startswith=f"{dev_cluster.name}:{slurm_job_id}@"
            ).count()
            == 2
        )

    wait_for(both_charged, timeout_s=120, interval_s=1, what="both runs to be charged")
    weight = dev_cluster.partitions.get(name="debug").billing_weight
    charged = sorted(
        -gpu_seconds
        for gpu_seconds in LedgerEntry.objects.filter(
            kind="charge", reference__startswith=f"{dev_cluster.name}:{slurm_job_id}@"
        ).values_list("gpu_seconds", flat=True)
    )
    rate = dev_cluster.partitions.get(name="debug").cpu_hour_rate
    assert charged == sorted(
        charge_gpu_seconds(
            allocated_gpus=run["gpus"], allocated_cpus=run["cpus"], elapsed_s=run["elapsed_s"],
            billing_weight=weight, cpu_hour_rate=rate,
        )
        for run in runs_in_sacct(dev_cluster, slurm_job_id)
    )  # fmt: skip
    assert all(charge > 0 for charge in charged)


def test_requeued_runs_are_charged_through_slurmrestd_on_24_11(
    celery_worker, next_cluster, make_project, alice, workdir
):
    project = make_project(members={alice: "pi"}, gpu_hours=10, clusters=(next_cluster,))
    cluster = through_slurmrestd(next_cluster)
    request = request_for(
        project, workdir, cluster=cluster.name, partition="short", script="sleep 6\n"
    )
    job = submitted(job_create(user=alice, request=request))
    running(job)
    time.sleep(2)
    requeue_as_owner(cluster, job.slurm_job_id)
    run_to_the_end(job, timeout_s=120)
    assert job.state == JobState.COMPLETED
    assert_every_run_charged_once(job, runs=2, weight=job.billing_weight)
