"""The one write of the audit log."""

from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import models
from django.utils import translation

from audit.models import AuditEvent


def audit_record(
    *,
    actor: AbstractBaseUser | None,
    action: str,
    target: models.Model,
    detail: dict[str, Any] | None = None,
    on_behalf_of: AbstractBaseUser | None = None,
    scope: str = "",
) -> AuditEvent:
    """Record that ``actor`` (None: the system) did ``action`` to ``target``.

    Call it inside the transaction of the write it records: the row then commits
    or rolls back with that write, so a refused write leaves no trace and a
    recorded one cannot be lost. ``detail`` holds what a reader needs (GPU-hours,
    the reason, old and new values); Decimals and dates are stored as strings.
    """
    if actor is not None and on_behalf_of is not None and on_behalf_of.pk == actor.pk:
        on_behalf_of = None  # acting on one's own object is not on anyone's behalf
    # The log is read by every manager: its text stays in the source language (as job
    # events do), not in the language of whoever caused the write.
    with translation.override(None):
        target_repr = str(target)[:200]
    return AuditEvent.objects.create(
        # Ids, not instances: this app does not know the user model's class.
        actor_id=actor.pk if actor is not None else None,
        action=AuditEvent.Action(action),
        target_type=target._meta.label_lower,
        target_id=str(target.pk),
        target_repr=target_repr,
        on_behalf_of_id=on_behalf_of.pk if on_behalf_of is not None else None,
        scope=scope,
        detail=detail or {},
    )
