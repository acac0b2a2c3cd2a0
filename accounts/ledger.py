"""Every write to the GPU-hour ledger: the bank's services.

Each one is a single transaction that appends one entry and moves the
allocation's cached totals by the same amount, under the allocation row's lock
(``select_for_update``; a hold, the hot path of every job's creation, takes it
with one conditional update instead), so two concurrent holds can never
overspend and the totals always equal the sums of the entries. Entries that concern something
(a job's hold, a charge for an accounting record) carry a reference that is
unique per kind: a repeat finds the first entry and does nothing.
"""

import datetime as dt

from django.db import IntegrityError, transaction
from django.db.models import Exists, F, OuterRef
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.translation import gettext as _

from accounts.caps import cap_refusal, member_remaining_gpu_seconds
from accounts.errors import AllocationOverlap, QuotaExceeded, Refused
from accounts.models import (
    AVAILABLE_GPU_SECONDS,
    LEDGER_TOTALS,
    Allocation,
    LedgerEntry,
    MemberCap,
    Project,
    User,
)
from audit.models import AuditEvent
from audit.services import audit_record
from clusters.models import Cluster, Partition


def _append(
    *,
    allocation: Allocation,
    kind: str,
    gpu_seconds: int,
    reference: str = "",
    actor: User | None = None,
    reason: str = "",
    user: User | None = None,
    partition: Partition | None = None,
) -> LedgerEntry:
    """Append an entry and move the cached total; call inside a transaction holding the lock."""
    entry = LedgerEntry.objects.create(
        allocation=allocation,
        kind=kind,
        gpu_seconds=gpu_seconds,
        reference=reference,
        actor=actor,
        reason=reason,
        user=user,
        partition=partition,
    )
    field, sign = LEDGER_TOTALS[LedgerEntry.Kind(kind)]
    Allocation.objects.filter(pk=allocation.pk).update(**{field: F(field) + sign * gpu_seconds})
    # The row is locked (or was just created) by this transaction: nobody else moved it.
    setattr(allocation, field, getattr(allocation, field) + sign * gpu_seconds)
    return entry


def _existing(kind: str, reference: str) -> LedgerEntry | None:
    # At most one (ledger_entry_once_per_reference): get, not an ordered first().
    try:
        return LedgerEntry.objects.get(kind=kind, reference=reference)
    except LedgerEntry.DoesNotExist:
        return None


def _locked(allocation_id: int) -> Allocation:
    return Allocation.objects.select_for_update().get(pk=allocation_id)


def allocation_overlap(
    *, project: Project, cluster: Cluster, starts_on: dt.date, ends_on: dt.date
) -> str:
    """Why a grant for these days would overlap one the project has ("" if it would not).

    allocation_grant asks under the project's lock; a form may ask first, to show it
    on the form instead of failing the save."""
    overlapping = Allocation.objects.filter(
        project=project,
        cluster=cluster,
        state__in=[Allocation.State.ACTIVE, Allocation.State.PENDING],
        starts_on__lt=ends_on,
        ends_on__gt=starts_on,
    ).first()
    if overlapping is None:
        return ""
    return _(
        "%(project)s already has an allocation on %(cluster)s from %(start)s to "
        "%(end)s; adjust it instead of granting a second one for the same days."
    ) % {
        "project": project,
        "cluster": cluster,
        "start": date_format(overlapping.starts_on),
        "end": date_format(overlapping.ends_on),
    }


def allocation_grant(
    *,
    project: Project,
    cluster: Cluster,
    gpu_hours: int,
    starts_on: dt.date,
    ends_on: dt.date,
    actor: User | None,
    reason: str,
    reference: str = "",
) -> Allocation:
    """Create an active allocation and grant it its GPU-hours, in one transaction."""
    if gpu_hours <= 0:
        raise Refused(_("An allocation grants a positive number of GPU-hours."))
    allocation = Allocation(
        project=project,
        cluster=cluster,
        starts_on=starts_on,
        ends_on=ends_on,
        state=Allocation.State.ACTIVE,
    )
    allocation.full_clean()
    with transaction.atomic():
        # The project row is the lock that serialises grants, so two overlapping
        # allocations cannot both pass the check.
        Project.objects.select_for_update().get(pk=project.pk)
        if overlap := allocation_overlap(
            project=project, cluster=cluster, starts_on=starts_on, ends_on=ends_on
        ):
            raise AllocationOverlap(overlap)
        allocation.save()
        _append(
            allocation=allocation,
            kind=LedgerEntry.Kind.GRANT,
            gpu_seconds=gpu_hours * 3600,
            reference=reference,
            actor=actor,
            reason=reason,
        )
        audit_record(
            actor=actor,
            action=AuditEvent.Action.ALLOCATION_GRANT,
            target=allocation,
            scope=project.slurm_account,
            detail={
                "gpu_hours": gpu_hours,
                "cluster": cluster.name,
                "starts_on": starts_on,
                "ends_on": ends_on,
                "reason": reason,
                **({"reference": reference} if reference else {}),
            },
        )
    return allocation


