"""What Slurm's accounting says, applied to the portal behind the queue sync.

The accounting ingest upserts every run since a watermark (read again with an overlap)
and charges each run that ended exactly once, at what Slurm ran: a job requeued (by Slurm,
by its owner with ``scontrol requeue``, from inside its own script, even after it
completed) runs again under the same id with a new submit time, and each run is a record
of its own, with a charge of its own. A portal job's hold is released when its last run
has ended. Jobs submitted outside the portal are charged to the project whose Slurm
account they ran under, but only for a user the project has (``account_users_since``).

A run belongs to a portal job when Slurm's id is the one the portal recorded and the run
is its owner's, submitted after the job was saved and, once the job ended, no later than
``REQUEUE_WINDOW`` after (an id reused after the cluster's ids wrapped or its state was
reset is another job). The account a run ran under pays for it: the job's own hold's
allocation when it is the job's project, at the dearer of the price the job was quoted
and the price of the partition Slurm ran it on (an owner may move a pending job with
``scontrol update``); another project's as work outside the portal when the owner moved
the job there.

What accounting lists that contradicts itself (a run twice, one id for two users) or
cannot be read is refused (``clusters.slurm.types.accounting_checked``) and reported
(``clusters.services.refused_records_report``); the rest is ingested and the watermark
moves on.
"""

import datetime as dt
import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounts import ledger
from accounts.models import Allocation, LedgerEntry, Project, User
from accounts.selectors import account_users_since
from clusters.models import Cluster, Partition, RefusedRecord
from clusters.services import refused_records_report
from clusters.slurm import SlurmClient, client_for
from clusters.slurm.states import SlurmJobState
from clusters.slurm.types import AccountingEntry, Refused, accounting_checked, run_key
from jobs import pricing, specs, webhook_events
from jobs.errors import JobInvalid
from jobs.job_mail import job_end_mail_queue
from jobs.metrics import start_observed
from jobs.models import AccountingRecord, ClusterSync, Job, JobEvent
from jobs.states import PORTAL_VALUE_OF, TERMINAL_VALUES, JobState
from jobs.tokens import CLOCK_SLACK, SlurmRecord, is_submission_of, token_in

logger = logging.getLogger(__name__)

# How long after a job ended Slurm may still run it again: ``scontrol requeue`` of an
# ended job works while slurmctld still holds it (MinJobAge, 300 s by default). A run of
# the same id submitted later is another job (ids wrap; a cluster's state may be reset).
REQUEUE_WINDOW = dt.timedelta(hours=1)


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
    "started_at",
    "ended_at",
    "comment",
    *EFFICIENCY_FIELDS,
    "updated_at",
]

# A run in one of these states with an end has ended though its job goes on: Slurm
# requeued it, and the job's next run is another record.
_REQUEUED = frozenset(
    {SlurmJobState.REQUEUED, SlurmJobState.REQUEUE_FED, SlurmJobState.REQUEUE_HOLD}
)


def run_reference(cluster: Cluster, record: AccountingRecord) -> str:
    """The ledger reference of one run's charge: the cluster, Slurm's id and the run's
    submit time (records charged before runs were told apart keep ``<cluster>:<id>``)."""
    submitted = record.submitted_at
    stamp = submitted.astimezone(dt.UTC).strftime("%Y%m%dT%H%M%SZ") if submitted else "-"
    return f"{cluster.name}:{record.slurm_job_id}@{stamp}"


def is_run_of(entry: SlurmRecord, job: Job) -> bool:
    """Whether a run of the Slurm id ``job`` recorded is that job's: its owner's, submitted
    after the job was saved and, if the job ended, within ``REQUEUE_WINDOW`` of its end."""
    submitted = entry.submitted_at
    if entry.user != (job.owner.posix_username or "") or submitted is None:
        return False
    if submitted < job.created_at - CLOCK_SLACK:
        return False
    return job.ended_at is None or submitted <= job.ended_at + REQUEUE_WINDOW


