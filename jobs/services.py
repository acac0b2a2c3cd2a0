"""Every write a user makes to jobs: create, estimate (writes nothing), cancel, hold, release.

Submission to Slurm and the sync back from it live in ``jobs.submission`` and
``jobs.queue_sync`` and ``jobs.accounting``; everything that changes Slurm runs in a Celery task.
"""

import datetime as dt
import logging
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts import ledger
from accounts.caps import member_remaining_gpu_seconds
from accounts.errors import NoActiveAllocation, NotAllowed, QuotaExceeded
from accounts.models import Project, User
from accounts.permissions import is_allocation_manager, is_lead
from accounts.selectors import active_allocation
from audit.log_context import log_context_bound
from audit.models import AuditEvent
from audit.services import audit_record
from clusters.selectors import cluster_status
from clusters.slurm import SlurmUnavailable
from jobs import dispatch
from jobs.actions import CANCEL, HOLD, RELEASE, JobAction
from jobs.errors import JobInvalid
from jobs.internals import remember_related
from jobs.models import Job, JobEvent, JobTemplate
from jobs.pricing import Price
from jobs.requests import (
    TEMPLATE_DEFAULT_FIELDS,
    JobRequest,
    PreparedJob,
    job_prepare,
    requeue_of,
    submit_limit_check,
)
from jobs.states import TERMINAL_STATES, JobState
from jobs.submission import (
    ESTIMATE_PAUSE_S,
    estimates_paused_key,
    pause,
    paused,
    submit_request_for,
)
from jobs.worker_calls import expected_start as expected_start_from_worker

logger = logging.getLogger(__name__)


def job_event_add(
    *, job: Job, state: str, detail: str = "", at: dt.datetime | None = None
) -> JobEvent:
    # A detail is stored and read by everyone who sees the job (the owner, the PI), so it
    # stays in English like Slurm's own messages, not in the language of whoever caused it.
    return JobEvent.objects.create(
        job=job, state=state, detail=detail[:500], at=at or timezone.now()
    )


def _allocation_for(prepared: PreparedJob):
    try:
        return active_allocation(project=prepared.project, cluster=prepared.cluster)
    except NoActiveAllocation:
        raise JobInvalid.one(
            "project",
            _("%(project)s has no active GPU-hour allocation on %(cluster)s; a PI can request one.")
            % {"project": prepared.project, "cluster": prepared.cluster},
        ) from None


def job_create(*, user: User, request: JobRequest, idempotency_key: str = "") -> Job:
    """Validate, render and price the request, hold its GPU-hours and save it as ``new`` —
    one transaction — then enqueue its submission once that commits.

    With an ``idempotency_key`` a repeat of the same request returns the first job.
    """
    return job_create_or_find(user=user, request=request, idempotency_key=idempotency_key)[0]


def job_create_or_find(
    *, user: User, request: JobRequest, idempotency_key: str = ""
) -> tuple[Job, bool]:
    """``job_create``, saying whether the job is one made earlier under the key (True) —
    by a repeat, or by a request with the same key that was saved first while this one
    was on its way — rather than made now (False)."""
    if idempotency_key and (found := _by_idempotency_key(user, idempotency_key)):
        return found, True
    token = uuid.uuid4()
    prepared = job_prepare(user=user, request=request, submit_token=str(token))
    allocation = _allocation_for(prepared)
    spec = prepared.spec
    try:
        with transaction.atomic():
            job = Job.objects.create(
                owner=user,
                project=prepared.project,
                cluster=prepared.cluster,
                partition=prepared.partition,
                template=prepared.template,
                name=spec.name,
                nodes=spec.nodes,
                gpus_per_node=spec.gpus_per_node,
                cpus_per_gpu=spec.cpus_per_gpu,
                mem_per_gpu_gb=spec.mem_per_gpu_gb,
                time_limit_minutes=spec.time_limit_minutes,
                working_directory=spec.working_directory,
                output_path=spec.output_path,
                error_path=spec.error_path,
                environment=spec.environment,
                array=spec.array,
                array_tasks=prepared.array_tasks,
                requeue=spec.requeue,
                script=spec.script,
                rendered_script=prepared.rendered_script,
                submit_token=token,
                idempotency_key=idempotency_key,
                billing_weight=prepared.billing_weight,
                cpu_hour_rate=prepared.cpu_hour_rate,
                requested_gpu_seconds=prepared.requested_gpu_seconds,
            )
            if prepared.dependencies:
                job.depends_on.set(prepared.dependencies)
            ledger.ledger_hold(
                allocation=allocation,
                reference=job.hold_reference,
                gpu_seconds=prepared.requested_gpu_seconds,
                user=user,
                partition=prepared.partition,
            )
            # Counted under the allocation's row lock that the hold has just taken: a
            # creation racing this one waits for it to commit, then counts this job too.
            submit_limit_check(prepared, excluding=job.pk)
            created = job_event_add(
                job=job,
                state=JobState.NEW,
                detail=f"{job.requested_gpu_hours:,.2f} GPU-hours held",
                at=job.created_at,
            )
            transaction.on_commit(lambda: dispatch.submit(job.pk))
    except IntegrityError:
        # The same idempotency key raced in twice: the other request saved the job (this
        # one's INSERT waited for it to commit), and this one's hold was rolled back.
        if idempotency_key and (found := _by_idempotency_key(user, idempotency_key)):
            return found, True
        raise
    with log_context_bound(job_id=job.pk):
        logger.info(
            "job %s saved: %s on %s, %.2f GPU-hours held",
            job.pk, prepared.project.slug, prepared.cluster.name, job.requested_gpu_hours,
        )  # fmt: skip
    remember_related(
        job,
        events=[created],
        # In Job's own order, as a query of them would give them.
        depends_on=sorted(prepared.dependencies, key=lambda d: (d.created_at, d.pk), reverse=True),
    )
    return job, False


