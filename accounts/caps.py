"""Per-member GPU-hour caps: how much of an allocation one member may spend.

A cap is set on an allocation for one member, or as the default of every member
(``MemberCap`` with no user); a member's own cap wins over the default. A member's
use of an allocation is what the ledger charged for their work plus what their jobs
hold now (holds not yet released), so a member's remaining = cap - use.

``ledger_hold`` of an allocation with caps takes the allocation's row before it asks
``cap_refusal``: a second hold of the same allocation waits for the first to commit,
and then counts the first one's hold in the member's use, so two concurrent
submissions never overspend a cap (as they never overspend the project). Setting a
cap takes the same row. The reconciler makes Slurm stop the member there too (the member's own
association's ``GrpTRESMins``: ``accounts.reconcile``).

A member whose charges reach their cap is announced to the project's
``member.cap_reached`` webhooks once per cap value (``caps_reached_announce``, from the
notifications' beat run), measured on charges as the allocation's thresholds are:
charges only grow, holds come and go.
"""

import datetime as dt
from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, Q, Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts.errors import NotAllowed, Refused
from accounts.models import (
    Allocation,
    CapReached,
    LedgerEntry,
    MemberCap,
    Membership,
    User,
    Webhook,
)
from accounts.permissions import cap_change_refusal, may_set_caps
from accounts.webhooks import webhook_event
from audit.models import AuditEvent
from audit.services import audit_record

# The most a cap may be, in GPU-hours: beyond any allocation's grant, and far below
# what a 64-bit count of GPU-seconds holds.
MAX_CAP_GPU_HOURS = 10_000_000


def _released() -> Exists:
    return Exists(
        LedgerEntry.objects.filter(kind=LedgerEntry.Kind.RELEASE, reference=OuterRef("reference"))
    )


def member_uses(allocation_id: int, user_ids: list[int] | None = None) -> dict[int, int]:
    """GPU-seconds each member charged plus holds now, on the allocation, by user id
    (only those given; everyone with an entry when None). One query."""
    entries = LedgerEntry.objects.filter(
        allocation_id=allocation_id, user__isnull=False, kind__in=["hold", "charge"]
    )
    if user_ids is not None:
        entries = entries.filter(user_id__in=user_ids)
    sums = (
        entries.alias(released=_released())
        .filter(Q(kind=LedgerEntry.Kind.CHARGE) | Q(released=False))
        .values("user_id")
        .annotate(spent=Sum("gpu_seconds"))
    )
    # Holds and charges are negative (they lower the balance): a use is their negation.
    return {row["user_id"]: -row["spent"] for row in sums}


def member_use(allocation_id: int, user_id: int) -> int:
    return member_uses(allocation_id, [user_id]).get(user_id, 0)


def cap_for(allocation_id: int, user_id: int) -> MemberCap | None:
    """The member's own cap on the allocation, else the allocation's default, else None."""
    caps = MemberCap.objects.filter(
        Q(user_id=user_id) | Q(user__isnull=True), allocation_id=allocation_id
    )
    return min(caps, key=lambda cap: cap.user_id is None, default=None)


@dataclass(frozen=True)
class MemberStanding:
    """A member's cap on an allocation (None: uncapped), use and what is left."""

    user: User
    cap: MemberCap | None
    used_gpu_seconds: int

    @property
    def remaining_gpu_seconds(self) -> int | None:
        if self.cap is None:
            return None
        return max(self.cap.gpu_seconds - self.used_gpu_seconds, 0)

    @property
    def is_own_cap(self) -> bool:
        return self.cap is not None and self.cap.user_id is not None

    def as_gpu_hours(self) -> dict[str, float | None]:
        remaining = self.remaining_gpu_seconds
        return {
            "cap_gpu_hours": self.cap.gpu_hours if self.cap else None,
            "used_gpu_hours": self.used_gpu_seconds / 3600,
            "remaining_gpu_hours": None if remaining is None else remaining / 3600,
        }


def member_standings(allocation: Allocation, users: list[User]) -> list[MemberStanding]:
    """Each of ``users``' standing on the allocation, in their order; three queries."""
    caps = {cap.user_id: cap for cap in MemberCap.objects.filter(allocation=allocation)}
    uses = member_uses(allocation.pk, [user.pk for user in users])
    return [
        MemberStanding(
            user=user,
            cap=caps.get(user.pk) or caps.get(None),
            used_gpu_seconds=uses.get(user.pk, 0),
        )
        for user in users
    ]


