"""Submitting a saved job to Slurm exactly once (DESIGN "Submission, exactly once").

A worker claims the job by a conditional update (``new`` → ``submitting``, or a
``submitting`` job whose claim has lapsed). Only a first attempt on a fresh job
submits straight away; any later one may follow an attempt that reached Slurm (the
worker died after sbatch, sbatch timed out), and so may a first one on a job saved
long ago (a database restored from before its submission), so it looks the job's
token up first and submits only if Slurm has no job with it.
"""

import contextlib
import datetime as dt
import logging

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone
from django.utils.translation import gettext as _
from redis.exceptions import RedisError

from accounts import ledger
from accounts.models import AdoptedAccount
from accounts.posix import posix_login_refusal
from accounts.reconcile import NotThePortalsAccount, account_check
from clusters.models import Cluster
from clusters.slurm import (
    SlurmClient,
    SlurmError,
    SlurmRejected,
    SlurmUnavailable,
    client_for,
    shared_client_for,
)
from clusters.slurm.types import SubmitRequest
from jobs import dispatch, scripts, specs
from jobs.actions import CANCEL
from jobs.errors import JobInvalid
from jobs.metrics import submission_observed
from jobs.models import Job, JobEvent
from jobs.requests import DEPENDENCY_NEVER_OK, PreparedJob, home_of, paths_refusal
from jobs.selectors import SWEEP_AFTER
from jobs.states import JobState
from jobs.tokens import CLOCK_SLACK, comment_for

logger = logging.getLogger(__name__)


class DependencyNotReady(Exception):
    """A job this one depends on is not in Slurm yet: try again shortly."""


class ClaimedElsewhere(Exception):
    """Another attempt holds the job's claim (or held it when its worker died): try again
    when the claim lapses, then look the token up."""

    def __init__(self, retry_in_s: float) -> None:
        super().__init__(f"claimed by another attempt for {retry_in_s:.0f} s more")
        self.retry_in_s = retry_in_s


# After one submission finds the cluster unreachable, the others wait this long
# instead of each spending Slurm's ~9 s connect timeout on the same answer.
UNREACHABLE_PAUSE_S = 5


def _unreachable_key(cluster_id: int) -> str:
    return f"jobs:unreachable:{cluster_id}"


# A pause is an optimisation kept in the cache (Redis): when Redis is down a job has
# already been claimed, and failing on it would leave the job waiting for its claim to
# lapse, so a cache that does not answer means "no pause".
def paused(key: str) -> str | None:
    """Why asking Slurm is paused under ``key``; None when it is not."""
    try:
        return cache.get(key)
    except RedisError:
        return None


def pause(key: str, reason: str, *, seconds: int) -> None:
    with contextlib.suppress(RedisError):
        cache.add(key, reason, timeout=seconds)


# How long a worker believes that an account is the portal's before asking Slurm again:
# without it each submission would cost a sacctmgr call. An account made by hand is
# asked about every time, so adopting it takes effect at once.
PORTALS_ACCOUNT_TRUSTED_S = 300


def foreign_account_refusal(*, client: SlurmClient, cluster: Cluster, account: str) -> str | None:
    """Why no job may be submitted or estimated under ``account`` on ``cluster`` — it
    exists in Slurm, the portal did not create it and nobody adopted it there: someone
    else's budget, which the reconciler leaves alone (``accounts.reconcile``) — or None.
    SlurmError when Slurm cannot say."""
    key = f"jobs:portals-account:{cluster.pk}:{account}"
    if paused(key):
        return None
    adopted = AdoptedAccount.objects.filter(cluster=cluster, account=account).exists()
    try:
        if account_check(client=client, cluster=cluster, account=account, adopted=adopted):
            pause(key, "the portal's", seconds=PORTALS_ACCOUNT_TRUSTED_S)
    except NotThePortalsAccount:
        return _(
            "The project's Slurm account %(account)s on %(cluster)s was made outside the "
            "portal and nobody adopted it: the portal submits no jobs under someone else's "
            "account. Ask an allocation manager to adopt it or to bind the project to a "
            "new account."
        ) % {"account": account, "cluster": cluster.name}
    return None


