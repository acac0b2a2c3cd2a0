"""Mail to researchers when their jobs end, as their preference says (``User.job_mail``:
every job, failed jobs only, never).

The accounting ingest queues a job's end (``job_end_mail_queue``, in the transaction
that finishes the job: one row per job, so an array is one line however many tasks it
had). A run of ``job_mails_send`` (the worker, after an ingest that finished jobs and
every minute from beat) mails each researcher whose oldest queued end has waited
``JOB_MAIL_DIGEST_S``: one mail listing every end of theirs queued by then, so a burst
of jobs ending within the window is one digest.

Crash safety, as for the PIs' notices (accounts.notifications): the rows are claimed
(committed) before the mail goes out and marked sent after, outside any transaction. A
run that dies between claim and mark leaves claims another run takes over after
``CLAIM_TIMEOUT``; a mail the server refused drops its claims, so the next run tries
again.
"""

import datetime as dt
import logging
import smtplib
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from django.conf import settings
from django.core.mail import EmailMessage, get_connection
from django.db import transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from accounts.metrics import mail_counted
from accounts.models import User
from jobs.models import Job, JobEndMail
from jobs.states import JobState

logger = logging.getLogger(__name__)

# Longer than a task may run, so a live run's claim is never taken.
CLAIM_TIMEOUT = dt.timedelta(hours=1)

# What "failed jobs only" mails: every end but success and a cancel (which its owner or
# an administrator asked for).
FAILURES = frozenset(
    {
        JobState.FAILED,
        JobState.TIMEOUT,
        JobState.OUT_OF_MEMORY,
        JobState.NODE_FAIL,
        JobState.PREEMPTED,
    }
)


def wants_mail(preference: str, state: str) -> bool:
    """Whether a user with this preference is told of a job that ended in ``state``."""
    if preference == User.JobMail.ALL:
        return True
    if preference == User.JobMail.FAILURES:
        return state in FAILURES
    return False


def job_end_mail_queue(*, job: Job, state: str) -> None:
    """The trigger point: the accounting ingest calls it, in the transaction that finishes
    ``job`` in ``state``. A repeat (a later ingest finishing it again) queues nothing."""
    if not wants_mail(job.owner.job_mail, state):
        return
    JobEndMail.objects.bulk_create(
        [JobEndMail(job=job, owner_id=job.owner_id, created_at=timezone.now())],
        ignore_conflicts=True,
    )


@dataclass(frozen=True)
class Queued:
    pk: int
    owner_id: int
    created_at: dt.datetime


def digests(
    queued: Iterable[Queued], *, now: dt.datetime, window: dt.timedelta
) -> dict[int, list[int]]:
    """The rows due to go out now, by owner: all of an owner's rows once the oldest has
    waited ``window``, none before."""
    by_owner: dict[int, list[Queued]] = defaultdict(list)
    for row in queued:
        by_owner[row.owner_id].append(row)
    return {
        owner_id: sorted(row.pk for row in rows)
        for owner_id, rows in by_owner.items()
        if min(row.created_at for row in rows) <= now - window
    }


def _claim(now: dt.datetime) -> dict[int, list[int]]:
    claimable = Q(sent_at__isnull=True) & (
        Q(claimed_at__isnull=True) | Q(claimed_at__lt=now - CLAIM_TIMEOUT)
    )
    window = dt.timedelta(seconds=settings.JOB_MAIL_DIGEST_S)
    with transaction.atomic():
        # A row another run holds locked is left to it (it is claiming it right now).
        rows = (
            JobEndMail.objects.select_for_update(skip_locked=True)
            .filter(claimable)
            .values_list("pk", "owner_id", "created_at")
        )
        due = digests((Queued(*row) for row in rows), now=now, window=window)
        JobEndMail.objects.filter(pk__in=[pk for pks in due.values() for pk in pks]).update(
            claimed_at=now
        )
    return due