def allocation_standings(allocation: Allocation) -> list[MemberStanding]:
    """Every member of the allocation's project, by user name."""
    users = [
        membership.user
        for membership in Membership.objects.filter(project_id=allocation.project_id)
        .select_related("user")
        .order_by("user__username")
    ]
    return member_standings(allocation, users)


def cap_refusal(*, allocation_id: int, user_id: int, gpu_seconds: int) -> int | None:
    """What the member has left under their cap when a hold of ``gpu_seconds`` is more
    than that, else None. Call it holding the allocation's row (``ledger_hold`` does)."""
    cap = cap_for(allocation_id, user_id)
    if cap is None:
        return None
    remaining = cap.gpu_seconds - member_use(allocation_id, user_id)
    return None if gpu_seconds <= remaining else max(remaining, 0)


def _checked_hours(gpu_hours: float) -> int:
    if not 0 <= gpu_hours <= MAX_CAP_GPU_HOURS:
        raise Refused(
            _("A cap is between 0 and %(most)s GPU-hours.") % {"most": f"{MAX_CAP_GPU_HOURS:,}"}
        )
    return round(gpu_hours * 3600)


def _check_member(allocation: Allocation, user: User | None) -> None:
    if (
        user is not None
        and not Membership.objects.filter(project_id=allocation.project_id, user=user).exists()
    ):
        raise Refused(
            _("%(user)s is not a member of %(project)s.")
            % {"user": user.get_username(), "project": allocation.project}
        )


def cap_change_refusal_of(
    actor: User, allocation: Allocation, user: User | None, gpu_seconds: int | None
) -> str:
    """Why ``actor`` may not set ``user``'s cap on the allocation to ``gpu_seconds`` (None:
    lift it), as ``accounts.permissions.cap_change_refusal`` says; "" when they may. For
    pages and the console to say so before they offer the change."""
    caps = {
        c.user_id: c
        for c in MemberCap.objects.filter(allocation=allocation)
        .filter(Q(user=user) | Q(user__isnull=True))
        .select_related("set_by")
    }
    return cap_change_refusal(
        actor,
        project=allocation.project_id,
        member=user,
        cap=caps.get(user.pk if user else None),
        default=caps.get(None),
        gpu_seconds=gpu_seconds,
    )


def _audit(actor: User, action: str, cap: MemberCap, **detail: object) -> None:
    audit_record(
        actor=actor,
        action=action,
        target=cap.allocation,
        on_behalf_of=cap.user,
        scope=cap.allocation.project.slurm_account,
        detail={
            "member": cap.user.get_username() if cap.user else "*",
            "cluster": cap.allocation.cluster.name,
            **detail,
        },
    )


def member_cap_set(
    *, actor: User, allocation: Allocation, user: User | None, gpu_hours: float
) -> MemberCap:
    """Cap ``user``'s GPU-hours on the allocation (None: the default of every member);
    by the project's PI or a co-PI or an allocation manager, never the member, and a cap
    an allocation manager set only by another (``cap_change_refusal``). Audited (the old
    and new value); setting the same value again records nothing."""
    if not may_set_caps(actor, allocation.project_id):
        raise NotAllowed(_("Only the project's PI and co-PIs and allocation managers set caps."))
    gpu_seconds = _checked_hours(gpu_hours)
    _check_member(allocation, user)
    with transaction.atomic():
        # The allocation's row serialises changes of its caps with its holds.
        Allocation.objects.select_for_update().get(pk=allocation.pk)
        cap = MemberCap.objects.filter(allocation=allocation, user=user).first()
        if refusal := cap_change_refusal_of(actor, allocation, user, gpu_seconds):
            raise NotAllowed(refusal)
        was = cap.gpu_seconds if cap else None
        if cap is not None and was == gpu_seconds:
            return cap
        if cap is None:
            cap = MemberCap(allocation=allocation, user=user)
        cap.gpu_seconds = gpu_seconds
        cap.set_by = actor
        cap.save()
        _audit(
            actor,
            AuditEvent.Action.MEMBER_CAP_SET,
            cap,
            gpu_hours=gpu_seconds / 3600,
            was_gpu_hours=None if was is None else was / 3600,
        )
    return cap