def _by_idempotency_key(user: User, key: str) -> Job | None:
    return Job.objects.filter(owner=user, idempotency_key=key).first()


@dataclass(frozen=True)
class Estimate:
    requested_gpu_hours: float
    available_gpu_hours: float
    fits: bool
    expected_start: dt.datetime | None
    rendered_script: str
    # Why the cluster is not answering, as the workers' last probe found it; "" when it is.
    cluster_unreachable: str = ""
    # The cost's two parts: GPU-hours at the billing weight plus CPU-hours at the CPU rate.
    price: Price | None = None
    # What the caller's cap on the allocation leaves them (accounts.caps); None: no cap.
    member_remaining_gpu_hours: float | None = None

    @property
    def gpu_hours(self) -> float:
        return self.price.gpu_seconds / 3600 if self.price else 0.0

    @property
    def cpu_hours(self) -> float:
        return self.price.cpu_seconds / 3600 if self.price else 0.0

    @property
    def gpu_part_gpu_hours(self) -> float:
        return float(self.price.gpu_part) / 3600 if self.price else 0.0

    @property
    def cpu_part_gpu_hours(self) -> float:
        return float(self.price.cpu_part) / 3600 if self.price else 0.0


def job_estimate(*, user: User, request: JobRequest) -> Estimate:
    """The same checks and cost as ``job_create``, saving nothing; Slurm's expected start
    when a worker gets it within ``PORTAL_ESTIMATE_TIMEOUT_S`` (the web tier never asks
    Slurm itself). A cluster the workers' last probe found down is not asked at all."""
    prepared = job_prepare(user=user, request=request, submit_token="estimate")  # noqa: S106
    submit_limit_check(prepared)
    allocation = _allocation_for(prepared)
    expected_start = None
    no_estimates = estimates_paused_key(prepared.cluster.pk)
    status = cluster_status(prepared.cluster)
    unreachable = "" if status["ok"] else status["error"] or _("not answering")
    try:
        if unreachable:
            raise SlurmUnavailable(unreachable)
        if reason := paused(no_estimates):
            raise SlurmUnavailable(reason)
        expected_start = expected_start_from_worker(
            cluster_id=prepared.cluster.pk,
            request=submit_request_for(prepared),
            timeout_s=settings.ESTIMATE_TIMEOUT_S,
        )
    except SlurmUnavailable as error:
        # Each estimate that waits out the deadline holds a web worker that long: after
        # one, the others go without Slurm's guess for a while.
        if not unreachable:
            pause(no_estimates, str(error), seconds=ESTIMATE_PAUSE_S)
        logger.info("no start estimate from %s: %s", prepared.cluster, error)
    available = allocation.available_gpu_seconds
    remaining = member_remaining_gpu_seconds(allocation, user)
    return Estimate(
        requested_gpu_hours=prepared.requested_gpu_seconds / 3600,
        available_gpu_hours=available / 3600,
        member_remaining_gpu_hours=None if remaining is None else remaining / 3600,
        fits=prepared.requested_gpu_seconds
        <= min(available, available if remaining is None else remaining),
        expected_start=expected_start,
        rendered_script=prepared.rendered_script,
        cluster_unreachable=unreachable,
        price=prepared.price,
    )