# How long estimates skip asking Slurm for a start time after it did not answer one.
ESTIMATE_PAUSE_S = 30


def estimates_paused_key(cluster_id: int) -> str:
    return f"jobs:no-estimate:{cluster_id}"


def start_estimate(
    *, cluster_id: int, request: SubmitRequest, timeout_s: float
) -> dt.datetime | None:
    """Slurm's expected start of ``request`` (``sbatch --test-only`` as its user), asked in
    a worker for the web tier's estimate; None when Slurm gives none in ``timeout_s``
    (then estimates pause a while: each one that waits holds a web worker). JobInvalid
    when the job could never be submitted under its account (``foreign_account_refusal``)."""
    if refusal := posix_login_refusal(request.user):
        logger.info("no start estimate: %s", refusal)
        return None
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is None:
        return None
    timeout_s = min(timeout_s, settings.ESTIMATE_TIMEOUT_S)
    try:
        client = client_for(cluster, timeout_s=timeout_s)
        if refused := foreign_account_refusal(
            client=client, cluster=cluster, account=request.account
        ):
            raise JobInvalid.one("project", refused)
        return client.estimate_start(request).starts_at
    except SlurmUnavailable as error:
        pause(estimates_paused_key(cluster_id), str(error), seconds=ESTIMATE_PAUSE_S)
        logger.info("no start estimate from %s: %s", cluster, error)
    except SlurmError as error:
        logger.info("no start estimate from %s: %s", cluster, error)
    return None


def _environment(posix_user: str, spec: specs.JobSpec) -> dict[str, str]:
    # The job gets this and nothing else of the worker's environment (--export=NONE
    # semantics): no SLURM_*/SBATCH_* of the worker, no secrets.
    return {
        "HOME": home_of(posix_user),
        "USER": posix_user,
        "LOGNAME": posix_user,
        "PATH": settings.JOB_DEFAULT_PATH,
        **spec.environment,
    }


def submit_request(*, spec: specs.JobSpec, posix_user: str, script: str) -> SubmitRequest:
    return SubmitRequest(
        user=posix_user,
        script=script,
        account=spec.account,
        partition=spec.partition,
        name=spec.name,
        time_limit_minutes=spec.time_limit_minutes,
        working_directory=spec.working_directory,
        stdout_path=spec.output_path,
        stderr_path=spec.error_path,
        nodes=spec.nodes,
        gpus_per_node=spec.gpus_per_node,
        cpus_per_gpu=spec.cpus_per_gpu,
        mem_per_gpu_mb=spec.mem_per_gpu_gb * 1024 if spec.mem_per_gpu_gb else None,
        environment=_environment(posix_user, spec),
        array=spec.array or None,
        after_ok=spec.after_ok,
        comment=comment_for(spec.submit_token),
        requeue=spec.requeue,
    )


def submit_request_for(prepared: PreparedJob) -> SubmitRequest:
    return submit_request(
        spec=prepared.spec, posix_user=prepared.posix_user, script=prepared.rendered_script
    )


def _after_ok(job: Job) -> tuple[int, ...]:
    """Slurm ids of the dependencies still to finish; raises when one can never succeed."""
    ids: list[int] = []
    if not getattr(job, "has_dependencies", True):
        return ()  # no dependencies: no query
    for dependency in job.depends_on.all():
        if dependency.state in DEPENDENCY_NEVER_OK:
            raise SlurmRejected(
                f"Job #{dependency.pk}, which this job depends on, ended {dependency.state}."
            )
        if dependency.state == JobState.COMPLETED:
            continue  # satisfied; Slurm may already have forgotten it
        if dependency.slurm_job_id is None:
            raise DependencyNotReady(f"job #{dependency.pk} is not in Slurm yet")
        ids.append(dependency.slurm_job_id)
    return tuple(sorted(ids))