def allocation_adjust(
    *, allocation: Allocation, gpu_seconds: int, actor: User, reason: str
) -> LedgerEntry:
    """Add (or, negative, take away) GPU-seconds; a reason is required."""
    if not reason.strip():
        raise Refused(_("An adjustment needs a reason."))
    if gpu_seconds == 0:
        raise Refused(_("An adjustment of zero changes nothing."))
    with transaction.atomic():
        locked = _locked(allocation.pk)
        if locked.granted_gpu_seconds + gpu_seconds < 0:
            raise Refused(_("An adjustment cannot take away more than was granted."))
        entry = _append(
            allocation=locked,
            kind=LedgerEntry.Kind.ADJUST,
            gpu_seconds=gpu_seconds,
            actor=actor,
            reason=reason,
        )
        audit_record(
            actor=actor,
            action=AuditEvent.Action.ALLOCATION_ADJUST,
            target=locked,
            scope=locked.project.slurm_account,
            detail={"gpu_seconds": gpu_seconds, "gpu_hours": gpu_seconds / 3600, "reason": reason},
        )
        return entry


def ledger_hold(
    *,
    allocation: Allocation,
    reference: str,
    gpu_seconds: int,
    user: User | None = None,
    partition: Partition | None = None,
) -> LedgerEntry:
    """Hold a job's requested GPU-seconds, or raise QuotaExceeded; a repeat returns the hold."""
    if gpu_seconds < 0:
        raise ValueError("A hold cannot be negative.")
    if not reference:
        raise ValueError("A hold needs the reference of what it is for.")
    # Within the caller's transaction (job_create's) no savepoint of its own: a refusal
    # has written nothing, and a hold that fails after its update fails the whole of what
    # it was for.
    with transaction.atomic(savepoint=False):
        # Whether the hold exists already and whether the allocation has caps, in one query.
        held, capped = (
            Allocation.objects.filter(pk=allocation.pk)
            .annotate(
                held=Exists(
                    LedgerEntry.objects.filter(kind=LedgerEntry.Kind.HOLD, reference=reference)
                ),
                capped=Exists(MemberCap.objects.filter(allocation_id=OuterRef("pk"))),
            )
            .values_list("held", "capped")
            .get()
        )
        if held and (existing := _existing(LedgerEntry.Kind.HOLD, reference)) is not None:
            return existing
        over_cap = None
        if user is not None and capped:
            # The allocation has caps: its row is taken first, so a hold of the same member
            # racing this one waits until this one commits, then counts it in their use.
            _locked(allocation.pk)
            over_cap = cap_refusal(
                allocation_id=allocation.pk, user_id=user.pk, gpu_seconds=gpu_seconds
            )
        # One conditional update instead of lock, read, compare: the row count says whether
        # the hours were there, and of two holds racing for the last hours only one gets them
        # (the other's WHERE is evaluated again on the row the first one wrote).
        covered = over_cap is None and (
            Allocation.objects.filter(pk=allocation.pk)
            .alias(available=AVAILABLE_GPU_SECONDS)
            .filter(available__gte=gpu_seconds)
            .update(held_gpu_seconds=F("held_gpu_seconds") + gpu_seconds)
        )
        if covered:
            return LedgerEntry.objects.create(
                allocation=allocation,
                kind=LedgerEntry.Kind.HOLD,
                gpu_seconds=-gpu_seconds,
                reference=reference,
                user=user,
                partition=partition,
            )
    available = Allocation.objects.get(pk=allocation.pk).available_gpu_seconds
    remaining = over_cap
    if remaining is None and user is not None:
        remaining = member_remaining_gpu_seconds(allocation, user)
    raise _refusal(gpu_seconds, available, remaining)


def ledger_hold_raise(
    *,
    allocation: Allocation,
    reference: str,
    gpu_seconds: int,
    user: User | None = None,
    partition: Partition | None = None,
) -> LedgerEntry:
    """Hold ``gpu_seconds`` more for something already held, as far as the allocation
    covers them (no member cap is asked: Slurm already runs the job), under a reference
    of its own (``Job.hold_references``). What was held, possibly less or nothing, is the
    entry's; a repeat returns the first entry."""
    if gpu_seconds <= 0:
        raise ValueError("A raise holds a positive number of GPU-seconds.")
    with transaction.atomic():
        locked = _locked(allocation.pk)
        if (existing := _existing(LedgerEntry.Kind.HOLD, reference)) is not None:
            return existing
        held = min(gpu_seconds, max(locked.available_gpu_seconds, 0))
        return _append(
            allocation=locked,
            kind=LedgerEntry.Kind.HOLD,
            gpu_seconds=-held,
            reference=reference,
            user=user,
            partition=partition,
        )


