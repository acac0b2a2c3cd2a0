"""What must hold between the ledger, the portal's jobs and Slurm once the system settles.

``invariants_check`` reads and reports; it changes nothing. The fault tests end
with it, and ``manage.py check_invariants`` runs it against a live portal:

- the ledger: every allocation's cached totals equal the sums of its entries;
  every charged accounting record has its one charge; a job that was charged
  (or never reached Slurm and ended) has no hold left open;
- portal → Slurm: every job the portal believes is in Slurm (pending, running,
  suspended) is in Slurm's queue or accounting. Jobs in ``new``/``submitting``
  may legitimately not be there yet; only one waiting longer than
  ``stuck_after`` is reported;
- Slurm → portal: every Slurm job of a portal project that carries a portal
  token and can be that job's submission (``jobs.tokens.is_submission_of``) or is
  the job's recorded Slurm id run again (``jobs.accounting.is_run_of``: a requeue)
  belongs to the one portal job with that token, and no token is on two such
  Slurm jobs (a job's runs are one job).

Some findings are warnings, not violations: what any researcher can bring about
from a login node must not make the check fail at will. A token copied onto
someone else's job or onto a job on another cluster than its own (``forged-token``),
or a token of no portal job (``unknown-token``), is listed with who ran it; the
ingest charged that work to the account it ran under, as any work outside the portal.
After the database is restored from a dump, the portal's own jobs saved after the dump
are listed so (``tests/faults/test_restore.py``): their rows are gone, their work is
charged on their owners' names.

Records Slurm listed that the portal refused are warnings too (``refused-record``): one
it cannot read, a job id twice in one queue listing, a run (job id and submit time)
twice in accounting, a job id accounting gives two users (``clusters.slurm.types``).
Each is named by its cluster, listing, Slurm job id and problem, whether this check's
own reads met it or a sync kept it within the last day (``RefusedRecord``), once. A
record holds what users wrote, and no researcher may make the check fail by having one
refused; a job whose record was refused is in Slurm all the same, not
``missing-in-slurm``.

Stuck GPUs are warnings too (``stuck-gpus``): GPUs Slurm counts as allocated on a node
that no job in its queue holds there (``clusters.status.stuck_gpus``), read twice a
second apart so that a job starting between the node and the queue listing is not
taken for one, with the jobs that have pended longer than
``PORTAL_STUCK_GPU_PENDING_MINUTES`` meanwhile (``stuck-gpus-waiting``).

Slurm is read once per cluster (one queue listing, one node listing, one accounting read), after
the portal's rows, so a job submitted in between is seen in Slurm rather than
missed; a job that finished since is found in accounting.

The outcome of a check of every cluster is kept in the cache (``invariants_record``),
for the metrics and their alert (README "Metrics").
"""

import datetime as dt
import time
from collections import defaultdict
from dataclasses import dataclass, field

from django.conf import settings
from django.core.cache import cache
from django.db.models import F, Q, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from accounts.models import Allocation, LedgerEntry, Project
from accounts.selectors import ledger_drift
from clusters.models import Cluster, RefusedRecord
from clusters.selectors import clusters_enabled, refused_records_recent
from clusters.slurm import SlurmError, client_for
from clusters.slurm.states import SlurmJobState
from clusters.slurm.types import AccountingEntry, QueueEntry, Refused, visible
from clusters.status import stuck_gpus
from jobs.accounting import is_run_of
from jobs.models import AccountingRecord, Job
from jobs.states import IN_SLURM, JobState
from jobs.tokens import is_submission_of, token_in

# How far back the check reads accounting for jobs that already left the queue. The
# submission's token look-up reads far less: the owner's jobs under the project's
# account since the job was saved (jobs/submission.py, ``find_by_comment``).
ACCOUNTING_WINDOW = dt.timedelta(days=14)
STUCK_AFTER = dt.timedelta(minutes=15)
WAITING = (JobState.NEW, JobState.SUBMITTING)


@dataclass(frozen=True)
class Violation:
    name: str
    detail: str

    def __str__(self) -> str:
        return f"{self.name}: {self.detail}"


@dataclass
class Findings:
    violations: list[Violation] = field(default_factory=list)  # the portal is unsound
    warnings: list[Violation] = field(default_factory=list)  # someone else's doing