def _portal_jobs(
    cluster: Cluster, entries: list[AccountingEntry]
) -> dict[tuple[int, dt.datetime | None], Job]:
    """The portal job of each run (by ``run_key``): by the Slurm id the portal recorded
    (``is_run_of``), else by the submit token in its comment, for a job whose id was never
    recorded (its worker died after sbatch). A token binds only a run that can be the
    job's own submission (``tokens.is_submission_of``); any other is work outside the
    portal, charged to the account it ran under. When several could be, the lowest Slurm
    id is the job's, as the submission's own look-up decides."""
    ids = {entry.array_job_id or entry.job_id for entry in entries}
    recorded: dict[int, list[Job]] = defaultdict(list)
    for job in (
        Job.objects.filter(cluster=cluster, slurm_job_id__in=ids)
        .select_related("owner", "partition", "project")
        .order_by("-created_at")
    ):
        recorded[job.slurm_job_id].append(job)  # type: ignore[index]
    found: dict[tuple[int, dt.datetime | None], Job] = {}
    tokens: dict[str, list[AccountingEntry]] = defaultdict(list)
    for entry in entries:
        owner = next(
            (
                job
                for job in recorded.get(entry.array_job_id or entry.job_id, ())
                if is_run_of(entry, job)
            ),
            None,
        )
        if owner is not None:
            found[run_key(entry)] = owner
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
                (run_key(entry), job)
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


# A record's texts are cut to their columns: what Slurm reports of a job is as long as its
# owner made it (a pending job's list of partitions), and must not stop the ingest.
_TEXT_LENGTHS: dict[str, int] = {
    field.name: field.max_length
    for field in AccountingRecord._meta.concrete_fields
    if field.name in ("array_task", "name", "user", "account", "partition", "comment")
    and field.max_length is not None
}


@transaction.atomic
def _upsert(
    cluster: Cluster,
    entries: list[AccountingEntry],
    jobs: dict[tuple[int, dt.datetime | None], Job],
) -> None:
    now = timezone.now()
    cut = _TEXT_LENGTHS
    # Once a run has ended it stays so: a listing read before it ended (two ingests at
    # once, the slower read applied last) must not make it run again, nor its job. The
    # rows are locked in the order they are written, so two ingests wait, not deadlock.
    entries = sorted(entries, key=lambda entry: (entry.job_id, _submitted(entry)))
    ended = set(
        AccountingRecord.objects.select_for_update()
        .filter(
            cluster=cluster,
            slurm_job_id__in={entry.job_id for entry in entries},
            ended_at__isnull=False,
        )
        .order_by("slurm_job_id", "submitted_at")
        .values_list("slurm_job_id", "submitted_at")
    )
    entries = [
        entry
        for entry in entries
        if entry.ended_at is not None or (entry.job_id, entry.submitted_at) not in ended
    ]
    records = [
        AccountingRecord(
            cluster=cluster,
            slurm_job_id=entry.job_id,
            array_job_id=entry.array_job_id,
            array_task=(entry.array_task or "")[: cut["array_task"]],
            job=jobs.get(run_key(entry)),
            name=entry.name[: cut["name"]],
            user=entry.user[: cut["user"]],
            account=entry.account[: cut["account"]],
            partition=entry.partition[: cut["partition"]],
            state=str(entry.state),
            exit_code=entry.exit_code,
            signal=entry.signal,
            allocated_gpus=entry.allocated_gpus,
            allocated_cpus=entry.allocated_cpus,
            elapsed_s=entry.elapsed_s,
            submitted_at=entry.submitted_at,
            started_at=entry.started_at,
            ended_at=entry.ended_at,
            comment=entry.comment[: cut["comment"]],
            **{name: getattr(entry, name) for name in EFFICIENCY_FIELDS},
            updated_at=now,
        )
        for entry in entries
    ]
    AccountingRecord.objects.bulk_create(
        records,
        batch_size=1000,
        update_conflicts=True,
        unique_fields=["cluster", "slurm_job_id", "submitted_at"],
        update_fields=_RECORD_FIELDS,
    )


def _run_ended(record: AccountingRecord) -> bool:
    """Whether the run is over: its job ended, or Slurm requeued it (the job goes on in
    another run, this one is done and charged)."""
    if record.ended_at is None:
        return False
    state = SlurmJobState(record.state)
    return state in _REQUEUED or PORTAL_VALUE_OF[state] in TERMINAL_VALUES