def spec_of(job: Job, *, after_ok: tuple[int, ...] = ()) -> specs.JobSpec:
    return specs.JobSpec(
        name=job.name,
        account=job.project.slurm_account,
        partition=job.partition.name,
        nodes=job.nodes,
        gpus_per_node=job.gpus_per_node,
        cpus_per_gpu=job.cpus_per_gpu,
        mem_per_gpu_gb=job.mem_per_gpu_gb,
        time_limit_minutes=job.time_limit_minutes,
        working_directory=job.working_directory,
        output_path=job.output_path,
        error_path=job.error_path,
        environment=dict(job.environment),
        array=job.array,
        after_ok=after_ok,
        script=job.script,
        submit_token=str(job.submit_token),
        requeue=job.requeue,
    )


def _claim(job_id: int) -> Job | None:
    now = timezone.now()
    lapsed_claim = Q(claimed_until__isnull=True) | Q(claimed_until__lt=now)
    lapsed = Q(state=JobState.SUBMITTING) & lapsed_claim
    with transaction.atomic():
        claimed = (
            Job.objects.filter(Q(pk=job_id) & (Q(state=JobState.NEW) | lapsed))
            .filter(slurm_job_id__isnull=True)
            .update(
                state=JobState.SUBMITTING,
                claimed_until=now + dt.timedelta(seconds=settings.JOB_SUBMIT_CLAIM_S),
                submit_attempts=F("submit_attempts") + 1,
            )
        )
        job = (
            Job.objects.select_related("cluster", "project", "partition", "owner")
            .annotate(
                has_dependencies=Exists(
                    Job.depends_on.through.objects.filter(from_job=OuterRef("pk"))
                )
            )
            .get(pk=job_id)
            if claimed
            else None
        )
        if job is not None and job.submit_attempts == 1:
            JobEvent.objects.create(job=job, at=now, state=JobState.SUBMITTING)
    if job is None:
        lease = (
            Job.objects.filter(pk=job_id, state=JobState.SUBMITTING, slurm_job_id__isnull=True)
            .values_list("claimed_until", flat=True)
            .first()
        )
        if lease is not None:
            raise ClaimedElsewhere(max((lease - now).total_seconds(), 0) + 1)
        return None
    return job


def _unclaim(job: Job, *, reason: str) -> None:
    """Let the next attempt claim the job at once; it will look the token up first."""
    Job.objects.filter(pk=job.pk, state=JobState.SUBMITTING).update(
        claimed_until=None, reason=reason[:200]
    )


def _record_submitted(job: Job, slurm_job_id: int, *, rendered_script: str) -> Job:
    now = timezone.now()
    recorded = {
        "state": JobState.PENDING,
        "slurm_job_id": slurm_job_id,
        "rendered_script": rendered_script,
        "submitted_at": now,
        "claimed_until": None,
        "reason": "",
    }
    with transaction.atomic():
        submitting = Job.objects.filter(pk=job.pk, state=JobState.SUBMITTING)
        # Usually nobody asked to cancel it while sbatch ran: then the row is what this
        # wrote, and there is nothing to read back.
        plain = submitting.filter(cancel_requested_at__isnull=True).update(**recorded)
        recorded_here = bool(plain or submitting.update(**recorded))
        if recorded_here:
            JobEvent.objects.create(
                job=job, at=now, state=JobState.PENDING, detail=f"Slurm job {slurm_job_id}"
            )
    logger.info("job %s submitted: Slurm job %s on %s", job.pk, slurm_job_id, job.cluster.name)
    if recorded_here:
        submission_observed(cluster=job.cluster.name, created_at=job.created_at, at=now)
    if plain:
        for name, value in recorded.items():
            setattr(job, name, value)
        return job
    job.refresh_from_db(fields=["state", "slurm_job_id", "submitted_at", "cancel_requested_at"])
    if job.cancel_requested_at is not None:
        dispatch.control(job.pk, CANCEL.name)
    return job