def invariants_check(
    *, cluster: Cluster | None = None, stuck_after: dt.timedelta = STUCK_AFTER
) -> Findings:
    """What was found on the cluster (every enabled cluster if none); sound when
    ``violations`` is empty."""
    clusters = [cluster] if cluster is not None else list(clusters_enabled())
    findings = Findings(violations=_ledger_violations(clusters))
    for one in clusters:
        _check_slurm(one, findings, stuck_after=stuck_after)
    return findings


LAST_CHECK_KEY = "portal:invariants-last-check"


def invariants_record(findings: Findings) -> None:
    """Keep how a check of every cluster ended, until the next one: when, and how many
    violations and warnings it found. Raises the cache's error (RedisError)."""
    outcome = {
        "at": timezone.now().timestamp(),
        "violations": len(findings.violations),
        "warnings": len(findings.warnings),
    }
    cache.set(LAST_CHECK_KEY, outcome, timeout=None)


def invariants_last() -> dict | None:
    """The outcome ``invariants_record`` kept; None before the first check."""
    last = cache.get(LAST_CHECK_KEY)
    return last if isinstance(last, dict) else None


# --- the ledger ----------------------------------------------------------------------


def _ledger_violations(clusters: list[Cluster]) -> list[Violation]:
    allocation_ids = set(
        Allocation.objects.filter(cluster__in=clusters).values_list("id", flat=True)
    )
    violations = [
        Violation(
            "ledger-drift",
            f"allocation {allocation_id}: {field} is {cached} on the row, {summed} in the ledger",
        )
        for allocation_id, field, cached, summed in ledger_drift()
        if allocation_id in allocation_ids
    ]
    violations += _charge_violations(clusters)
    violations += _open_hold_violations(clusters)
    return violations


def _charge_violations(clusters: list[Cluster]) -> list[Violation]:
    """An accounting record charged more than nothing has exactly that charge in the ledger."""
    violations = []
    for cluster in clusters:
        charged = AccountingRecord.objects.filter(cluster=cluster, charged_gpu_seconds__gt=0)
        in_ledger = dict(
            LedgerEntry.objects.filter(
                kind=LedgerEntry.Kind.CHARGE, reference__startswith=f"{cluster.name}:"
            ).values_list("reference", "gpu_seconds")
        )
        for slurm_job_id, reference, gpu_seconds in charged.values_list(
            "slurm_job_id", "charge_reference", "charged_gpu_seconds"
        ):
            entry = in_ledger.get(reference)
            if entry is None or -entry != gpu_seconds:
                violations.append(
                    Violation(
                        "charge-mismatch",
                        f"Slurm job {cluster.name}:{slurm_job_id} ({reference or 'no reference'}) "
                        f"was charged {gpu_seconds} GPU-s, the ledger has "
                        f"{'no charge' if entry is None else -entry}",
                    )
                )
        used = (
            Job.objects.filter(cluster=cluster, used_gpu_seconds__isnull=False)
            .annotate(charged=Coalesce(Sum("accounting__charged_gpu_seconds"), 0))
            .exclude(charged=F("used_gpu_seconds"))
            .values_list("id", "used_gpu_seconds", "charged")
        )
        violations += [
            Violation(
                "charge-mismatch",
                f"job {job_id} used {used_s} GPU-s, its accounting records were charged {sum_s}",
            )
            for job_id, used_s, sum_s in used
        ]
    return violations


def _open_hold_violations(clusters: list[Cluster]) -> list[Violation]:
    """A job that was charged, or ended before it reached Slurm, gave its hold back."""
    finished = Job.objects.filter(cluster__in=clusters).filter(
        Q(used_gpu_seconds__isnull=False)
        | Q(slurm_job_id__isnull=True, state__in=[JobState.SUBMIT_FAILED, JobState.CANCELLED])
    )
    references = {
        reference: job
        for job in finished.only("id", "submit_token", "state", "hold_raises")
        for reference in job.hold_references
    }
    held = set(
        LedgerEntry.objects.filter(
            kind=LedgerEntry.Kind.HOLD, reference__in=references
        ).values_list("reference", flat=True)
    )
    released = set(
        LedgerEntry.objects.filter(kind=LedgerEntry.Kind.RELEASE, reference__in=held).values_list(
            "reference", flat=True
        )
    )
    return [
        Violation(
            "hold-open",
            f"job {references[reference].pk} ({references[reference].state}) still holds GPU-hours",
        )
        for reference in sorted(held - released)
    ]


# --- the portal and Slurm --------------------------------------------------------------


