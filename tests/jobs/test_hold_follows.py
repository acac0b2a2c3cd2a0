"""A portal job's hold follows the job when its owner makes it dearer in Slurm (issue 33).

The owner of a pending job can ``scontrol update`` its partition, time limit and GPUs;
the queue sync sees the listed request, and when it costs more than the job requested
the hold is raised by the difference (as far as the balance covers it), once, with an
event saying what changed. A job made cheaper keeps what it holds.
"""

import datetime as dt
import math
import subprocess
import uuid
from decimal import Decimal

import pytest
from django.conf import settings

from accounts.ledger import ledger_hold
from accounts.models import LedgerEntry
from accounts.selectors import project_balance
from clusters.models import Partition
from clusters.prefixes import run_as_prefix_argv, run_as_prefix_template
from clusters.slurm.states import SlurmJobState
from clusters.slurm.types import QueueEntry
from jobs.accounting import accounting_ingest
from jobs.models import Job
from jobs.pricing import requested_price
from jobs.queue_sync import queue_apply, queue_sync
from jobs.services import job_create
from jobs.states import JobState
from tests.factories import project_with_allocation, recorded_cluster, request_for, wait_for
from tests.jobs.test_accounting_ingest import NOW, entry

# 2 GPUs for 10 minutes on "gpu" (1.5 GPU-hours a GPU-hour) and one CPU (0.01 a CPU-hour).
ASKED = 2 * 600 * 3 // 2 + 6


@pytest.fixture
def cluster(db):
    cluster = recorded_cluster()
    Partition.objects.create(cluster=cluster, name="big", billing_weight=Decimal("3"))
    Partition.objects.create(cluster=cluster, name="cheap", billing_weight=Decimal("0.5"))
    return cluster


@pytest.fixture
def project(cluster, alice):
    return project_with_allocation(cluster, pi=alice, gpu_hours=10)


def held_job(project, cluster, owner, *, slurm_job_id: int = 900, array: str = "", tasks=1):
    """A pending portal job of 2 GPUs for 10 minutes on "gpu", priced and held as
    job_create prices and holds one."""
    partition = cluster.partitions.get(name="gpu")
    price = requested_price(
        nodes=1, gpus_per_node=2, cpus=1, time_limit_minutes=10, array_tasks=tasks,
        billing_weight=partition.billing_weight, cpu_hour_rate=partition.cpu_hour_rate,
    ).total  # fmt: skip
    job = Job.objects.create(
        owner=owner, project=project, cluster=cluster, partition=partition, name="train",
        time_limit_minutes=10, gpus_per_node=2, working_directory="/home/alice",
        output_path="/home/alice/out", error_path="/home/alice/out", script="true\n",
        rendered_script="#!/bin/bash\ntrue\n", billing_weight=partition.billing_weight,
        cpu_hour_rate=partition.cpu_hour_rate, requested_gpu_seconds=price, array=array,
        array_tasks=tasks, slurm_job_id=slurm_job_id, state=JobState.PENDING,
        submit_token=uuid.uuid4(),
    )  # fmt: skip
    ledger_hold(
        allocation=project.allocations.get(), reference=job.hold_reference,
        gpu_seconds=price, user=owner,
    )  # fmt: skip
    Job.objects.filter(pk=job.pk).update(created_at=NOW - dt.timedelta(minutes=30))
    job.refresh_from_db()
    return job


@pytest.fixture
def job(project, cluster, alice):
    return held_job(project, cluster, alice)


def listed(
    slurm_job_id: int = 900, *, partition="gpu", gpus=2, minutes=10, gpus_known=True, **fields
) -> QueueEntry:
    """The job as squeue lists it after its owner's ``scontrol update``."""
    values = {
        "job_id": slurm_job_id, "array_job_id": None, "array_task": None, "name": "train",
        "user": "alice", "account": "vision", "partition": partition,
        "state": SlurmJobState.PENDING, "reason": "Priority", "comment": "",
        "submitted_at": NOW, "started_at": None, "time_limit_minutes": minutes,
        "gpus": gpus, "gpus_known": gpus_known, **fields,
    }  # fmt: skip
    return QueueEntry(**values)


def raises_of(job: Job) -> list[int]:
    """The GPU-seconds each raise of the job's hold held, in order."""
    return [
        -gpu_seconds
        for gpu_seconds in LedgerEntry.objects.filter(
            kind=LedgerEntry.Kind.HOLD, reference__startswith=f"{job.hold_reference}+"
        )
        .order_by("id")
        .values_list("gpu_seconds", flat=True)
    ]


def details(job: Job) -> list[str]:
    return list(job.events.values_list("detail", flat=True))


