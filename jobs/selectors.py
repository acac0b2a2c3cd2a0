"""Reads of jobs that pages and the API share, scoped to the user who asks."""

import datetime as dt
from collections.abc import Collection, Sequence
from typing import Any

from django.conf import settings
from django.contrib.postgres.expressions import ArraySubquery
from django.db.models import Count, OuterRef, Q, QuerySet, Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts.models import Allocation, Project, User
from accounts.permissions import led_project_ids
from clusters.models import Cluster
from clusters.slurm.states import SlurmJobState
from jobs import output, worker_calls
from jobs.errors import OutputUnavailable
from jobs.models import UNFINISHED_STATES, AccountingRecord, Job, JobTemplate
from jobs.states import PORTAL_VALUE_OF, JobState


def jobs_visible_to(user: User) -> QuerySet[Job]:
    """The user's own jobs, and every job of the projects where they are PI or co-PI."""
    led = led_project_ids(user)
    return Job.objects.filter(Q(owner=user) | Q(project_id__in=led)).select_related(
        "owner", "project", "cluster", "partition"
    )


INT64_MAX = 2**63 - 1


def jobs_matching(
    user: User,
    *,
    project_id: int | None = None,
    states: Collection[str] = (),
    search: str = "",
) -> QuerySet[Job]:
    """The jobs of a list: the user's own, or with ``project_id`` those of that project
    the user may see (all of them for its PI and co-PIs); in ``states``, and whose name
    contains ``search`` or whose number or Slurm id it is ("#12" too)."""
    jobs = jobs_visible_to(user)
    jobs = jobs.filter(project_id=project_id) if project_id else jobs.filter(owner=user)
    if states:
        jobs = jobs.filter(state__in=states)
    if "\x00" in search:
        return jobs.none()  # no name holds a NUL (and PostgreSQL cannot be asked for one)
    if search:
        match = Q(name__icontains=search)
        number = search.lstrip("#")
        # isdigit() alone is true of "²", which int() refuses.
        if number.isascii() and number.isdigit() and int(number) <= INT64_MAX:
            match |= Q(pk=int(number)) | Q(slurm_job_id=int(number))
        jobs = jobs.filter(match)
    return jobs


def jobs_listed(
    user: User,
    *,
    project_id: int | None = None,
    states: Collection[str] = (),
    search: str = "",
    columns: Sequence[str],
) -> QuerySet[Job, dict[str, Any]]:
    """``jobs_matching`` as rows of ``columns`` (a related name as ``owner__username``)
    and the dependencies' ids as ``depends_on_ids``, in one query: a page of a list
    builds no model objects and needs no prefetch."""
    jobs = jobs_matching(user, project_id=project_id, states=states, search=search)
    dependencies = Job.depends_on.through.objects.filter(from_job=OuterRef("pk")).values(
        "to_job_id"
    )
    return jobs.annotate(depends_on_ids=ArraySubquery(dependencies)).values(
        *columns, "depends_on_ids"
    )


def own_jobs(user: User) -> QuerySet[Job]:
    """The user's own jobs, newest first (with what a list shows of each)."""
    return jobs_visible_to(user).filter(owner=user)


def project_jobs(user: User, project: Project, *, leads: bool) -> QuerySet[Job]:
    """A project's jobs as ``user`` may see them: all for its leads, their own otherwise."""
    jobs = jobs_visible_to(user).filter(project=project)
    return jobs if leads else jobs.filter(owner=user)


def job_detail(user: User, job_id: int) -> Job:
    """One visible job with its events and accounting records (its efficiency);
    Job.DoesNotExist for anyone else's (a 404)."""
    return (
        jobs_visible_to(user).prefetch_related("events", "depends_on", "accounting").get(pk=job_id)
    )


def templates_visible_to(user: User):
    """Global templates, the user's own, and those shared with the user's projects."""
    return JobTemplate.objects.filter(
        Q(scope=JobTemplate.Scope.GLOBAL)
        | Q(scope=JobTemplate.Scope.USER, owner=user)
        | Q(scope=JobTemplate.Scope.PROJECT, project__memberships__user=user)
    ).distinct()


def templates_for(user: User) -> QuerySet[JobTemplate]:
    return templates_visible_to(user).order_by("scope", "name")


