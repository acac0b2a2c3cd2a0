"""Thin Celery wrappers over the job services; every one is safe to run twice."""

import dataclasses
import logging

from celery import shared_task
from django.conf import settings
from django.utils import translation

from audit.log_context import log_context_bound
from clusters.locks import one_run_per_cluster
from clusters.models import Cluster
from clusters.selectors import clusters_enabled
from clusters.slurm import SlurmUnavailable
from clusters.slurm.types import SubmitRequest
from jobs import dispatch
from jobs.accounting import accounting_sync
from jobs.control import job_control
from jobs.errors import JobInvalid, OutputUnavailable
from jobs.job_mail import job_mails_send
from jobs.output import read_output_of
from jobs.queue_sync import queue_sync
from jobs.selectors import jobs_to_sweep
from jobs.submission import (
    ClaimedElsewhere,
    DependencyNotReady,
    job_submit,
    start_estimate,
)

logger = logging.getLogger(__name__)


@shared_task(
    bind=True,
    autoretry_for=(SlurmUnavailable, DependencyNotReady),
    retry_backoff=2,
    retry_backoff_max=settings.SUBMIT_RETRY_MAX_S,
    retry_jitter=True,
    max_retries=20,
)
def job_submit_task(self, job_id: int) -> None:
    # After the last retry the job stays `submitting` with the reason on it; the
    # sweeper enqueues it again, so it is submitted once Slurm answers.
    with log_context_bound(job_id=job_id):
        try:
            job_submit(job_id=job_id)
        except ClaimedElsewhere as claimed:
            raise self.retry(countdown=claimed.retry_in_s, max_retries=5) from None


@shared_task(autoretry_for=(SlurmUnavailable,), retry_backoff=2, max_retries=10)
def job_control_task(job_id: int, action: str) -> None:
    with log_context_bound(job_id=job_id):
        job_control(job_id=job_id, action=action)


@shared_task
def submissions_sweep_task() -> None:
    stuck = jobs_to_sweep()
    for job_id in stuck:
        job_submit_task.delay(job_id)
    if stuck:
        logger.info("re-enqueued %d jobs waiting to be submitted", len(stuck))


@shared_task(soft_time_limit=60)
def queue_sync_task(cluster_id: int) -> None:
    cluster = Cluster.objects.get(pk=cluster_id)
    with one_run_per_cluster("queue-sync", cluster_id) as acquired:
        if not acquired:
            return
        try:
            result = queue_sync(cluster=cluster)
        except SlurmUnavailable as error:
            logger.warning("queue sync of %s: %s", cluster.name, error)
            return
    if result.vanished:
        # Jobs that left the queue end in accounting: read it now, not at the next beat.
        accounting_ingest_task.delay(cluster_id)


@shared_task
def queue_sync_all_task() -> None:
    for cluster_id in clusters_enabled().values_list("id", flat=True):
        queue_sync_task.delay(cluster_id)


@shared_task(soft_time_limit=240)
def accounting_ingest_task(cluster_id: int) -> None:
    cluster = Cluster.objects.get(pk=cluster_id)
    with one_run_per_cluster("accounting", cluster_id) as acquired:
        if not acquired:
            return
        try:
            result = accounting_sync(cluster=cluster)
        except SlurmUnavailable as error:
            logger.warning("accounting ingest of %s: %s", cluster.name, error)
            return
    if result.finished_jobs:
        # Mail the ends once the digest window has passed (beat sends them too).
        job_mails_send_task.apply_async(countdown=settings.JOB_MAIL_DIGEST_S + 1)
    if result.charged or result.finished_jobs:
        logger.info(
            "accounting %s: %d records, %d charged, %d jobs finished",
            cluster.name, result.records, result.charged, result.finished_jobs,
        )  # fmt: skip


@shared_task
def job_mails_send_task() -> None:
    job_mails_send()


@shared_task
def accounting_ingest_all_task() -> None:
    for cluster_id in clusters_enabled().values_list("id", flat=True):
        accounting_ingest_task.delay(cluster_id)


# What the web tier waits on (jobs/worker_calls.py, through jobs/dispatch.py). No late
# acknowledgement: after a lost worker the question is not asked again, its asker has
# long given up.


@shared_task(acks_late=False)
def job_start_estimate_task(
    *,
    cluster_id: int,
    request: dict,
    timeout_s: float,
    reply_to: str,
    language: str | None = None,
) -> None:
    submit = SubmitRequest(**{**request, "after_ok": tuple(request["after_ok"])})
    with translation.override(language):
        try:
            starts_at = start_estimate(cluster_id=cluster_id, request=submit, timeout_s=timeout_s)
        except JobInvalid as refusal:
            dispatch.reply(reply_to, {"refused": refusal.fields})
            return
    dispatch.reply(reply_to, {"starts_at": starts_at.isoformat() if starts_at else None})


@shared_task(acks_late=False)
def job_output_task(
    *, posix_user: str, path: str, tail_lines: int | None, language: str | None, reply_to: str
) -> None:
    with translation.override(language):
        try:
            answer = dataclasses.asdict(read_output_of(posix_user, path, tail_lines=tail_lines))
        except OutputUnavailable as why:
            answer = {"unavailable": str(why)}
    dispatch.reply(reply_to, answer)
