"""A portal job's hold follows the job when its owner makes it dearer in Slurm.

The owner of a pending job may move it with ``scontrol update`` (another partition, more
GPUs, a longer time limit); the portal then holds what the job asks for now. The queue
sync finds the jobs whose listed request costs more than they requested
(``jobs.queue_sync``) and hands each to ``job_hold_follow`` after its own transaction.
A hold is never lowered: a job made cheaper keeps what it holds until accounting charges
what it used and gives the rest back.
"""

import logging
from decimal import Decimal
from typing import NamedTuple

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from accounts import ledger
from accounts.models import LedgerEntry
from clusters.models import Partition
from jobs import pricing
from jobs.models import Job
from jobs.services import job_event_add

logger = logging.getLogger(__name__)


class ListedRequest(NamedTuple):
    """What the queue listing says a job asks for now."""

    partition_id: int | None  # None: a partition the portal does not know
    gpus: int | None  # all its nodes together (per array task); None: the listing cannot say
    time_limit_minutes: int | None  # None: no limit, or not known


def listed_price(job: Job, listed: ListedRequest, partition: Partition | None) -> int:
    """What the job asks for now, in GPU-seconds, priced as its creation priced it
    (``jobs.pricing``) at the dearer of the price it was quoted and that of the partition
    it is listed in (the accounting charges the same way). What the listing cannot say
    (GPUs asked per job, a partition the portal lacks, no limit) is taken from the job's
    own request."""
    gpus = listed.gpus if listed.gpus is not None else job.nodes * job.gpus_per_node
    minutes = (
        listed.time_limit_minutes
        if listed.time_limit_minutes is not None
        else job.time_limit_minutes
    )
    weight, rate = job.billing_weight, job.cpu_hour_rate
    if partition is not None:
        weight, rate = max(weight, partition.billing_weight), max(rate, partition.cpu_hour_rate)
    # pricing.cpus_per_task, with the GPUs of all the nodes together.
    cpus = gpus * job.cpus_per_gpu if job.cpus_per_gpu and gpus else job.nodes
    return pricing.requested_price(
        nodes=1,
        gpus_per_node=gpus,
        cpus=cpus,
        time_limit_minutes=minutes,
        array_tasks=job.array_tasks,
        billing_weight=weight,
        cpu_hour_rate=rate,
    ).total


def job_hold_follow(*, job_id: int, listed: ListedRequest) -> LedgerEntry | None:
    """Raise the job's hold to what its listed request costs, when that is more than the
    job requested (``Job.requested_gpu_seconds``, which becomes the new price), as far as
    the project's balance covers it (``ledger.ledger_hold_raise``), with an event saying
    what changed in Slurm. Nothing for a job that ended, or whose listed request costs no
    more than it requested: a repeat raises nothing. The raise's ledger entry is returned.

    The job's row is locked first, then the allocation's (the order in which accounting
    finishes a job and releases its holds), so a job being finished is either raised
    before and its raise released with the rest, or found finished."""
    with transaction.atomic():
        job = Job.objects.select_for_update().select_related("partition", "owner").get(pk=job_id)
        if job.is_finished:
            return None
        partition = (
            None
            if listed.partition_id is None
            else Partition.objects.filter(pk=listed.partition_id).first()
        )
        price = listed_price(job, listed, partition)
        more = price - job.requested_gpu_seconds
        if more <= 0:
            return None
        hold = (
            LedgerEntry.objects.filter(kind=LedgerEntry.Kind.HOLD, reference=job.hold_reference)
            .select_related("allocation")
            .first()
        )
        if hold is None:
            # Nothing was held for it (a job written by hand): nothing to raise.
            logger.warning("job %s grew in Slurm but holds nothing", job.pk)
            return None
        raised = ledger.ledger_hold_raise(
            allocation=hold.allocation,
            reference=f"{job.hold_reference}+{job.hold_raises + 1}",
            gpu_seconds=more,
            user=job.owner,
            partition=partition or job.partition,
        )
        Job.objects.filter(pk=job.pk).update(
            hold_raises=F("hold_raises") + 1, requested_gpu_seconds=price, updated_at=timezone.now()
        )
        job_event_add(
            job=job,
            state=job.state,
            detail=_detail(job, listed, partition, price=price, covered=-raised.gpu_seconds),
        )
    logger.info(
        "job %s grew in Slurm: hold raised by %s of %s GPU-seconds",
        job.pk,
        -raised.gpu_seconds,
        more,
    )
    return raised


def _detail(
    job: Job, listed: ListedRequest, partition: Partition | None, *, price: int, covered: int
) -> str:
    """What changed in Slurm since the job was submitted and what the portal holds now."""
    changes = changes_in_slurm(
        job,
        partition=partition.name if partition is not None else None,
        gpus=listed.gpus,
        time_limit_minutes=listed.time_limit_minutes,
    )
    more = price - job.requested_gpu_seconds
    detail = (
        f"changed in Slurm since it was submitted ({', '.join(changes) or 'its price'}): "
        f"requests {_hours(price)} GPU-hours now (was {_hours(job.requested_gpu_seconds)})"
    )
    if covered < more:
        return (
            f"{detail}; the balance covered {_hours(covered)} of the {_hours(more)} GPU-hours "
            "more, so only Slurm's limit on the project's GPU-minutes stops it once the "
            "balance is spent"
        )
    return f"{detail}, held"


def changes_in_slurm(
    job: Job, *, partition: str | None, gpus: int | None, time_limit_minutes: int | None
) -> list[str]:
    """How what Slurm says of the job (None: it does not say) differs from what the job
    asked for, as a manager reads it: "partition debug -> gpu", "GPUs 2 -> 4" (all its
    nodes together, per array task), "time limit 10 -> 30 min"."""
    changes = []
    if partition and partition != job.partition.name:
        changes.append(f"partition {job.partition.name} -> {partition}")
    asked_gpus = job.nodes * job.gpus_per_node
    if gpus is not None and gpus != asked_gpus:
        changes.append(f"GPUs {asked_gpus} -> {gpus}")
    if time_limit_minutes is not None and time_limit_minutes != job.time_limit_minutes:
        changes.append(f"time limit {job.time_limit_minutes} -> {time_limit_minutes} min")
    return changes


def _hours(gpu_seconds: int) -> str:
    return f"{Decimal(gpu_seconds) / 3600:,.2f}"
