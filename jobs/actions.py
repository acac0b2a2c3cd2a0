"""Cancel, hold and release, each defined once: what is audited when a project's lead
acts on a member's job, what someone who may not is told, what a page says once asked.
The worker's Slurm call is the ``SlurmClient`` method of the action's name."""

from dataclasses import dataclass

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from audit.models import AuditEvent


@dataclass(frozen=True)
class JobAction:
    name: str  # in the pages' and the API's paths, and the SlurmClient method
    audit: str  # an AuditEvent.Action
    refusal: Promise  # to a user who may not
    asked: Promise  # a page's note once asked; %(id)s is the job's number


CANCEL = JobAction(
    "cancel",
    AuditEvent.Action.JOB_CANCEL,
    _("Only the job's owner or the project's PI can cancel it."),
    _("Cancelling job #%(id)s."),
)
HOLD = JobAction(
    "hold",
    AuditEvent.Action.JOB_HOLD,
    _("Only the job's owner or the project's PI can hold it."),
    _("Holding job #%(id)s."),
)
RELEASE = JobAction(
    "release",
    AuditEvent.Action.JOB_RELEASE,
    _("Only the job's owner or the project's PI can release it."),
    _("Releasing job #%(id)s."),
)

ACTIONS = {action.name: action for action in (CANCEL, HOLD, RELEASE)}