def _record_refused(job: Job, message: str, *, state: str = JobState.SUBMIT_FAILED) -> Job:
    now = timezone.now()
    with transaction.atomic():
        updated = Job.objects.filter(pk=job.pk, state=JobState.SUBMITTING).update(
            state=state,
            submit_error=message,
            ended_at=now,
            claimed_until=None,
            reason="",
        )
        if updated:
            ledger.ledger_release(reference=job.hold_reference)
            JobEvent.objects.create(job=job, at=now, state=state, detail=message[:500])
    job.refresh_from_db()
    return job


def may_be_in_slurm(job: Job) -> bool:
    """Whether an earlier attempt may have reached Slurm, so this one looks the token up
    before it submits: any attempt but the first, and a first one on a job left ``new``
    as long as the sweeper waits (``SWEEP_AFTER``). Such a job's task was lost (saved
    while the broker was down) or waited behind others — or the database was restored
    from a dump taken before a worker submitted the job, and forgot that submission
    (docs/RELIABILITY.md, "Backup, restore and upgrade"). A job taken from the queue
    at once submits straight away."""
    if job.submit_attempts > 1:
        return True
    return job.created_at < timezone.now() - SWEEP_AFTER


def job_submit(*, job_id: int) -> Job | None:
    """Submit the job if this attempt wins the claim; None when there is nothing to do.

    Raises SlurmUnavailable, DependencyNotReady or ClaimedElsewhere for the task to
    retry later;
    Slurm's refusal is final: ``submit_failed`` with Slurm's message, hold released.
    """
    job = _claim(job_id)
    if job is None:
        return None
    client = shared_client_for(job.cluster)
    posix_user = job.owner.posix_username
    try:
        if reason := paused(_unreachable_key(job.cluster_id)):
            raise SlurmUnavailable(reason)
        if not posix_user:
            raise SlurmRejected(f"{job.owner} has no Unix login any more; ask an administrator.")
        if may_be_in_slurm(job):
            # An earlier attempt may have reached Slurm: never submit a second copy. The
            # token is anyone's to copy, so only the owner's job under the project's
            # account, submitted since this one was saved, counts (jobs/tokens.py).
            found = client.find_by_comment(
                job.comment,
                user=posix_user,
                account=job.project.slurm_account,
                since=job.created_at - CLOCK_SLACK,
            )
            if found:
                logger.info("job %s was already in Slurm as %s", job.pk, found[0])
                return _record_submitted(job, found[0], rendered_script=job.rendered_script)
        if job.cancel_requested_at is not None:
            return _record_refused(
                job, "Cancelled before it reached Slurm.", state=JobState.CANCELLED
            )
        # Checked here, on the host that submits (and where the cluster's tools run),
        # with its user database: whatever the web tier or the database say, a job never
        # runs as root or a system account.
        if login_refused := posix_login_refusal(posix_user, job.cluster):
            raise SlurmRejected(login_refused)
        # And where it works and writes, seen from here: the web tier could not look
        # inside the owner's home, and a symlink may have been put in since.
        if path_refused := paths_refusal(
            posix_user=posix_user,
            working_directory=job.working_directory,
            output_path=job.output_path,
            error_path=job.error_path,
        ):
            raise SlurmRejected(path_refused)
        if account_refused := foreign_account_refusal(
            client=client, cluster=job.cluster, account=job.project.slurm_account
        ):
            raise SlurmRejected(account_refused)
        after_ok = _after_ok(job)
        spec = spec_of(job, after_ok=after_ok)
        rendered = scripts.render_script(spec) if after_ok else job.rendered_script
        slurm_job_id = client.submit(
            submit_request(spec=spec, posix_user=posix_user, script=rendered)
        )
    except SlurmRejected as refusal:
        return _record_refused(job, refusal.message)
    except SlurmUnavailable as error:
        pause(_unreachable_key(job.cluster_id), str(error), seconds=UNREACHABLE_PAUSE_S)
        _unclaim(job, reason=f"Slurm is not answering; retrying: {error}")
        raise
    except DependencyNotReady as error:
        _unclaim(job, reason=f"Waiting for {error}")
        raise
    return _record_submitted(job, slurm_job_id, rendered_script=rendered)
