"""What Slurm's accounting says, applied to the portal behind the queue sync.

The accounting ingest upserts every record since a watermark (read again with
an overlap) and charges each ended record exactly once; a portal job's hold
is released when it has ended. Jobs submitted outside the portal are charged
to the project whose Slurm account they ran under.
"""

import datetime as dt
import logging
from collections import defaultdict
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounts import ledger
from accounts.models import Allocation, LedgerEntry, Project, User
from clusters.models import Cluster, Partition
from clusters.slurm import SlurmClient, client_for
from clusters.slurm.states import SlurmJobState
from clusters.slurm.types import AccountingEntry
from jobs import pricing, specs, webhook_events
from jobs.job_mail import job_end_mail_queue
from jobs.metrics import start_observed
from jobs.models import AccountingRecord, ClusterSync, Job, JobEvent
from jobs.states import PORTAL_VALUE_OF, TERMINAL_VALUES, JobState
from jobs.tokens import is_submission_of, token_in

logger = logging.getLogger(__name__)


@dataclass
class IngestResult:
    records: int = 0
    charged: int = 0
    finished_jobs: int = 0
    notes: list[str] = field(default_factory=list)


# What a record keeps of its usage, by the same names as AccountingEntry's.
EFFICIENCY_FIELDS = [
    "time_limit_minutes",
    "mem_allocated_bytes",
    "cpu_time_s",
    "mem_peak_bytes",
    "gpu_util_percent",
    "gpu_mem_peak_bytes",
]

_RECORD_FIELDS = [
    "array_job_id",
    "array_task",
    "job",
    "name",
    "user",
    "account",
    "partition",
    "state",
    "exit_code",
    "signal",
    "allocated_gpus",
    "allocated_cpus",
    "elapsed_s",
    "submitted_at",
    "started_at",
    "ended_at",
    "comment",
    *EFFICIENCY_FIELDS,
    "updated_at",
]


def _portal_jobs(cluster: Cluster, entries: list[AccountingEntry]) -> dict[int, Job]:
    """The portal job of each record: by the Slurm id the portal recorded, else by the
    submit token in its comment, for a job whose id was never recorded (its worker died
    after sbatch). A token binds only a record that can be the job's own submission
    (``tokens.is_submission_of``); any other is work outside the portal, charged to the
    account it ran under. When several could be, the lowest Slurm id is the job's, as
    the submission's own look-up decides."""
    ids = {entry.array_job_id or entry.job_id for entry in entries}
    jobs = {
        job.slurm_job_id: job
        for job in Job.objects.filter(cluster=cluster, slurm_job_id__in=ids).select_related(
            "owner", "partition"
        )
    }
    found = {}
    tokens: dict[str, list[AccountingEntry]] = defaultdict(list)
    for entry in entries:
        job = jobs.get(entry.array_job_id or entry.job_id)
        if job is not None:
            found[entry.job_id] = job
        elif (token := token_in(entry.comment)) is not None:
            tokens[token].append(entry)
    if not tokens:
        return found
    unrecorded = Job.objects.filter(
        cluster=cluster, submit_token__in=tokens, slurm_job_id__isnull=True
    ).select_related("owner", "partition", "project")
    for job in unrecorded:
        candidates = tokens[str(job.submit_token)]
        own = [entry for entry in candidates if _is_submission_of(entry, job)]
        if own:
            listed_id = min(entry.array_job_id or entry.job_id for entry in own)
            found.update(
                (entry.job_id, job)
                for entry in own
                if (entry.array_job_id or entry.job_id) == listed_id
            )
        for entry in candidates:
            if entry not in own:
                logger.warning(
                    "Slurm job %s:%s of %s under %s carries the token of job %s (%s's): "
                    "not bound, charged as work outside the portal",
                    cluster.name, entry.job_id, entry.user, entry.account, job.pk,
                    job.owner.posix_username,
                )  # fmt: skip
    return found


def _is_submission_of(entry: AccountingEntry, job: Job) -> bool:
    return is_submission_of(
        entry,
        posix_user=job.owner.posix_username or "",
        account=job.project.slurm_account,
        created_at=job.created_at,
        recorded_at=None,  # only jobs without a recorded Slurm id are bound by token
    )


def _upsert(cluster: Cluster, entries: list[AccountingEntry], jobs: dict[int, Job]) -> None:
    now = timezone.now()
    records = [
        AccountingRecord(
            cluster=cluster,
            slurm_job_id=entry.job_id,
            array_job_id=entry.array_job_id,
            array_task=entry.array_task or "",
            job=jobs.get(entry.job_id),
            name=entry.name[:200],
            user=entry.user,
            account=entry.account,
            partition=entry.partition,
            state=str(entry.state),
            exit_code=entry.exit_code,
            signal=entry.signal,
            allocated_gpus=entry.allocated_gpus,
            allocated_cpus=entry.allocated_cpus,
            elapsed_s=entry.elapsed_s,
            submitted_at=entry.submitted_at,
            started_at=entry.started_at,
            ended_at=entry.ended_at,
            comment=entry.comment[:200],
            **{name: getattr(entry, name) for name in EFFICIENCY_FIELDS},
            updated_at=now,
        )
        for entry in entries
    ]
    AccountingRecord.objects.bulk_create(
        records,
        batch_size=1000,
        update_conflicts=True,
        unique_fields=["cluster", "slurm_job_id"],
        update_fields=_RECORD_FIELDS,
    )