def member_cap_clear(*, actor: User, allocation: Allocation, user: User | None) -> bool:
    """Lift ``user``'s own cap (None: the default); True when there was one. Who may is
    as for ``member_cap_set``. Audited."""
    if not may_set_caps(actor, allocation.project_id):
        raise NotAllowed(_("Only the project's PI and co-PIs and allocation managers set caps."))
    with transaction.atomic():
        Allocation.objects.select_for_update().get(pk=allocation.pk)
        cap = MemberCap.objects.filter(allocation=allocation, user=user).first()
        if refusal := cap_change_refusal_of(actor, allocation, user, None):
            raise NotAllowed(refusal)
        if cap is None:
            return False
        _audit(actor, AuditEvent.Action.MEMBER_CAP_CLEAR, cap, was_gpu_hours=cap.gpu_hours)
        cap.delete()
    return True


def _charged_and_caps(allocation: Allocation) -> list[tuple[int, str | None, int, int]]:
    """(user id, POSIX name, cap, GPU-seconds charged) of every capped member of the
    allocation's project; three queries."""
    caps = {cap.user_id: cap.gpu_seconds for cap in MemberCap.objects.filter(allocation=allocation)}
    if not caps:
        return []
    members = Membership.objects.filter(project_id=allocation.project_id).values_list(
        "user_id", "user__posix_username"
    )
    charged = {
        row["user_id"]: -row["spent"]
        for row in LedgerEntry.objects.filter(
            allocation=allocation, kind=LedgerEntry.Kind.CHARGE, user__isnull=False
        )
        .values("user_id")
        .annotate(spent=Sum("gpu_seconds"))
    }
    return [
        (user_id, posix, cap, charged.get(user_id, 0))
        for user_id, posix in members
        if (cap := caps.get(user_id, caps.get(None))) is not None
    ]


def member_caps_covering(allocation: Allocation) -> dict[str, int]:
    """GPU-seconds each capped member's cap still covers on the allocation, by POSIX name:
    the cap less what was charged for their work (what their unfinished jobs hold stays
    covered, as the project's Slurm limit covers its holds). The reconciler turns it into
    the member's own association limit; members without a cap or a POSIX name are absent."""
    return {
        posix: max(cap - charged, 0)
        for _user_id, posix, cap, charged in _charged_and_caps(allocation)
        if posix is not None
    }


def caps_reached_announce(*, now: dt.datetime | None = None) -> int:
    """Tell the projects' ``member.cap_reached`` hooks of every member whose charges on an
    active allocation reached their cap (a cap above zero) since it was set; once per
    member, allocation and cap value, recorded with the deliveries in one transaction so
    two runs never announce one twice. How many were announced."""
    now = now or timezone.now()
    allocations = (
        Allocation.objects.filter(state=Allocation.State.ACTIVE, caps__isnull=False)
        .distinct()
        .select_related("project", "cluster")
    )
    announced = 0
    for allocation in allocations:
        told = set(
            CapReached.objects.filter(allocation=allocation).values_list(
                "user_id", "cap_gpu_seconds"
            )
        )
        for user_id, _posix, cap, charged in _charged_and_caps(allocation):
            if cap == 0 or charged < cap or (user_id, cap) in told:
                continue
            try:
                with transaction.atomic():
                    CapReached.objects.create(
                        allocation=allocation, user_id=user_id, cap_gpu_seconds=cap, reached_at=now
                    )
                    _tell_cap_reached(allocation, user_id, cap, charged)
            except IntegrityError:
                continue  # another run announced it a moment ago
            announced += 1
    return announced


def _tell_cap_reached(allocation: Allocation, user_id: int, cap: int, charged: int) -> None:
    member = User.objects.get(pk=user_id)
    project = allocation.project
    webhook_event(
        Webhook.Event.MEMBER_CAP_REACHED,
        project=project.pk,
        payload={
            "project": project.slug,
            "cluster": str(allocation.cluster),
            "allocation": allocation.pk,
            "member": member.get_username(),
            "cap_gpu_hours": round(cap / 3600, 3),
            "used_gpu_hours": round(charged / 3600, 3),
        },
        text=(
            f"{project.name} ({project.slug}): {member.get_username()} has used "
            f"{charged / 3600:,.1f} of their {cap / 3600:,.1f}-GPU-hour cap on "
            f"{allocation.cluster}; their new jobs are refused until the cap is raised."
        ),
    )


def member_remaining_gpu_seconds(allocation: Allocation, user: User) -> int | None:
    """What the user's cap on the allocation leaves them now; None when uncapped. For a
    figure to show (an estimate): the hold checks again under the allocation's lock."""
    cap = cap_for(allocation.pk, user.pk)
    if cap is None:
        return None
    return max(cap.gpu_seconds - member_use(allocation.pk, user.pk), 0)
