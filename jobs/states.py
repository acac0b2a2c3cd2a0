"""The portal's job states and the one mapping from Slurm's states to them.

Success and failure are never collapsed: each way a job can end is its own
terminal state. A job that vanished from the queue is looked up in
accounting; "not found" never means "completed".
"""

from django.db import models
from django.utils.translation import gettext_lazy as _

from clusters.slurm.states import SlurmJobState


class JobState(models.TextChoices):
    NEW = "new", _("New")
    SUBMITTING = "submitting", _("Submitting")
    PENDING = "pending", _("Pending")
    RUNNING = "running", _("Running")
    SUSPENDED = "suspended", _("Suspended")
    COMPLETED = "completed", _("Completed")
    FAILED = "failed", _("Failed")
    CANCELLED = "cancelled", _("Cancelled")
    TIMEOUT = "timeout", _("Timed out")
    OUT_OF_MEMORY = "out_of_memory", _("Out of memory")
    NODE_FAIL = "node_fail", _("Node failure")
    PREEMPTED = "preempted", _("Preempted")
    SUBMIT_FAILED = "submit_failed", _("Submission refused")


TERMINAL_STATES = frozenset(
    {
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.CANCELLED,
        JobState.TIMEOUT,
        JobState.OUT_OF_MEMORY,
        JobState.NODE_FAIL,
        JobState.PREEMPTED,
        JobState.SUBMIT_FAILED,
    }
)

_S = SlurmJobState
SLURM_TO_PORTAL: dict[SlurmJobState, JobState] = {
    # Waiting to run; a requeued job goes back to pending.
    _S.PENDING: JobState.PENDING,
    _S.CONFIGURING: JobState.PENDING,
    _S.REQUEUED: JobState.PENDING,
    _S.REQUEUE_FED: JobState.PENDING,
    _S.REQUEUE_HOLD: JobState.PENDING,
    _S.RESV_DEL_HOLD: JobState.PENDING,
    # Holding resources; COMPLETING has no exit status yet, so it is not an end.
    _S.RUNNING: JobState.RUNNING,
    _S.COMPLETING: JobState.RUNNING,
    _S.RESIZING: JobState.RUNNING,
    _S.SIGNALING: JobState.RUNNING,
    _S.STAGE_OUT: JobState.RUNNING,
    _S.SUSPENDED: JobState.SUSPENDED,
    _S.STOPPED: JobState.SUSPENDED,
    # Ends.
    _S.COMPLETED: JobState.COMPLETED,
    _S.FAILED: JobState.FAILED,
    _S.SPECIAL_EXIT: JobState.FAILED,
    _S.CANCELLED: JobState.CANCELLED,
    _S.REVOKED: JobState.CANCELLED,  # a federation sibling ran it instead
    _S.TIMEOUT: JobState.TIMEOUT,
    _S.DEADLINE: JobState.TIMEOUT,
    _S.OUT_OF_MEMORY: JobState.OUT_OF_MEMORY,
    _S.NODE_FAIL: JobState.NODE_FAIL,
    _S.BOOT_FAIL: JobState.NODE_FAIL,
    _S.PREEMPTED: JobState.PREEMPTED,
}


# The states a job is in while Slurm has it queued or running.
IN_SLURM = (JobState.PENDING, JobState.RUNNING, JobState.SUSPENDED)
# The same maps as plain strings, to compare with the values of rows read in bulk.
TERMINAL_VALUES = frozenset(str(state) for state in TERMINAL_STATES)
PORTAL_VALUE_OF = {slurm: str(portal) for slurm, portal in SLURM_TO_PORTAL.items()}


def portal_state(slurm_state: SlurmJobState) -> JobState:
    return SLURM_TO_PORTAL[slurm_state]