@pytest.mark.parametrize(
    ("change", "price", "said"),
    [
        ({"partition": "big"}, 2 * 600 * 3 + 6, "partition gpu -> big"),
        ({"gpus": 4}, 4 * 600 * 3 // 2 + 6, "GPUs 2 -> 4"),
        ({"minutes": 30}, 2 * 1800 * 3 // 2 + 18, "time limit 10 -> 30 min"),
        # Listed in several (it starts in the first that can run it): priced at the dearest.
        ({"partition": "gpu,big"}, 2 * 600 * 3 + 6, "partition gpu -> big"),
        ({"partition": "big", "gpus": 4, "minutes": 30}, 4 * 1800 * 3 + 18, "GPUs 2 -> 4"),
    ],
)
def test_a_pending_job_made_dearer_in_slurm_has_its_hold_raised_once(
    job, project, cluster, change, price, said
):
    assert job.requested_gpu_seconds == ASKED == 1806
    listing = [listed(**change)]

    result = queue_apply(cluster=cluster, entries=listing)

    assert result.holds_raised == [job.pk]
    assert raises_of(job) == [price - ASKED]
    job.refresh_from_db()
    assert (job.requested_gpu_seconds, job.hold_raises) == (price, 1)
    assert job.state == JobState.PENDING
    assert project_balance(project).held_gpu_seconds == price
    [event] = details(job)
    assert said in event
    assert f"requests {price / 3600:,.2f} GPU-hours now (was {ASKED / 3600:,.2f}), held" in event
    # The same listing again: nothing more is held, nothing more is said.
    again = queue_apply(cluster=cluster, entries=listing)
    assert again.holds_raised == [] and again.changed == 0
    assert raises_of(job) == [price - ASKED]
    assert project_balance(project).held_gpu_seconds == price
    assert len(details(job)) == 1


def test_a_job_that_grows_again_is_raised_again_by_the_difference(job, project, cluster):
    queue_apply(cluster=cluster, entries=[listed(gpus=4)])
    queue_apply(cluster=cluster, entries=[listed(gpus=4, minutes=30)])

    grown = 4 * 600 * 3 // 2 + 6
    assert raises_of(job) == [grown - ASKED, 4 * 1800 * 3 // 2 + 18 - grown]
    job.refresh_from_db()
    assert job.hold_raises == 2
    assert project_balance(project).held_gpu_seconds == job.requested_gpu_seconds == 10818


@pytest.mark.parametrize(
    "change",
    [{"partition": "cheap"}, {"gpus": 1}, {"minutes": 5}, {"gpus": 4, "minutes": 5}],
)
def test_a_job_made_cheaper_keeps_its_hold(job, project, cluster, change):
    result = queue_apply(cluster=cluster, entries=[listed(**change)])

    assert result.holds_raised == []
    assert raises_of(job) == []
    job.refresh_from_db()
    assert (job.requested_gpu_seconds, job.hold_raises) == (ASKED, 0)
    assert project_balance(project).held_gpu_seconds == ASKED
    assert details(job) == []


def test_a_job_grown_past_the_balance_holds_what_is_left_and_says_so(project, cluster, alice):
    allocation = project.allocations.get()
    # Others' jobs hold all but 1,000 GPU-seconds of the balance.
    ledger_hold(
        allocation=allocation, reference="others",
        gpu_seconds=allocation.available_gpu_seconds - ASKED - 1000,
    )  # fmt: skip
    job = held_job(project, cluster, alice)
    price = 4 * 1800 * 3 + 18

    result = queue_apply(cluster=cluster, entries=[listed(partition="big", gpus=4, minutes=30)])

    assert result.holds_raised == [job.pk]
    assert raises_of(job) == [1000]
    assert project_balance(project).available_gpu_seconds == 0
    job.refresh_from_db()
    assert (job.requested_gpu_seconds, job.hold_raises) == (price, 1)
    [event] = details(job)
    assert f"the balance covered 0.28 of the {(price - ASKED) / 3600:,.2f} GPU-hours more" in event
    assert "Slurm's limit" in event
    # Nothing is asked again while the listing stays the same, and nothing else is held.
    queue_apply(cluster=cluster, entries=[listed(partition="big", gpus=4, minutes=30)])
    assert raises_of(job) == [1000]
    assert len(details(job)) == 1


def test_a_job_whose_gpus_the_listing_cannot_say_is_raised_for_its_time_only(job, project, cluster):
    # Asked with --gpus (per job), squeue's %b says N/A: no GPU count from the listing.
    result = queue_apply(cluster=cluster, entries=[listed(gpus=0, gpus_known=False, minutes=30)])

    assert result.holds_raised == [job.pk]
    assert raises_of(job) == [2 * 1800 * 3 // 2 + 18 - ASKED]
    [event] = details(job)
    assert "time limit 10 -> 30 min" in event and "GPUs" not in event


def test_an_array_is_priced_for_all_its_tasks(project, cluster, alice):
    array = held_job(project, cluster, alice, slurm_job_id=910, array="0-3", tasks=4)
    assert array.requested_gpu_seconds == 4 * ASKED
    running_task = listed(911, array_job_id=910, array_task="0", state=SlurmJobState.RUNNING,
                          started_at=NOW)  # fmt: skip
    waiting_tasks = listed(910, array_job_id=910, array_task="1-3", gpus=4)

    result = queue_apply(cluster=cluster, entries=[running_task, waiting_tasks])

    # Its owner can still change the tasks that wait: what they ask, for every task.
    assert result.holds_raised == [array.pk]
    assert raises_of(array) == [4 * (4 * 600 * 3 // 2 + 6) - 4 * ASKED]


def test_a_finished_grown_job_gives_back_its_raises_with_its_hold(job, project, cluster):
    queue_apply(cluster=cluster, entries=[listed(gpus=4)])
    job.refresh_from_db()

    accounting_ingest(cluster=cluster, entries=[entry(900, allocated_gpus=4, elapsed_s=60)])

    job.refresh_from_db()
    assert job.state == JobState.COMPLETED
    balance = project_balance(project)
    assert balance.held_gpu_seconds == 0
    assert balance.used_gpu_seconds == job.used_gpu_seconds > 0
    # A queue listing read before it ended, applied after: nothing raised for a job that ended.
    assert queue_apply(cluster=cluster, entries=[listed(gpus=8)]).holds_raised == []
    assert project_balance(project).held_gpu_seconds == 0


# --- through real Slurm -------------------------------------------------------------------


def as_alice(cluster, *argv: str) -> subprocess.CompletedProcess[str]:
    """A Slurm command run by alice, as on a login node of ``cluster``."""
    prefix = run_as_prefix_template(cluster.run_as_prefix or settings.SLURM_RUN_AS_PREFIX)
    return subprocess.run(
        [*run_as_prefix_argv(prefix, "alice"), *argv], capture_output=True, text=True, check=False
    )


@pytest.mark.slurm
@pytest.mark.django_db(transaction=True)
def test_a_held_job_its_owner_moves_in_slurm_has_its_hold_raised_by_one_sync(
    celery_worker, dev_cluster, make_project, alice, workdir
):
    dev_cluster.partitions.filter(name="debug").update(
        billing_weight=Decimal("1"), cpu_hour_rate=Decimal("0.01")
    )
    dev_cluster.partitions.filter(name="gpu").update(
        billing_weight=Decimal("2"), cpu_hour_rate=Decimal("0.01")
    )
    project = make_project(members={alice: "pi"}, gpu_hours=10)
    # Held in Slurm by a dependency on a job of hers that does not end by itself.
    blocker = job_create(
        user=alice,
        request=request_for(project, workdir, name="blocker", gpus_per_node=0,
                            script="sleep 600\n"),
    )  # fmt: skip
    job = job_create(
        user=alice,
        request=request_for(project, workdir, partition="debug", gpus_per_node=1,
                            time_limit_minutes=2, depends_on=[blocker.pk], script="true\n"),
    )  # fmt: skip
    try:
        wait_for(
            lambda: Job.objects.get(pk=job.pk).slurm_job_id, what="the worker to submit the job"
        )
        job.refresh_from_db()
        asked = job.requested_gpu_seconds
        assert asked == math.ceil(1 * 120 * 1 + 1 * 120 * 0.01)
        for change in ("partition=gpu", "TimeLimit=30", "TresPerNode=gres/gpu:4"):
            done = as_alice(dev_cluster, "scontrol", "update", f"jobid={job.slurm_job_id}", change)
            assert done.returncode == 0, done.stderr

        result = queue_sync(cluster=dev_cluster)

        assert job.pk in result.holds_raised
        job.refresh_from_db()
        price = 4 * 1800 * 2 + 1800 // 100  # 4 GPUs for 30 minutes at 2, one CPU at 0.01
        assert (job.requested_gpu_seconds, job.hold_raises) == (price, 1)
        assert job.state == JobState.PENDING
        assert raises_of(job) == [price - asked]
        [event] = [e for e in details(job) if "changed in Slurm" in e]
        for said in ("partition debug -> gpu", "GPUs 1 -> 4", "time limit 2 -> 30 min"):
            assert said in event
        assert queue_sync(cluster=dev_cluster).holds_raised == []
        assert raises_of(job) == [price - asked]
    finally:
        for each in (job, blocker):
            each.refresh_from_db()
            if each.slurm_job_id:
                as_alice(dev_cluster, "scancel", str(each.slurm_job_id))
