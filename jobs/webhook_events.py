"""What a webhook hears when a portal job ends (accounts.webhooks sends it)."""

from django.urls import reverse

from accounts.models import Webhook
from accounts.webhooks import webhook_event
from jobs.models import Job


def job_ended(job_id: int) -> int:
    """Record the deliveries of a job's end, in the caller's transaction (the ingest's,
    which finishes the job once): the job's owner's hooks and its project's."""
    job = Job.objects.select_related("owner", "project", "cluster").get(pk=job_id)
    hours = (job.used_gpu_seconds or 0) / 3600
    elapsed = (
        int((job.ended_at - job.started_at).total_seconds())
        if job.ended_at and job.started_at
        else None
    )
    payload = {
        "job": job.pk,
        "slurm_job_id": job.slurm_job_id,
        "name": job.name,
        "owner": job.owner.username,
        "project": job.project.slug,
        "cluster": job.cluster.name,
        "state": job.state,
        "exit_code": job.exit_code,
        "elapsed_s": elapsed,
        "gpu_hours": round(hours, 3),
        "started_at": job.started_at.isoformat() if job.started_at else None,
        "ended_at": job.ended_at.isoformat() if job.ended_at else None,
        "path": reverse("jobs:detail", args=[job.pk]),
    }
    text = (
        f"Job {job.name} ({job.slurm_job_id}) of {job.owner.username} in {job.project.slug} "
        f"ended {job.state}, exit code {job.exit_code}, {hours:.2f} GPU-hours."
    )
    return webhook_event(
        Webhook.Event.JOB_ENDED,
        project=job.project_id,
        user=job.owner_id,
        payload=payload,
        text=text,
    )
