"""Mail to a project's PIs and co-PIs when an allocation has used 80% and 100% of its
GPU-hours, and when it ends within 14 days.

One run (``notifications_send``, from beat every few minutes) finds every notice
that is due, sends each person at most one mail listing all of them, and records
each notice once per allocation and kind: a threshold is announced once, never
once per job.

A crossing is measured on what was used (charged) against what was granted, not
on used + held: charges only grow, so a crossing stays crossed, while holds come
and go with the queue (one big pending job would announce "100%" for hours that
are given back when it ends early). The mail still shows what is held.

Crash safety: a notice is claimed (a committed row, unique per allocation and
kind) before its mails go out and marked sent after, outside any transaction
that holds the mail. Two runs at once cannot both claim a notice, and a task
redelivered after a crash does not mail again. A run that dies between claim and
mark leaves a claim without ``sent_at``; another run takes it over once it is
older than ``CLAIM_TIMEOUT``, so a notice is sent late rather than never (twice
only if the crash fell between the send and the mark). When every mail of a
notice fails (the mail server is down), the claim is dropped and the next run
tries again.
"""

import datetime as dt
import logging
import smtplib
from collections import defaultdict
from dataclasses import dataclass

from django.conf import settings
from django.core.mail import EmailMessage, get_connection
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from accounts.metrics import mail_counted
from accounts.models import Allocation, Notification, User, Webhook
from accounts.permissions import leads_of
from accounts.webhooks import webhook_event

logger = logging.getLogger(__name__)

EXPIRY_NOTICE_DAYS = 14
# Longer than a task may run (CELERY_TASK_TIME_LIMIT), so a live run's claim is never taken.
CLAIM_TIMEOUT = dt.timedelta(hours=1)

Kind = Notification.Kind


@dataclass(frozen=True)
class Notice:
    """One thing to tell about an allocation, and the claims it settles (a 100%
    notice settles the 80% one too when both became due in the same run)."""

    allocation: Allocation
    kind: str
    claim_ids: tuple[int, ...]


def _kinds_due(allocation: Allocation, today: dt.date) -> list[str]:
    granted, used = allocation.granted_gpu_seconds, allocation.used_gpu_seconds
    kinds: list[str] = []
    if granted > 0 and used >= granted:
        kinds += [Kind.USAGE_100, Kind.USAGE_80]
    elif granted > 0 and used * 5 >= granted * 4:
        kinds.append(Kind.USAGE_80)
    if today < allocation.ends_on <= today + dt.timedelta(days=EXPIRY_NOTICE_DAYS):
        kinds.append(Kind.EXPIRES_SOON)
    return kinds


def _candidates(today: dt.date) -> list[Allocation]:
    """Active allocations past 80% or ending soon, with the notices they already had."""
    return list(
        Allocation.objects.filter(state=Allocation.State.ACTIVE)
        .alias(used_x5=F("used_gpu_seconds") * 5, granted_x4=F("granted_gpu_seconds") * 4)
        .filter(
            Q(granted_gpu_seconds__gt=0, used_x5__gte=F("granted_x4"))
            | Q(ends_on__gt=today, ends_on__lte=today + dt.timedelta(days=EXPIRY_NOTICE_DAYS))
        )
        .select_related("project", "cluster")
        .prefetch_related("notifications")
        .order_by("project__name", "ends_on")
    )


def _claim(allocation: Allocation, kind: str, now: dt.datetime) -> int | None:
    """Claim a notice for this run: its id, or None when it was sent or another run has it."""
    cutoff = now - CLAIM_TIMEOUT
    existing = next((n for n in allocation.notifications.all() if n.kind == kind), None)
    if existing is not None:
        if existing.sent_at is not None or existing.claimed_at >= cutoff:
            return None
        # A run died holding this claim; the conditional update lets only one run take it.
        taken = Notification.objects.filter(
            pk=existing.pk, sent_at__isnull=True, claimed_at__lt=cutoff
        ).update(claimed_at=now)
        return existing.pk if taken else None
    try:
        with transaction.atomic():
            return Notification.objects.create(allocation=allocation, kind=kind, claimed_at=now).pk
    except IntegrityError:
        return None  # another run claimed it a moment ago


def _notices(now: dt.datetime) -> list[Notice]:
    today = timezone.localdate(now)
    notices = []
    for allocation in _candidates(today):
        claims = {
            kind: claim_id
            for kind in _kinds_due(allocation, today)
            if (claim_id := _claim(allocation, kind, now)) is not None
        }
        usage = [kind for kind in (Kind.USAGE_100, Kind.USAGE_80) if kind in claims]
        if usage:
            # Only the highest threshold is worth a line; the mail settles both.
            ids = tuple(claims[kind] for kind in usage)
            notices.append(Notice(allocation, usage[0], ids))
        if Kind.EXPIRES_SOON in claims:
            notices.append(Notice(allocation, Kind.EXPIRES_SOON, (claims[Kind.EXPIRES_SOON],)))
    return notices


def _hours(seconds: int) -> str:
    return f"{seconds / 3600:,.1f}"


def _line(notice: Notice, today: dt.date) -> str:
    allocation = notice.allocation
    if notice.kind == Kind.EXPIRES_SOON:
        days = (allocation.ends_on - today).days
        return (
            f"It ends on {allocation.ends_on:%Y-%m-%d}, in {days} day{'s' if days != 1 else ''}: "
            "GPU-hours not used before then lapse."
        )
    percent = allocation.used_gpu_seconds * 100 // allocation.granted_gpu_seconds
    if notice.kind == Kind.USAGE_100:
        return (
            f"All of its GPU-hours are used ({percent}%): new jobs are refused until more "
            "are granted."
        )
    return f"{percent}% of its GPU-hours are used."