def _has_ended(record: AccountingRecord) -> bool:
    return (
        record.ended_at is not None
        and PORTAL_VALUE_OF[SlurmJobState(record.state)] in TERMINAL_VALUES
    )


def _allocation_for(record: AccountingRecord, projects: dict[str, Project]) -> Allocation | None:
    """A portal job is charged where its hold was; other work to the allocation of its
    account that covers the day it ended."""
    if record.job is not None:
        hold = LedgerEntry.objects.filter(
            kind=LedgerEntry.Kind.HOLD, reference=record.job.hold_reference
        ).first()
        if hold is not None:
            return hold.allocation
    project = projects.get(record.account)
    if project is None or record.ended_at is None:
        return None
    day = timezone.localdate(record.ended_at)
    return (
        Allocation.objects.filter(
            project=project,
            cluster_id=record.cluster_id,
            state__in=[Allocation.State.ACTIVE, Allocation.State.EXPIRED],
            starts_on__lte=day,
            ends_on__gt=day,
        )
        .order_by("state", "-ends_on")  # "active" sorts before "expired"
        .first()
    )


def _charge(
    record: AccountingRecord,
    *,
    cluster: Cluster,
    projects: dict[str, Project],
    partitions: dict[str, Partition],
    users: dict[str, User],
) -> int | None:
    """Charge one ended record; the GPU-seconds charged, or None when nothing could be."""
    job = record.job
    partition = job.partition if job else partitions.get(record.partition)
    weight = job.billing_weight if job else (partition.billing_weight if partition else None)
    # A portal job pays the rate it was priced at; other work the partition's rate now.
    cpu_rate = job.cpu_hour_rate if job else (partition.cpu_hour_rate if partition else None)
    allocation = _allocation_for(record, projects)
    with transaction.atomic():
        if allocation is None or weight is None or cpu_rate is None:
            note = (
                f"not charged: account {record.account!r} is not a portal project"
                if record.account not in projects
                else f"not charged: no allocation of {record.account} covers the job's end"
            )
            AccountingRecord.objects.filter(pk=record.pk).update(
                charged_gpu_seconds=0, charge_note=note
            )
            return None
        gpu_seconds = pricing.charge_gpu_seconds(
            allocated_gpus=record.allocated_gpus,
            allocated_cpus=record.allocated_cpus,
            elapsed_s=record.elapsed_s,
            billing_weight=weight,
            cpu_hour_rate=cpu_rate,
        )
        ledger.ledger_charge(
            allocation=allocation,
            reference=f"{cluster.name}:{record.slurm_job_id}",
            gpu_seconds=gpu_seconds,
            # A plain job's hold goes with its one charge; an array's when all tasks end.
            release_reference=job.hold_reference if job and not job.array else "",
            user=job.owner if job else users.get(record.user),
            partition=partition,
        )
        AccountingRecord.objects.filter(pk=record.pk).update(charged_gpu_seconds=gpu_seconds)
    return gpu_seconds


def _tasks_covered(record: AccountingRecord) -> int:
    # A record "[4-9%2]" stands for the tasks of an array that never started.
    task = record.array_task
    if task.startswith("["):
        return specs.array_task_count(task.strip("[]"))
    return 1


_SEVERITY = [
    JobState.NODE_FAIL,
    JobState.OUT_OF_MEMORY,
    JobState.TIMEOUT,
    JobState.FAILED,
    JobState.PREEMPTED,
    JobState.CANCELLED,
    JobState.COMPLETED,
]


