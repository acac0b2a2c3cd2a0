"""Cancel, hold and release in Slurm: what the tasks behind the users' buttons do.

The queue sync sees the resulting state change; these only ask Slurm, as the
job's owner, and record the answer on the job's timeline.
"""

from django.utils import timezone

from clusters.slurm import NotFound, SlurmRejected, client_for
from jobs.actions import ACTIONS
from jobs.models import Job, JobEvent
from jobs.states import TERMINAL_STATES


def _in_slurm(job_id: int) -> Job | None:
    job = Job.objects.select_related("cluster", "owner").get(pk=job_id)
    if job.slurm_job_id is None or job.state in TERMINAL_STATES:
        # Not in Slurm yet: a requested cancel is carried out by the submission itself.
        return None
    return job


def _note(job: Job, detail: str) -> None:
    JobEvent.objects.create(job=job, at=timezone.now(), state=job.state, detail=detail[:500])


def job_control(*, job_id: int, action: str) -> None:
    """Carry out ``cancel``, ``hold`` or ``release``; SlurmUnavailable is left to the task
    to retry, Slurm's refusal is put on the job's timeline."""
    job = _in_slurm(job_id)
    if job is None:
        return
    if action not in ACTIONS:
        raise ValueError(f"no job action {action!r}")
    call = getattr(client_for(job.cluster), action)  # SlurmClient.cancel, .hold, .release
    assert job.slurm_job_id is not None and job.owner.posix_username
    try:
        call(job.slurm_job_id, user=job.owner.posix_username)
    except NotFound:
        _note(job, f"{action}: Slurm no longer knows job {job.slurm_job_id}")
    except SlurmRejected as refusal:
        _note(job, f"{action} refused by Slurm: {refusal.message}")
    else:
        _note(job, f"{action} sent to Slurm")