def _heading(allocation: Allocation) -> str:
    return (
        f"{allocation.project.name} ({allocation.project.slug}) on {allocation.cluster}, "
        f"{allocation.starts_on:%Y-%m-%d} to {allocation.ends_on:%Y-%m-%d}: "
        f"{_hours(allocation.used_gpu_seconds)} of {_hours(allocation.granted_gpu_seconds)} "
        f"GPU-hours used, {_hours(allocation.held_gpu_seconds)} held by queued and running "
        f"jobs, {_hours(max(allocation.available_gpu_seconds, 0))} available."
    )


def _message(user: User, notices: list[Notice], today: dt.date) -> EmailMessage:
    by_allocation: dict[Allocation, list[Notice]] = defaultdict(list)
    for notice in notices:
        by_allocation[notice.allocation].append(notice)
    projects = sorted({notice.allocation.project.name for notice in notices})
    paragraphs = [
        f"Hello {user.get_full_name() or user.username},",
        "News about the GPU-hours of your projects on the Slurm GPU Portal:",
    ]
    for allocation, its_notices in by_allocation.items():
        lines = [_heading(allocation)]
        lines += [f"  - {_line(notice, today)}" for notice in its_notices]
        paragraphs.append("\n".join(lines))
    paragraphs.append(
        "You receive this as a PI or co-PI of the project; each notice is sent once per "
        "allocation. A PI or co-PI can ask for more GPU-hours in the portal."
    )
    return EmailMessage(
        subject=f"[Slurm GPU Portal] GPU-hours of {', '.join(projects)}",
        body="\n\n".join(paragraphs) + "\n",
        from_email=settings.PORTAL_EMAIL_FROM,
        to=[user.email],
    )


def _recipients(notices: list[Notice]) -> dict[int, list[User]]:
    """The active PIs and co-PIs of each project concerned, by project id."""
    memberships = leads_of({notice.allocation.project_id for notice in notices})
    by_project: dict[int, list[User]] = defaultdict(list)
    for membership in memberships:
        by_project[membership.project_id].append(membership.user)
    return by_project


def notifications_send(*, now: dt.datetime | None = None) -> int:
    """Mail every notice that is due, one mail per person; return how many mails went out."""
    now = now or timezone.now()
    today = timezone.localdate(now)
    notices = _notices(now)
    if not notices:
        return 0
    people = _recipients(notices)
    per_user: dict[User, list[Notice]] = defaultdict(list)
    unreachable: dict[User, list[Notice]] = defaultdict(list)
    for notice in notices:
        for user in people[notice.allocation.project_id]:
            (per_user if user.email else unreachable)[user].append(notice)
    for user, missed in unreachable.items():
        logger.warning(
            "%s has no email address: not told %s",
            user.username,
            "; ".join(f"{notice.kind} of {notice.allocation}" for notice in missed),
        )

    # No transaction is open here: a slow mail server holds no lock.
    connection = get_connection()
    addressed: dict[Notice, int] = defaultdict(int)
    delivered: dict[Notice, list[str]] = defaultdict(list)
    sent = 0
    for user in sorted(per_user, key=lambda u: u.username):
        message = _message(user, per_user[user], today)
        message.connection = connection
        for notice in per_user[user]:
            addressed[notice] += 1
        try:
            message.send()
        except (smtplib.SMTPException, OSError) as exc:
            logger.warning("notice mail to %s failed: %s", user.email, exc)
            mail_counted("allocation", sent=False)
            continue
        mail_counted("allocation", sent=True)
        sent += 1
        logger.info("told %s of %d notice(s)", user.email, len(per_user[user]))
        for notice in per_user[user]:
            delivered[notice].append(user.email)

    with transaction.atomic():
        for notice in notices:
            claims = Notification.objects.filter(pk__in=notice.claim_ids, sent_at__isnull=True)
            if addressed[notice] and not delivered[notice]:
                claims.delete()  # every mail failed: the next run tries again
                continue
            if not addressed[notice]:
                logger.warning(
                    "nobody with an email address to tell %s of %s", notice.kind, notice.allocation
                )
            if claims.update(sent_at=now, recipients=", ".join(delivered[notice])):
                _tell_webhooks(notice, today)
    return sent


WEBHOOK_EVENT_OF = {
    Kind.USAGE_80: Webhook.Event.USAGE_80,
    Kind.USAGE_100: Webhook.Event.USAGE_100,
    Kind.EXPIRES_SOON: Webhook.Event.EXPIRES_SOON,
}


def _tell_webhooks(notice: Notice, today: dt.date) -> None:
    """The project's hooks hear of a notice once, with the claim that settles it."""
    allocation = notice.allocation
    webhook_event(
        WEBHOOK_EVENT_OF[Kind(notice.kind)],
        project=allocation.project_id,
        payload={
            "project": allocation.project.slug,
            "cluster": str(allocation.cluster),
            "allocation": allocation.pk,
            "starts_on": allocation.starts_on.isoformat(),
            "ends_on": allocation.ends_on.isoformat(),
            "granted_gpu_hours": round(allocation.granted_gpu_seconds / 3600, 3),
            "used_gpu_hours": round(allocation.used_gpu_seconds / 3600, 3),
            "held_gpu_hours": round(allocation.held_gpu_seconds / 3600, 3),
        },
        text=f"{allocation.project.name} ({allocation.project.slug}): {_line(notice, today)}",
    )
