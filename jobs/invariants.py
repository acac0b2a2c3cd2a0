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
  token belongs to the one portal job with that token, and no token is on two
  Slurm jobs.

Slurm is read once per cluster (one queue listing, one accounting read), after
the portal's rows, so a job submitted in between is seen in Slurm rather than
missed; a job that finished since is found in accounting.
"""

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass

from django.db.models import F, Q, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from accounts.models import Allocation, LedgerEntry, Project
from accounts.selectors import ledger_drift
from clusters.models import Cluster
from clusters.selectors import clusters_enabled
from clusters.slurm import SlurmError, client_for
from clusters.slurm.types import AccountingEntry, QueueEntry
from jobs.models import AccountingRecord, Job
from jobs.states import JobState
from jobs.sync import IN_SLURM, token_in

# How far back accounting is read for jobs that already left the queue; the
# submission's own token look-up reads as far (clusters/slurm/cli.py).
ACCOUNTING_WINDOW = dt.timedelta(days=14)
STUCK_AFTER = dt.timedelta(minutes=15)
WAITING = (JobState.NEW, JobState.SUBMITTING)


@dataclass(frozen=True)
class Violation:
    name: str
    detail: str

    def __str__(self) -> str:
        return f"{self.name}: {self.detail}"


def invariants_check(
    *, cluster: Cluster | None = None, stuck_after: dt.timedelta = STUCK_AFTER
) -> list[Violation]:
    """Every violation found on the cluster (every enabled cluster if none); [] when sound."""
    clusters = [cluster] if cluster is not None else list(clusters_enabled())
    violations = _ledger_violations(clusters)
    for one in clusters:
        violations += _slurm_violations(one, stuck_after=stuck_after)
    return violations


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
        for slurm_job_id, gpu_seconds in charged.values_list("slurm_job_id", "charged_gpu_seconds"):
            entry = in_ledger.get(f"{cluster.name}:{slurm_job_id}")
            if entry is None or -entry != gpu_seconds:
                violations.append(
                    Violation(
                        "charge-mismatch",
                        f"Slurm job {cluster.name}:{slurm_job_id} was charged {gpu_seconds} "
                        f"GPU-s, the ledger has {'no charge' if entry is None else -entry}",
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
    references = {job.hold_reference: job for job in finished.only("id", "submit_token", "state")}
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


def _slurm_violations(cluster: Cluster, *, stuck_after: dt.timedelta) -> list[Violation]:
    now = timezone.now()
    # The portal first, Slurm after: see the module's docstring.
    jobs = list(
        Job.objects.filter(cluster=cluster)
        .filter(Q(state__in=[*IN_SLURM, *WAITING]) | Q(slurm_job_id__isnull=False))
        .values_list("id", "submit_token", "slurm_job_id", "state", "created_at")
    )
    by_token = {str(token): (job_id, slurm_id, state) for job_id, token, slurm_id, state, _ in jobs}
    # Only tokens of jobs submitted or refused by this portal are ours to check; the
    # rest of the portal's jobs are read by token when Slurm shows one.
    accounts = set(Project.objects.values_list("slurm_account", flat=True))
    since = max(cluster.created_at, now - ACCOUNTING_WINDOW)
    client = client_for(cluster)
    try:
        queued = client.queue()
        accounted = client.accounting_since(since)
    except SlurmError as error:
        return [Violation("slurm-unreachable", f"{cluster.name}: {error}")]

    known: set[int] = set()
    tokens: dict[str, set[int]] = defaultdict(set)
    entries: list[QueueEntry | AccountingEntry] = [*queued, *accounted]
    for entry in entries:
        listed_id = entry.array_job_id or entry.job_id
        known.add(listed_id)
        if entry.account in accounts and (token := token_in(entry.comment)) is not None:
            tokens[token].add(listed_id)

    violations = []
    for job_id, _, slurm_id, state, created_at in jobs:
        if state in IN_SLURM and (slurm_id is None or slurm_id not in known):
            violations.append(
                Violation(
                    "missing-in-slurm",
                    f"job {job_id} is {state} as Slurm job {slurm_id}, which Slurm does not have",
                )
            )
        elif state in WAITING and now - created_at > stuck_after:
            violations.append(
                Violation("submission-stuck", f"job {job_id} is {state} since {created_at:%c}")
            )

    unknown = set(tokens) - set(by_token)
    if unknown:
        # Finished portal jobs that never got an id (refused, cancelled early) are not in
        # ``jobs``; look their tokens up rather than read every finished job.
        for job_id, submit_token, slurm_id, state in Job.objects.filter(
            cluster=cluster, submit_token__in=unknown
        ).values_list("id", "submit_token", "slurm_job_id", "state"):
            by_token[str(submit_token)] = (job_id, slurm_id, state)
    for token, slurm_ids in sorted(tokens.items()):
        listed = ", ".join(str(i) for i in sorted(slurm_ids))
        if len(slurm_ids) > 1:
            violations.append(
                Violation("duplicate-in-slurm", f"token {token} is on Slurm jobs {listed}")
            )
        portal = by_token.get(token)
        if portal is None:
            violations.append(
                Violation("orphan-in-slurm", f"Slurm job {listed} carries token {token} of no job")
            )
            continue
        job_id, recorded_id, state = portal
        if recorded_id is None and state in WAITING:
            continue  # submitted, the id not recorded yet
        if recorded_id not in slurm_ids:
            violations.append(
                Violation(
                    "orphan-in-slurm",
                    f"Slurm job {listed} carries the token of job {job_id}, which is {state} "
                    f"as Slurm job {recorded_id}",
                )
            )
    return violations