def _finish(job: Job, records: list[AccountingRecord], *, cluster: Cluster) -> bool:
    """Bring a portal job up to date with its accounting; True when it ended now."""
    if not records:
        return False
    states = [PORTAL_VALUE_OF[SlurmJobState(r.state)] for r in records]
    ended = all(_has_ended(r) for r in records)
    if job.array:
        ended = ended and sum(_tasks_covered(r) for r in records) >= job.array_tasks
    started = [r.started_at for r in records if r.started_at]
    if not ended:
        if (
            started
            and job.started_at is None
            and Job.objects.filter(pk=job.pk, started_at__isnull=True).update(
                started_at=min(started)
            )
        ):
            _start_observed(cluster, job, records, started_at=min(started))
        return False
    final = next(s for s in _SEVERITY if s in states)
    used = sum(r.charged_gpu_seconds or 0 for r in records)
    if job.state == final and job.used_gpu_seconds == used:
        # Finished by an earlier ingest; the overlap reads its records again.
        return False
    exit_codes = [r.exit_code for r in records if r.exit_code is not None]
    ends = [r.ended_at for r in records if r.ended_at]
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        already = locked.state in TERMINAL_VALUES and locked.used_gpu_seconds == used
        # Found by its token: the worker that submitted it died (or lost the database)
        # before recording the id, and the job ends before a retry could record it.
        slurm_job_id = locked.slurm_job_id or records[0].array_job_id or records[0].slurm_job_id
        Job.objects.filter(pk=job.pk).update(
            slurm_job_id=slurm_job_id,
            submitted_at=locked.submitted_at or records[0].submitted_at,
            claimed_until=None,
            state=final,
            slurm_state=records[0].state if len(records) == 1 else locked.slurm_state,
            exit_code=max(exit_codes, key=abs) if exit_codes else None,
            started_at=min(started) if started else locked.started_at,
            ended_at=max(ends) if ends else locked.ended_at,
            used_gpu_seconds=used,
            reason="",
        )
        ledger.ledger_release(reference=job.hold_reference)
        if locked.state != final:
            JobEvent.objects.create(
                job=job,
                at=timezone.now(),
                state=final,
                detail=f"exit code {exit_codes[0] if len(exit_codes) == 1 else exit_codes}"
                if exit_codes
                else "",
            )
        if not already:
            webhook_events.job_ended(job.pk)
            job_end_mail_queue(job=job, state=final)
    if started and locked.started_at is None:
        # It started and ended between two reads of the queue, which never saw it run.
        _start_observed(cluster, locked, records, started_at=min(started))
    return not already


def _start_observed(
    cluster: Cluster, job: Job, records: list[AccountingRecord], *, started_at: dt.datetime
) -> None:
    start_observed(
        cluster=cluster.name,
        submitted_at=job.submitted_at or records[0].submitted_at,
        started_at=started_at,
    )


def accounting_ingest(*, cluster: Cluster, entries: list[AccountingEntry]) -> IngestResult:
    """Upsert the records, charge every ended one not yet charged, finish their jobs.
    Ingesting the same records twice charges nothing twice."""
    # One record per Slurm id: a repeat within one listing would make the upsert fail.
    entries = list({entry.job_id: entry for entry in entries}.values())
    result = IngestResult(records=len(entries))
    if not entries:
        return result
    jobs = _portal_jobs(cluster, entries)
    _upsert(cluster, entries, jobs)
    slurm_ids = [entry.job_id for entry in entries]
    to_charge = [
        record
        for record in AccountingRecord.objects.filter(
            cluster=cluster, slurm_job_id__in=slurm_ids, charged_gpu_seconds__isnull=True
        ).select_related("job__owner", "job__partition")
        if _has_ended(record)
    ]
    if to_charge:
        accounts = {record.account for record in to_charge}
        projects = {p.slurm_account: p for p in Project.objects.filter(slurm_account__in=accounts)}
        partitions = {p.name: p for p in Partition.objects.filter(cluster=cluster)}
        users = {
            u.posix_username or "": u
            for u in User.objects.filter(posix_username__in={r.user for r in to_charge})
        }
        for record in to_charge:
            charged = _charge(
                record, cluster=cluster, projects=projects, partitions=partitions, users=users
            )
            if charged is None:
                result.notes.append(f"{record.slurm_job_id}: not charged ({record.account})")
            else:
                result.charged += 1
    touched = {job.pk: job for job in jobs.values()}
    by_job: dict[int, list[AccountingRecord]] = defaultdict(list)
    for record in AccountingRecord.objects.filter(job_id__in=touched).order_by("slurm_job_id"):
        by_job[record.job_id].append(record)  # type: ignore[index]
    for job_id, job in touched.items():
        if _finish(job, by_job[job_id], cluster=cluster):
            result.finished_jobs += 1
    return result


def accounting_sync(*, cluster: Cluster, client: SlurmClient | None = None) -> IngestResult:
    """Read accounting since the watermark (minus the overlap), ingest it, move the mark
    to the newest time in what was read."""
    client = client or client_for(cluster)
    sync, _ = ClusterSync.objects.get_or_create(cluster=cluster)
    read_at = timezone.now()
    # The first read starts when the cluster was registered: the portal charges the
    # work done since it was put in charge, not the cluster's whole history.
    since = (sync.accounting_until or cluster.created_at) - dt.timedelta(
        seconds=settings.ACCOUNTING_OVERLAP_S
    )
    entries = client.accounting_since(since)
    result = accounting_ingest(cluster=cluster, entries=entries)
    # The mark moves to the newest time accounting has reported, not to the clock: after
    # a slurmdbd outage slurmctld sends the records it kept late, and a mark moved to
    # "now" meanwhile would read past the ends of the jobs that finished while it was down.
    seen = [t for e in entries for t in (e.submitted_at, e.started_at, e.ended_at) if t]
    marks = {"accounting_until": min(max(seen), read_at)} if seen else {}
    ClusterSync.objects.filter(pk=sync.pk).update(accounting_synced_at=read_at, **marks)
    return result