def can_manage(user: User, job: Job) -> bool:
    """Owners manage their jobs; the project's PI and co-PIs may too."""
    if job.owner_id == user.pk:
        return True
    return is_lead(user, job.project_id)


def _action(*, user: User, job: Job, action: JobAction) -> Job:
    if not can_manage(user, job):
        raise NotAllowed(str(action.refusal))
    if job.state in TERMINAL_STATES:
        raise JobInvalid.one(
            "__all__",
            _("Job #%(id)s has already ended (%(state)s).")
            % {"id": job.pk, "state": job.get_state_display()},
        )
    job_event_add(job=job, state=job.state, detail=f"{action.name} asked by {user.username}")
    _audit_for_owner(user=user, job=job, action=action)
    dispatch.control_on_commit(job.pk, action.name)
    return job


def _audit_for_owner(*, user: User, job: Job, action: JobAction) -> None:
    """A PI or co-PI acting on a member's job is recorded; an owner's own is not."""
    if job.owner_id == user.pk:
        return
    role = job.project.memberships.filter(user=user).values_list("role", flat=True).first()
    audit_record(
        actor=user,
        action=action.audit,
        target=job,
        on_behalf_of=job.owner,
        scope=job.project.slurm_account,
        detail={"state": job.state, "slurm_job_id": job.slurm_job_id, "as": role or ""},
    )


def job_cancel(*, user: User, job: Job) -> Job:
    """Cancel a job: one not yet in Slurm ends here, one in Slurm is scancelled by a task."""
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        if locked.state == JobState.NEW and can_manage(user, locked):
            # Not claimed by a worker yet: it never reaches Slurm.
            Job.objects.filter(pk=locked.pk).update(
                state=JobState.CANCELLED, ended_at=timezone.now()
            )
            ledger.ledger_release(reference=locked.hold_reference)
            job_event_add(job=locked, state=JobState.CANCELLED, detail=f"by {user.username}")
            _audit_for_owner(user=user, job=locked, action=CANCEL)
            locked.refresh_from_db()
            return locked
        if locked.cancel_requested_at is None:
            # A submission in flight sees this and scancels the job once it has its id.
            Job.objects.filter(pk=locked.pk).update(cancel_requested_at=timezone.now())
        return _action(user=user, job=locked, action=CANCEL)


def job_hold(*, user: User, job: Job) -> Job:
    # The state is read from the locked row, as job_cancel does: the page's copy may be
    # seconds old, and the queue sync or accounting may have moved the job on since.
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        if locked.state != JobState.PENDING:
            raise JobInvalid.one("__all__", _("Only a job pending in Slurm's queue can be held."))
        return _action(user=user, job=locked, action=HOLD)


def job_release(*, user: User, job: Job) -> Job:
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        return _action(user=user, job=locked, action=RELEASE)


def job_act(*, user: User, job: Job, action: str) -> Job:
    """Cancel, hold or release by the action's name (the pages' and the API's paths);
    KeyError for any other name."""
    service = {CANCEL.name: job_cancel, HOLD.name: job_hold, RELEASE.name: job_release}[action]
    with log_context_bound(job_id=job.pk):
        return service(user=user, job=job)


def job_template_create(
    *,
    user: User,
    name: str,
    script: str,
    defaults: dict,
    scope: str = JobTemplate.Scope.USER,
    project: Project | None = None,
    description: str = "",
) -> JobTemplate:
    """Save a job form as a template: the user's own, shared with a project they lead
    (PI or co-PI), or global (allocation managers only)."""
    job_template_check(name=name, script=script, defaults=defaults)
    owner: User | None = user
    if scope == JobTemplate.Scope.PROJECT:
        if project is None:
            raise JobInvalid.one("project", _("Choose the project to share the template with."))
        if not is_lead(user, project):
            raise NotAllowed(_("Only the project's PI and co-PIs can share templates with it."))
    elif scope == JobTemplate.Scope.GLOBAL:
        if not is_allocation_manager(user):
            raise NotAllowed(_("Only allocation managers can publish templates for everyone."))
        owner, project = None, None
    elif scope == JobTemplate.Scope.USER:
        project = None
    else:
        raise JobInvalid.one("scope", _("Choose user, project or global."))
    with transaction.atomic():
        template = JobTemplate.objects.create(
            name=name.strip()[:100],
            description=description,
            scope=scope,
            owner=owner,
            project=project,
            defaults=defaults,
            script=script,
        )
        if scope == JobTemplate.Scope.GLOBAL:
            _audit_template(user, AuditEvent.Action.TEMPLATE_CREATE, template)
    return template