def _check_slurm(cluster: Cluster, findings: Findings, *, stuck_after: dt.timedelta) -> None:
    now = timezone.now()
    # The portal first, Slurm after: see the module's docstring.
    jobs = list(
        Job.objects.filter(cluster=cluster)
        .filter(Q(state__in=[*IN_SLURM, *WAITING]) | Q(slurm_job_id__isnull=False))
        .values_list("id", "submit_token", "slurm_job_id", "state", "created_at")
    )
    accounts = set(Project.objects.values_list("slurm_account", flat=True))
    since = max(cluster.created_at, now - ACCOUNTING_WINDOW)
    client = client_for(cluster)
    try:
        queued = client.queue()
        stuck = stuck_gpus(client.nodes(), queued)
        if stuck:
            time.sleep(1)  # what a job starting between the two listings looked like passes
            again = stuck_gpus(client.nodes(), client.queue())
            stuck = {name: again[name] for name in stuck if name in again}
        accounted = client.accounting_since(since)
    except SlurmError as error:
        findings.violations.append(Violation("slurm-unreachable", f"{cluster.name}: {error}"))
        _refused_warnings(cluster, {}, findings, now=now)
        return
    _stuck_gpu_warnings(cluster, stuck, queued, findings, now=now)
    refused = {
        RefusedRecord.Listing.QUEUE: queued.refused,
        RefusedRecord.Listing.ACCOUNTING: accounted.refused,
    }
    _refused_warnings(cluster, refused, findings, now=now)

    # Slurm has a job whose record it listed and the portal refused: the refusal is
    # reported, the job is not missing.
    known = {
        record.job_id
        for records in refused.values()
        for record in records
        if record.job_id is not None
    }
    tokens: dict[str, list[QueueEntry | AccountingEntry]] = defaultdict(list)
    entries: list[QueueEntry | AccountingEntry] = [*queued, *accounted]
    for entry in entries:
        known.add(entry.array_job_id or entry.job_id)
        # Only tokens on the accounts of this portal's projects are ours to check.
        if entry.account in accounts and (token := token_in(entry.comment)) is not None:
            tokens[token].append(entry)

    for job_id, _, slurm_id, state, created_at in jobs:
        if state in IN_SLURM and (slurm_id is None or slurm_id not in known):
            findings.violations.append(
                Violation(
                    "missing-in-slurm",
                    f"job {job_id} is {state} as Slurm job {slurm_id}, which Slurm does not have",
                )
            )
        elif state in WAITING and now - created_at > stuck_after:
            findings.violations.append(
                Violation("submission-stuck", f"job {job_id} is {state} since {created_at:%c}")
            )
    _check_tokens(cluster, tokens, findings)


def _refused_warnings(
    cluster: Cluster,
    read: dict[RefusedRecord.Listing, list[Refused]],
    findings: Findings,
    *,
    now: dt.datetime,
) -> None:
    """A warning for each record of the cluster's listings that the portal refused: those
    the syncs kept (seen within a day), then those this check's own reads met that were
    not kept, each record once (by its fingerprint)."""
    warned: set[tuple[str, str]] = set()
    kept = refused_records_recent(clusters=[cluster], now=now).values_list(
        "listing", "slurm_job_id", "problem", "fingerprint", "times_seen", "first_seen_at"
    )
    for listing, job_id, problem, fingerprint, times_seen, first_seen_at in kept:
        if (listing, fingerprint) not in warned:
            warned.add((listing, fingerprint))
            times = "once" if times_seen == 1 else f"{times_seen} times"
            seen = f"; seen {times} since {first_seen_at:%Y-%m-%d %H:%M:%S %Z}"
            findings.warnings.append(_refused_warning(cluster, listing, job_id, problem, seen))
    for listing, records in read.items():
        for record in records:
            if (listing, record.fingerprint) not in warned:
                warned.add((listing, record.fingerprint))
                findings.warnings.append(
                    _refused_warning(cluster, listing, record.job_id, record.problem, "")
                )


def _refused_warning(
    cluster: Cluster, listing: str, job_id: int | None, problem: str, seen: str
) -> Violation:
    record = f"Slurm job {job_id}" if job_id is not None else "a record without a job id"
    return Violation(
        "refused-record",
        f"{cluster.name}: {record} in the {listing} listing is refused: {visible(problem)}"
        f"{seen}; not applied or charged",
    )