def _allocation_for(record: AccountingRecord, projects: dict[str, Project]) -> Allocation | None:
    """A portal job is charged where its hold was (while it runs under its project's
    account); other work to the allocation of its account that covers the day it ended."""
    job = record.job
    if job is not None and record.account == job.project.slurm_account:
        hold = LedgerEntry.objects.filter(
            kind=LedgerEntry.Kind.HOLD, reference=job.hold_reference
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


@dataclass(frozen=True)
class _Price:
    """What one run pays per GPU-hour (and CPU-hour), where, and what a manager should
    know of how it came to be."""

    weight: Decimal
    cpu_rate: Decimal
    partition: Partition | None
    note: str = ""


def _price(record: AccountingRecord, partitions: dict[str, Partition]) -> _Price | None:
    """A run of a portal job (under its project's account) pays the dearer of the price
    it was quoted and that of the partition Slurm ran it on; other work that partition's
    price now. None when there is no price to charge at."""
    job = record.job
    ran_on = partitions.get(record.partition)
    if job is None or record.account != job.project.slurm_account:
        if ran_on is None:
            return None
        return _Price(ran_on.billing_weight, ran_on.cpu_hour_rate, ran_on)
    weight, cpu_rate = job.billing_weight, job.cpu_hour_rate
    if ran_on is not None:
        weight, cpu_rate = max(weight, ran_on.billing_weight), max(cpu_rate, ran_on.cpu_hour_rate)
    return _Price(weight, cpu_rate, ran_on or job.partition, _changes(record, job, weight))


def _changes(record: AccountingRecord, job: Job, weight: Decimal) -> str:
    """How the run Slurm reports differs from what the job asked for (its owner may change
    a pending job with ``scontrol update``), as a manager reads it; "" when it does not."""
    changes = []
    if record.partition and record.partition != job.partition.name:
        changes.append(f"partition {job.partition.name} -> {record.partition}")
    asked_gpus = job.nodes * job.gpus_per_node  # per array task too: a task is one record
    if record.started_at and record.allocated_gpus != asked_gpus:
        changes.append(f"GPUs {asked_gpus} -> {record.allocated_gpus}")
    limit = record.time_limit_minutes
    if limit is not None and limit != job.time_limit_minutes:
        changes.append(f"time limit {job.time_limit_minutes} -> {limit} min")
    if not changes:
        return ""
    return (
        f"changed in Slurm after submission ({', '.join(changes)}); charged what it ran at "
        f"{weight:g} GPU-h per GPU-hour (quoted {job.billing_weight:g})"
    )


def _charge(
    record: AccountingRecord,
    *,
    cluster: Cluster,
    projects: dict[str, Project],
    partitions: dict[str, Partition],
    users: dict[str, User],
    associated: dict[str, set[str]],
) -> tuple[int | None, Refused | None]:
    """Charge one run that ended: the GPU-seconds charged (None when nothing could be),
    and the refusal to report when its user is not one the project has."""
    job = record.job
    own_project = job is not None and record.account == job.project.slurm_account
    refused = None
    note = ""
    allocation = price = None
    if record.account not in projects:
        note = f"not charged: account {record.account!r} is not a portal project"
    elif not own_project and record.user not in associated.get(record.account, set()):
        note = (
            f"not charged: {record.user} is not a member of {record.account} (nor was one "
            "when the job ran)"
        )
        refused = Refused(
            job_id=record.slurm_job_id,
            problem=f"{record.user} ran it under {record.account}, a project they are not in",
            text=f"{record.user} {record.account} {record.partition} {record.state} "
            f"{record.allocated_gpus} GPUs {record.elapsed_s} s",
        )
    elif (allocation := _allocation_for(record, projects)) is None:
        note = f"not charged: no allocation of {record.account} covers the job's end"
    elif (price := _price(record, partitions)) is None:
        note = f"not charged: Slurm ran it on {record.partition!r}, a partition the portal lacks"
    if allocation is None or price is None:
        AccountingRecord.objects.filter(pk=record.pk).update(
            charged_gpu_seconds=0, charge_note=note
        )
        return None, refused
    gpu_seconds = pricing.charge_gpu_seconds(
        allocated_gpus=record.allocated_gpus,
        allocated_cpus=record.allocated_cpus,
        elapsed_s=record.elapsed_s,
        billing_weight=price.weight,
        cpu_hour_rate=price.cpu_rate,
    )
    reference = run_reference(cluster, record)
    with transaction.atomic():
        ledger.ledger_charge(
            allocation=allocation,
            reference=reference,
            gpu_seconds=gpu_seconds,
            # A plain job's holds go with the charge of the run that ends it; an array's
            # once all its tasks have ended (``_finish``).
            release_references=(
                job.hold_references
                if own_project and job is not None and not job.array and _ends_job(record)
                else ()
            ),
            user=job.owner if job else users.get(record.user),
            partition=price.partition,
        )
        AccountingRecord.objects.filter(pk=record.pk).update(
            charged_gpu_seconds=gpu_seconds, charge_reference=reference, charge_note=price.note
        )
        if price.note and job is not None:
            JobEvent.objects.create(job=job, at=timezone.now(), state=job.state, detail=price.note)
    return gpu_seconds, None


def _ends_job(record: AccountingRecord) -> bool:
    return SlurmJobState(record.state) not in _REQUEUED


def _tasks_covered(record: AccountingRecord) -> int:
    # A record "[4-9%2]" stands for the tasks of an array that never started.
    task = record.array_task
    if task.startswith("["):
        try:
            return specs.array_task_count(task.strip("[]"))
        except JobInvalid:
            return 0  # not a spec the portal writes: it covers none of the job's tasks
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


def _latest_runs(records: list[AccountingRecord]) -> list[AccountingRecord]:
    """The last run of each of the job's Slurm records (the job, or each array task): what
    it is now. The runs before were requeued."""
    latest: dict[int, AccountingRecord] = {}
    for record in records:
        known = latest.get(record.slurm_job_id)
        if known is None or _submitted(record) > _submitted(known):
            latest[record.slurm_job_id] = record
    return list(latest.values())


def _submitted(record: AccountingRecord | AccountingEntry) -> dt.datetime:
    return record.submitted_at or dt.datetime.min.replace(tzinfo=dt.UTC)


def _finish(job: Job, records: list[AccountingRecord], *, cluster: Cluster) -> bool:
    """Bring a portal job up to date with its accounting (every run of it); True when it
    ended now."""
    if not records:
        return False
    latest = _latest_runs(records)
    states = [PORTAL_VALUE_OF[SlurmJobState(r.state)] for r in latest]
    ended = all(_run_ended(r) and _ends_job(r) for r in latest)
    if job.array:
        ended = ended and sum(_tasks_covered(r) for r in latest) >= job.array_tasks
    started = [r.started_at for r in records if r.started_at]
    if not ended:
        _follow_unended(job, records, latest, cluster=cluster, started=started)
        return False
    final = next(s for s in _SEVERITY if s in states)
    used = sum(r.charged_gpu_seconds or 0 for r in records)
    if job.state == final and job.used_gpu_seconds == used:
        # Finished by an earlier ingest; the overlap reads its records again.
        return False
    exit_codes = [r.exit_code for r in latest if r.exit_code is not None]
    ends = [r.ended_at for r in latest if r.ended_at]
    first = min(records, key=_submitted)
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        already = locked.state in TERMINAL_VALUES and locked.used_gpu_seconds == used
        # Found by its token: the worker that submitted it died (or lost the database)
        # before recording the id, and the job ends before a retry could record it.
        slurm_job_id = locked.slurm_job_id or first.array_job_id or first.slurm_job_id
        Job.objects.filter(pk=job.pk).update(
            slurm_job_id=slurm_job_id,
            submitted_at=locked.submitted_at or first.submitted_at,
            claimed_until=None,
            state=final,
            slurm_state=latest[0].state if len(latest) == 1 else locked.slurm_state,
            exit_code=max(exit_codes, key=abs) if exit_codes else None,
            started_at=min(started) if started else locked.started_at,
            ended_at=max(ends) if ends else locked.ended_at,
            used_gpu_seconds=used,
            reason="",
        )
        for reference in locked.hold_references:
            ledger.ledger_release(reference=reference)
        runs = len(records) - len(latest)
        if locked.state != final or (runs and not already):
            detail = (
                f"exit code {exit_codes[0] if len(exit_codes) == 1 else _codes(exit_codes)}"
                if exit_codes
                else ""
            )
            if runs:
                again = f"requeued {runs} time{'s' if runs > 1 else ''}, every run charged"
                detail = f"{detail}; {again}" if detail else again
            JobEvent.objects.create(job=job, at=timezone.now(), state=final, detail=detail)
        if not already:
            webhook_events.job_ended(job.pk)
            job_end_mail_queue(job=job, state=final)
    if started and locked.started_at is None:
        # It started and ended between two reads of the queue, which never saw it run.
        _start_observed(cluster, locked, records, started_at=min(started))
    return not already


def _codes(exit_codes: list[int]) -> str:
    return ", ".join(str(code) for code in exit_codes)


def _follow_unended(
    job: Job,
    records: list[AccountingRecord],
    latest: list[AccountingRecord],
    *,
    cluster: Cluster,
    started: list[dt.datetime],
) -> None:
    """A job whose last run has not ended: its start is recorded once; a job the portal
    had finished that Slurm runs again (requeued after it ended, while slurmctld still
    held it) is the queue's to follow again, with its charges so far."""
    if job.state in TERMINAL_VALUES:
        again = max(latest, key=_submitted)
        state = PORTAL_VALUE_OF[SlurmJobState(again.state)]
        if state in TERMINAL_VALUES:
            return
        # A run submitted after the job ended is Slurm's running it again; one submitted
        # before is the run that ended, which slurmdbd has not heard of yet (the queue
        # saw it complete first).
        if job.ended_at is None or _submitted(again) <= job.ended_at:
            return
        used = sum(r.charged_gpu_seconds or 0 for r in records)
        reopened = Job.objects.filter(pk=job.pk, state=job.state).update(
            state=state, slurm_state=again.state, exit_code=None, ended_at=None,
            used_gpu_seconds=used, reason="",
        )  # fmt: skip
        if reopened:
            JobEvent.objects.create(
                job=job,
                at=timezone.now(),
                state=state,
                detail=f"Slurm runs it again: requeued after it ended (run of "
                f"{again.submitted_at:%Y-%m-%d %H:%M:%S}); every run is charged",
            )
        return
    if (
        started
        and job.started_at is None
        and Job.objects.filter(pk=job.pk, started_at__isnull=True).update(started_at=min(started))
    ):
        _start_observed(cluster, job, records, started_at=min(started))


def _start_observed(
    cluster: Cluster, job: Job, records: list[AccountingRecord], *, started_at: dt.datetime
) -> None:
    start_observed(
        cluster=cluster.name,
        submitted_at=job.submitted_at or min(records, key=_submitted).submitted_at,
        started_at=started_at,
    )


def accounting_ingest(*, cluster: Cluster, entries: Iterable[AccountingEntry]) -> IngestResult:
    """Upsert the runs, charge every one that ended and is not charged yet, finish their
    jobs. Ingesting the same records twice charges nothing twice. A run listed twice, an
    id with two users and records that could not be read (``entries.refused`` of a
    ``Listing``) are refused and reported, never ingested."""
    listing = accounting_checked(entries)
    refused = [*getattr(entries, "refused", []), *listing.refused]
    runs = list(listing)
    result = IngestResult(records=len(runs))
    if runs:
        refused += _ingest(cluster, runs, result)
    refused_records_report(
        cluster=cluster, listing=RefusedRecord.Listing.ACCOUNTING, refused=refused
    )
    return result


def _with_known_users(cluster: Cluster, runs: list[AccountingEntry]) -> list[AccountingEntry]:
    """A run listed without its user (``types.accounting_checked``) whose job's earlier
    runs were ingested before: it is their user's (a job's runs are all its owner's)."""
    unnamed = {entry.job_id for entry in runs if not entry.user}
    if not unnamed:
        return runs
    known = dict(
        AccountingRecord.objects.filter(cluster=cluster, slurm_job_id__in=unnamed)
        .exclude(user="")
        .values_list("slurm_job_id", "user")
    )
    return [
        entry._replace(user=known[entry.job_id])
        if not entry.user and entry.job_id in known
        else entry
        for entry in runs
    ]


def _ingest(cluster: Cluster, runs: list[AccountingEntry], result: IngestResult) -> list[Refused]:
    runs = _with_known_users(cluster, runs)
    jobs = _portal_jobs(cluster, runs)
    _upsert(cluster, runs, jobs)
    refused: list[Refused] = []
    slurm_ids = [entry.job_id for entry in runs]
    to_charge = [
        record
        for record in AccountingRecord.objects.filter(
            cluster=cluster, slurm_job_id__in=slurm_ids, charged_gpu_seconds__isnull=True
        ).select_related("job__owner", "job__partition", "job__project")
        if _run_ended(record)
    ]
    if to_charge:
        accounts = {record.account for record in to_charge}
        projects = {p.slurm_account: p for p in Project.objects.filter(slurm_account__in=accounts)}
        partitions = {p.name: p for p in Partition.objects.filter(cluster=cluster)}
        users = {
            u.posix_username or "": u
            for u in User.objects.filter(posix_username__in={r.user for r in to_charge})
        }
        earliest = min(_submitted(record) for record in to_charge)
        associated = account_users_since(projects.values(), cluster=cluster, since=earliest)
        # Each run's charge after the runs before it, so that the run that ends a job is
        # the one that releases its hold; the jobs from the newest id down, as listed.
        for record in sorted(to_charge, key=lambda r: (-r.slurm_job_id, _submitted(r))):
            charged, refusal = _charge(
                record,
                cluster=cluster,
                projects=projects,
                partitions=partitions,
                users=users,
                associated=associated,
            )
            if refusal is not None:
                refused.append(refusal)
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
    return refused


def accounting_sync(*, cluster: Cluster, client: SlurmClient | None = None) -> IngestResult:
    """Read accounting since the watermark (minus the overlap), ingest it, move the mark
    to the newest time in what was read (the records it took: one refused is reported, and
    a record that never reads must not hold the mark back: it is reported instead)."""
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