def job_template_check(*, name: str, script: str, defaults: dict) -> None:
    """Raise JobInvalid when a template could not be saved with these values."""
    if not name.strip():
        raise JobInvalid.one("name", _("Give the template a name."))
    if not script.strip():
        raise JobInvalid.one("script", _("A template needs a script."))
    unknown = sorted(set(defaults) - set(TEMPLATE_DEFAULT_FIELDS))
    if unknown:
        raise JobInvalid.one(
            "defaults", _("Templates cannot set %(fields)s.") % {"fields": ", ".join(unknown)}
        )
    try:
        requeue_of(defaults)
    except JobInvalid as invalid:
        raise JobInvalid({"defaults": invalid.fields["requeue"]}) from None


def template_change_refusal(user: User, template: JobTemplate) -> str | None:
    """Why ``user`` may not change the template's script or defaults, or None when they may.

    Whose jobs run a template decides who changes it: its owner for a personal one,
    the project's PI and co-PIs for a shared one, allocation managers for a global
    one. The console gives managers no right over a researcher's template: the
    researcher's next job from it would run the manager's script as the researcher.
    """
    if template.scope == JobTemplate.Scope.GLOBAL:
        if is_allocation_manager(user):
            return None
        return _("Only allocation managers can change a template for everyone.")
    if template.scope == JobTemplate.Scope.PROJECT and template.project is not None:
        if is_lead(user, template.project):
            return None
        return _(
            "Only the project's PI and co-PIs can change a template shared with it: "
            "its members' jobs run what it says."
        )
    if template.owner_id == user.pk:
        return None
    return _(
        "This is %(owner)s's personal template: only they can change it, as their jobs "
        "run what it says. Allocation managers change global templates only."
    ) % {"owner": template.owner}


def _may_delete_template(user: User, template: JobTemplate) -> bool:
    """Allocation managers may remove any template (a deleted one runs nowhere); others
    those they may change."""
    return is_allocation_manager(user) or template_change_refusal(user, template) is None


def job_template_update(
    *,
    user: User,
    template: JobTemplate,
    name: str | None = None,
    description: str | None = None,
    defaults: dict | None = None,
    script: str | None = None,
) -> JobTemplate:
    """Change a template's name, description, defaults or script; the fields not given stay.
    Who it belongs to (scope, owner, project) is fixed when it is made."""
    if name is not None:
        name = name.strip()[:100]
    wanted = {"name": name, "description": description, "defaults": defaults, "script": script}
    with transaction.atomic():
        locked = JobTemplate.objects.select_for_update().get(pk=template.pk)
        refusal = template_change_refusal(user, locked)
        if refusal is not None:
            raise NotAllowed(refusal)
        changed = [f for f, v in wanted.items() if v is not None and v != getattr(locked, f)]
        for field in changed:
            setattr(locked, field, wanted[field])
        job_template_check(name=locked.name, script=locked.script, defaults=locked.defaults)
        if changed:
            locked.save(update_fields=[*changed, "updated_at"])
            _audit_template(user, AuditEvent.Action.TEMPLATE_UPDATE, locked, changed=changed)
    return locked


def job_template_delete(*, user: User, template: JobTemplate) -> None:
    """Delete a template; jobs made from it keep their values (and lose the link)."""
    with transaction.atomic():
        locked = JobTemplate.objects.select_for_update().filter(pk=template.pk).first()
        if locked is None:
            return  # a repeat
        if not _may_delete_template(user, locked):
            raise NotAllowed(_("Only the template's owner or an allocation manager can delete it."))
        _audit_template(user, AuditEvent.Action.TEMPLATE_DELETE, locked)
        locked.delete()


def _audit_template(user: User, action: str, template: JobTemplate, **detail: object) -> None:
    """Global templates are the managers'; anyone else's is audited when another changes it."""
    if template.scope != JobTemplate.Scope.GLOBAL and template.owner_id == user.pk:
        return
    audit_record(
        actor=user,
        action=action,
        target=template,
        on_behalf_of=template.owner,
        scope=template.project.slurm_account if template.project else "",
        detail={"name": template.name, "scope": template.scope, **detail},
    )


__all__ = [
    "Estimate",
    "JobRequest",
    "QuotaExceeded",
    "job_cancel",
    "job_create",
    "job_create_or_find",
    "job_estimate",
    "job_hold",
    "job_release",
    "job_template_create",
    "job_template_delete",
    "job_template_update",
    "template_change_refusal",
]