def _stuck_gpu_warnings(
    cluster: Cluster,
    stuck: dict[str, tuple[int, int]],
    queued: list[QueueEntry],
    findings: Findings,
    *,
    now: dt.datetime,
) -> None:
    for name, (allocated, held) in sorted(stuck.items()):
        findings.warnings.append(
            Violation(
                "stuck-gpus",
                f"{cluster.name}: node {name} has {allocated} GPUs allocated, its running jobs "
                f"hold {held}; {allocated - held} are allocated to no job (`scontrol "
                "reconfigure` has freed such GPUs after a slurmctld restart)",
            )
        )
    if not stuck:
        return
    bound = dt.timedelta(minutes=settings.STUCK_GPU_PENDING_MINUTES)
    waiting = sorted(
        entry.job_id
        for entry in queued
        if entry.state == SlurmJobState.PENDING
        and entry.submitted_at is not None
        and now - entry.submitted_at > bound
    )
    if waiting:
        listed = ", ".join(map(str, waiting[:20])) + (" …" if len(waiting) > 20 else "")
        findings.warnings.append(
            Violation(
                "stuck-gpus-waiting",
                f"{cluster.name}: {len(waiting)} jobs pending longer than "
                f"{settings.STUCK_GPU_PENDING_MINUTES} minutes while GPUs are stuck: {listed}",
            )
        )


def _check_tokens(
    cluster: Cluster,
    tokens: dict[str, list[QueueEntry | AccountingEntry]],
    findings: Findings,
) -> None:
    """Each token Slurm shows against the portal job that has it, on whichever cluster:
    a token copied onto a job on another cluster than its own is a forged one too."""
    portal = {
        str(job.submit_token): job
        for job in Job.objects.filter(submit_token__in=tokens)
        .select_related("owner", "project", "cluster")
        .only(
            "id", "submit_token", "slurm_job_id", "state", "created_at", "submitted_at",
            "ended_at", "owner__posix_username", "project__slurm_account", "cluster__name",
        )
    }  # fmt: skip
    for token, entries in sorted(tokens.items()):
        job = portal.get(token)
        if job is None:
            listed = _listed(entries)
            findings.warnings.append(
                Violation(
                    "unknown-token",
                    f"Slurm job {listed} of {_who(entries)} carries token {token} of no job "
                    "(made up, or of a job saved after the point the database was restored "
                    "to); charged as work outside the portal",
                )
            )
            continue
        posix_user = job.owner.posix_username or ""
        account = job.project.slurm_account
        on_its_cluster = job.cluster_id == cluster.pk
        # A run of the Slurm id the portal recorded is the job's own whenever Slurm ran
        # it again (a requeue submits the same job anew, past the submission's minutes);
        # a job with another id is its submission only within them.
        own = [
            entry
            for entry in entries
            if on_its_cluster
            and (
                ((entry.array_job_id or entry.job_id) == job.slurm_job_id and is_run_of(entry, job))
                or is_submission_of(
                    entry,
                    posix_user=posix_user,
                    account=account,
                    created_at=job.created_at,
                    recorded_at=job.submitted_at if job.slurm_job_id else None,
                )
            )
        ]
        forged = [entry for entry in entries if entry not in own]
        if forged:
            elsewhere = "" if on_its_cluster else f" on {job.cluster.name}"
            findings.warnings.append(
                Violation(
                    "forged-token",
                    f"Slurm job {_listed(forged)} of {_who(forged)} carries the token of job "
                    f"{job.pk} of {posix_user} under {account}{elsewhere}; charged as work "
                    "outside the portal",
                )
            )
        if not own:
            continue
        slurm_ids = {entry.array_job_id or entry.job_id for entry in own}
        listed = _listed(own)
        if len(slurm_ids) > 1:
            findings.violations.append(
                Violation("duplicate-in-slurm", f"token {token} is on Slurm jobs {listed}")
            )
        if job.slurm_job_id is None and job.state in WAITING:
            continue  # submitted, the id not recorded yet
        if job.slurm_job_id not in slurm_ids:
            findings.violations.append(
                Violation(
                    "orphan-in-slurm",
                    f"Slurm job {listed} carries the token of job {job.pk}, which is "
                    f"{job.state} as Slurm job {job.slurm_job_id}",
                )
            )


def _listed(entries: list[QueueEntry | AccountingEntry]) -> str:
    return ", ".join(str(i) for i in sorted({e.array_job_id or e.job_id for e in entries}))


def _who(entries: list[QueueEntry | AccountingEntry]) -> str:
    return ", ".join(sorted({f"{e.user} under {e.account}" for e in entries}))