def _refusal(gpu_seconds: int, available: int, member_remaining: int | None) -> QuotaExceeded:
    return QuotaExceeded(
        requested_gpu_hours=gpu_seconds / 3600,
        available_gpu_hours=available / 3600,
        member_remaining_gpu_hours=None if member_remaining is None else member_remaining / 3600,
    )


def _release_in_transaction(hold: LedgerEntry) -> LedgerEntry:
    if (existing := _existing(LedgerEntry.Kind.RELEASE, hold.reference)) is not None:
        return existing
    locked = _locked(hold.allocation_id)
    return _append(
        allocation=locked,
        kind=LedgerEntry.Kind.RELEASE,
        gpu_seconds=-hold.gpu_seconds,
        reference=hold.reference,
    )


def ledger_release(*, reference: str) -> LedgerEntry | None:
    """Give a hold's GPU-seconds back; None when there was no hold, a repeat is a no-op."""
    with transaction.atomic():
        hold = _existing(LedgerEntry.Kind.HOLD, reference)
        if hold is None:
            return None
        return _release_in_transaction(hold)


def ledger_charge(
    *,
    allocation: Allocation,
    reference: str,
    gpu_seconds: int,
    release_references: tuple[str, ...] | list[str] = (),
    user: User | None = None,
    partition: Partition | None = None,
) -> LedgerEntry:
    """Charge what a run of a job used, exactly once per accounting record, and release
    the holds named (the job's, when this run ends it) in the same transaction. A repeat
    returns the first charge."""
    if gpu_seconds < 0:
        raise ValueError("A charge cannot be negative.")
    try:
        with transaction.atomic():
            locked = _locked(allocation.pk)
            if (existing := _existing(LedgerEntry.Kind.CHARGE, reference)) is not None:
                return existing
            entry = _append(
                allocation=locked,
                kind=LedgerEntry.Kind.CHARGE,
                gpu_seconds=-gpu_seconds,
                reference=reference,
                user=user,
                partition=partition,
            )
            for release_reference in release_references:
                hold = _existing(LedgerEntry.Kind.HOLD, release_reference)
                if hold is not None:
                    _release_in_transaction(hold)
            return entry
    except IntegrityError:
        # Two ingests of the same record raced past the check: the other one won.
        existing = _existing(LedgerEntry.Kind.CHARGE, reference)
        if existing is None:
            raise
        return existing


def allocation_expire(*, allocation: Allocation) -> LedgerEntry | None:
    """At the period's end the unused GPU-seconds lapse; an entry records how many."""
    with transaction.atomic():
        locked = _locked(allocation.pk)
        if locked.state == Allocation.State.EXPIRED:
            return None
        remaining = max(locked.available_gpu_seconds, 0)
        entry = None
        if remaining:
            entry = _append(
                allocation=locked,
                kind=LedgerEntry.Kind.EXPIRE,
                gpu_seconds=-remaining,
                reference=f"expire:{locked.pk}",
                reason=f"Unused at the end of the period ({locked.ends_on})",
            )
        Allocation.objects.filter(pk=locked.pk).update(state=Allocation.State.EXPIRED)
        return entry


def allocation_revoke(*, allocation: Allocation, actor: User, reason: str) -> LedgerEntry | None:
    """Withdraw an allocation before its end: it pays for no new work and what it has
    left lapses now, recorded as an expiry with the actor and the reason (an entry
    even when nothing is left, so the revocation is in the books). Hours held by
    running jobs stay held; those jobs are charged as usual. A repeat is a no-op."""
    if not reason.strip():
        raise Refused(_("Say why the allocation is revoked: the reason is kept in the ledger."))
    with transaction.atomic():
        locked = _locked(allocation.pk)
        if locked.state == Allocation.State.REVOKED:
            return None
        if locked.state == Allocation.State.EXPIRED:
            raise Refused(_("This allocation has already expired; its unused hours lapsed."))
        entry = _append(
            allocation=locked,
            kind=LedgerEntry.Kind.EXPIRE,
            gpu_seconds=-max(locked.available_gpu_seconds, 0),
            reference=f"revoke:{locked.pk}",
            actor=actor,
            reason=f"revoked: {reason.strip()}",
        )
        Allocation.objects.filter(pk=locked.pk).update(state=Allocation.State.REVOKED)
        audit_record(
            actor=actor,
            action=AuditEvent.Action.ALLOCATION_REVOKE,
            target=locked,
            scope=locked.project.slurm_account,
            detail={
                "lapsed_gpu_hours": -entry.gpu_seconds / 3600,
                "held_gpu_hours": locked.held_gpu_seconds / 3600,
                "reason": reason.strip(),
            },
        )
        return entry


def allocations_expire_due(*, today: dt.date | None = None) -> list[Allocation]:
    """Expire every active allocation whose period has ended; return them."""
    day = today or timezone.localdate()
    due = list(Allocation.objects.filter(state=Allocation.State.ACTIVE, ends_on__lte=day))
    for allocation in due:
        allocation_expire(allocation=allocation)
    return due