def _output_path(job: Job, stream: str, array_task: int | None) -> str:
    if job.slurm_job_id is None:
        raise OutputUnavailable(_("The job has not reached Slurm yet, so it has no output."))
    pattern = job.output_path if stream == "stdout" else job.error_path
    is_array = bool(job.array)
    return output.expand_output_pattern(
        pattern,
        # A task's own id is not known here; %j of an array task is rarely used in
        # output names, and %A_%a (the usual pattern) is exact.
        job_id=job.slurm_job_id,
        array_job_id=job.slurm_job_id if is_array else None,
        array_task=array_task if is_array else None,
        name=job.name,
        user=job.owner.posix_username or "",
    )


def job_output(
    job: Job,
    *,
    stream: str = "stdout",
    tail_lines: int | None = None,
    array_task: int | None = None,
) -> output.OutputText:
    """The job's stdout or stderr, read by a worker as safely as DESIGN "Safe scripts"
    asks: only a regular file owned by the job's owner, inside their allowed roots, never
    via a link. OutputUnavailable says why not."""
    if stream not in ("stdout", "stderr"):
        raise ValueError("stream is stdout or stderr")
    posix_user = job.owner.posix_username
    if not posix_user:
        raise OutputUnavailable(_("The job's owner has no Unix login any more."))
    return worker_calls.output_of(
        posix_user=posix_user,
        path=_output_path(job, stream, array_task),
        tail_lines=tail_lines,
        timeout_s=settings.OUTPUT_TIMEOUT_S,
    )


# How long a job is left in ``new`` (or in a lapsed ``submitting``) before the sweeper
# enqueues it again. A first attempt on a job left ``new`` this long looks its token up
# in Slurm before it submits (``jobs.submission.may_be_in_slurm``).
SWEEP_AFTER = dt.timedelta(seconds=15)


def jobs_to_sweep(*, limit: int = 500) -> list[int]:
    """Jobs left in ``new`` or in a lapsed ``submitting``: saved while the broker or a
    worker was down, or abandoned by a worker that died mid-submission."""
    now = timezone.now()
    quiet_since = now - SWEEP_AFTER
    stuck = Job.objects.filter(
        Q(state=JobState.NEW, created_at__lt=quiet_since)
        | (
            Q(state=JobState.SUBMITTING, updated_at__lt=quiet_since)
            & (Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        )
    ).order_by("id")
    return list(stuck.values_list("id", flat=True)[:limit])


def unfinished_tasks_of(
    user: User, *, project: Project, cluster: Cluster, excluding: int | None = None
) -> int:
    """The user's jobs of the project on the cluster that are not finished, each array task
    counted (as Slurm's MaxSubmitJobs counts them); ``excluding`` a job by its id."""
    jobs = Job.objects.filter(
        owner=user, project=project, cluster=cluster, state__in=UNFINISHED_STATES
    )
    if excluding is not None:
        jobs = jobs.exclude(pk=excluding)
    return jobs.aggregate(tasks=Sum("array_tasks"))["tasks"] or 0


# Jobs whose GPU-hours bought no result: they failed (out of memory too), were
# cancelled, or ran out of time.
UNSUCCESSFUL_STATES = (
    JobState.FAILED,
    JobState.OUT_OF_MEMORY,
    JobState.CANCELLED,
    JobState.TIMEOUT,
)
_UNSUCCESSFUL_SLURM_STATES = sorted(
    str(state) for state in SlurmJobState if PORTAL_VALUE_OF[state] in UNSUCCESSFUL_STATES
)


def unsuccessful_charges(allocation: Allocation) -> tuple[int, int]:
    """GPU-seconds charged, and how many Slurm jobs (array tasks each) they were, to the
    allocation's account on its cluster for jobs that ended failed, cancelled or timed
    out within its period (local days, as charges find their allocation); work outside
    the portal included, as it is charged too."""

    def midnight(day: dt.date) -> dt.datetime:
        return timezone.make_aware(dt.datetime.combine(day, dt.time()))

    totals = AccountingRecord.objects.filter(
        cluster_id=allocation.cluster_id,
        account=allocation.project.slurm_account,
        state__in=_UNSUCCESSFUL_SLURM_STATES,
        ended_at__gte=midnight(allocation.starts_on),
        ended_at__lt=midnight(allocation.ends_on),
        charged_gpu_seconds__gt=0,
    ).aggregate(gpu_seconds=Sum("charged_gpu_seconds"), jobs=Count("id"))
    return totals["gpu_seconds"] or 0, totals["jobs"]