def _duration(job: Job) -> str:
    if job.started_at is None or job.ended_at is None:
        return _("did not start")
    seconds = max(int((job.ended_at - job.started_at).total_seconds()), 0)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _job_lines(job: Job) -> str:
    what = (
        ngettext(
            "Job %(id)s “%(name)s” (an array of %(tasks)s task) in %(project)s",
            "Job %(id)s “%(name)s” (an array of %(tasks)s tasks) in %(project)s",
            job.array_tasks,
        )
        if job.array
        else _("Job %(id)s “%(name)s” in %(project)s")
    ) % {"id": job.pk, "name": job.name, "tasks": job.array_tasks, "project": job.project.name}
    exit_code = "-" if job.exit_code is None else str(job.exit_code)
    gpu_hours = f"{(job.used_gpu_seconds or 0) / 3600:,.2f}"
    link = settings.PORTAL_BASE_URL + reverse("jobs:detail", args=[job.pk])
    return "\n".join(
        [
            f"{what}: {JobState(job.state).label}",
            "  "
            + _("Slurm job %(slurm_id)s on %(cluster)s")
            % {"slurm_id": job.slurm_job_id, "cluster": job.cluster.name},
            "  "
            + _("Exit code %(exit_code)s, ran %(elapsed)s, %(gpu_hours)s GPU-hours charged")
            % {"exit_code": exit_code, "elapsed": _duration(job), "gpu_hours": gpu_hours},
            f"  {link}",
        ]
    )


def message_for(owner: User, jobs: list[Job]) -> EmailMessage:
    """The mail telling ``owner`` of ``jobs``' ends, in their language."""
    with translation.override(owner.mail_language or settings.LANGUAGE_CODE):
        if len(jobs) == 1:
            subject = _("Your job %(id)s “%(name)s” ended: %(state)s") % {
                "id": jobs[0].pk,
                "name": jobs[0].name,
                "state": JobState(jobs[0].state).label,
            }
        else:
            failed = sum(job.state in FAILURES for job in jobs)
            subject = _("%(count)s of your jobs ended, %(failed)s of them failed") % {
                "count": len(jobs),
                "failed": failed,
            }
        paragraphs = [
            _("Hello %(name)s,") % {"name": owner.get_full_name() or owner.username},
            ngettext(
                "This job of yours has ended:",
                "These %(count)s jobs of yours have ended:",
                len(jobs),
            )
            % {"count": len(jobs)},
            *(_job_lines(job) for job in jobs),
            _(
                "You can choose which job ends you are told of (every job, failed jobs only, "
                "never) on your preferences page: %(url)s"
            )
            % {"url": settings.PORTAL_BASE_URL + reverse("preferences")},
        ]
        return EmailMessage(
            subject=f"[{_('Slurm GPU Portal')}] {subject}",
            body="\n\n".join(paragraphs) + "\n",
            from_email=settings.PORTAL_EMAIL_FROM,
            to=[owner.email],
        )


def _settle(pks: list[int], *, now: dt.datetime, recipient: str) -> None:
    JobEndMail.objects.filter(pk__in=pks, sent_at__isnull=True).update(
        sent_at=now, recipient=recipient
    )


def job_mails_send(*, now: dt.datetime | None = None) -> int:
    """Mail every researcher whose job ends are due, one mail each; how many went out."""
    now = now or timezone.now()
    due = _claim(now)
    if not due:
        return 0
    owners = User.objects.in_bulk(list(due))
    rows = (
        JobEndMail.objects.filter(pk__in=[pk for pks in due.values() for pk in pks])
        .select_related("job__project", "job__cluster")
        .order_by("job__ended_at", "job_id")
    )
    by_owner: dict[int, list[JobEndMail]] = defaultdict(list)
    for row in rows:
        by_owner[row.owner_id].append(row)

    connection = get_connection()  # no transaction is open: a slow server holds no lock
    sent = 0
    for owner_id, its_rows in by_owner.items():
        owner = owners[owner_id]
        # The preference may have changed since the job ended: it is read again now.
        told = [row for row in its_rows if wants_mail(owner.job_mail, row.job.state)]
        untold = [row.pk for row in its_rows if row not in told]
        if told and not owner.email:
            logger.warning("%s has no email address: not told of %d job end(s)", owner, len(told))
            untold += [row.pk for row in told]
            told = []
        _settle(untold, now=now, recipient="")
        if not told:
            continue
        message = message_for(owner, [row.job for row in told])
        message.connection = connection
        try:
            message.send()
        except (smtplib.SMTPException, OSError) as exc:
            logger.warning("job end mail to %s failed: %s", owner.email, exc)
            mail_counted("job_end", sent=False)
            JobEndMail.objects.filter(pk__in=[row.pk for row in told], sent_at__isnull=True).update(
                claimed_at=None
            )  # the next run tries again
            continue
        mail_counted("job_end", sent=True)
        sent += 1
        _settle([row.pk for row in told], now=now, recipient=owner.email)
        logger.info("told %s of %d job end(s)", owner.email, len(told))
    return sent
