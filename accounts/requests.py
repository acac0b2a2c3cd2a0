"""Allocation requests: a PI or co-PI asks, an allocation manager approves or denies.

Approval grants the hours through the ledger in the same transaction, so an
approved request always has its allocation and a repeat changes nothing.
"""

import datetime as dt

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts.errors import AlreadyDecided, NotAllowed, Refused
from accounts.ledger import allocation_grant
from accounts.models import AllocationRequest, Project, User
from accounts.permissions import is_allocation_manager, is_lead
from audit.models import AuditEvent
from audit.services import audit_record
from clusters.models import Cluster


def allocation_request_create(
    *,
    project: Project,
    cluster: Cluster,
    requested_by: User,
    gpu_hours: int,
    starts_on: dt.date,
    ends_on: dt.date,
    justification: str,
) -> AllocationRequest:
    """A PI or co-PI asks for hours; anyone else is refused."""
    if not is_lead(requested_by, project):
        raise NotAllowed(_("Only the project's PI or a co-PI can ask for GPU-hours."))
    request = AllocationRequest(
        project=project,
        cluster=cluster,
        requested_by=requested_by,
        gpu_hours=gpu_hours,
        starts_on=starts_on,
        ends_on=ends_on,
        justification=justification.strip(),
    )
    request.full_clean()
    request.save()
    return request


def _decide(request_id: int, manager: User) -> AllocationRequest:
    if not is_allocation_manager(manager):
        raise NotAllowed(_("Only an allocation manager can decide on a request."))
    # Two managers deciding at once: the second waits here for the first's lock, then
    # finds the request decided, a conflict with its state (the API's 409), not a refusal.
    request = AllocationRequest.objects.select_for_update().get(pk=request_id)
    if request.state != AllocationRequest.State.PENDING:
        raise AlreadyDecided(
            _("This request was already %(state)s.")
            % {"state": request.get_state_display().lower()}
        )
    return request


def allocation_request_approve(
    *, request: AllocationRequest, manager: User, comment: str = ""
) -> AllocationRequest:
    with transaction.atomic():
        locked = _decide(request.pk, manager)
        locked.allocation = allocation_grant(
            project=locked.project,
            cluster=locked.cluster,
            gpu_hours=locked.gpu_hours,
            starts_on=locked.starts_on,
            ends_on=locked.ends_on,
            actor=manager,
            reason=f"Request #{locked.pk} approved" + (f": {comment}" if comment else ""),
            reference=f"request:{locked.pk}",
        )
        locked.state = AllocationRequest.State.APPROVED
        locked.decided_by, locked.decided_at = manager, timezone.now()
        locked.decision_comment = comment
        locked.save()
        _audit(locked, AuditEvent.Action.REQUEST_APPROVE, allocation_id=locked.allocation.pk)
    return locked


def allocation_request_deny(
    *, request: AllocationRequest, manager: User, comment: str
) -> AllocationRequest:
    if not comment.strip():
        raise Refused(_("Say why the request is denied: the PI reads the comment."))
    with transaction.atomic():
        locked = _decide(request.pk, manager)
        locked.state = AllocationRequest.State.DENIED
        locked.decided_by, locked.decided_at = manager, timezone.now()
        locked.decision_comment = comment.strip()
        locked.save()
        _audit(locked, AuditEvent.Action.REQUEST_DENY)
    return locked


def _audit(request: AllocationRequest, action: str, **detail: object) -> None:
    audit_record(
        actor=request.decided_by,
        action=action,
        target=request,
        on_behalf_of=request.requested_by,
        scope=request.project.slurm_account,
        detail={"gpu_hours": request.gpu_hours, "comment": request.decision_comment, **detail},
    )
