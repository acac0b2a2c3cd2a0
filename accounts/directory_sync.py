"""The periodic look at the directory: who left it, who is back, and their groups.

Every user who ever signed in through the directory or the provider (an
``ExternalIdentity``) is looked up by their Unix login. Gone from the directory, or
disabled there: the user is switched off (no sign-in, no session, no API token from
then on); their queued jobs are left alone, for a PI or a manager to decide. Back and
enabled: switched on again, unless an administrator had switched them off. Their
group-made project memberships follow the directory's groups. Users without an outside
identity (the break-glass administrator, local development accounts) are not touched.
"""

import logging
from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from accounts import directory
from accounts.directory_groups import memberships_follow_groups
from accounts.models import User
from audit.models import AuditEvent
from audit.services import audit_record

logger = logging.getLogger(__name__)


@dataclass
class SyncReport:
    switched_off: list[str] = field(default_factory=list)
    switched_on: list[str] = field(default_factory=list)
    memberships: list[str] = field(default_factory=list)


def directory_sync() -> SyncReport:
    """One pass over the users with an outside identity; DirectoryUnavailable when the
    directory does not answer (nothing is changed then: a directory that is down does
    not switch everyone off)."""
    report = SyncReport()
    if not directory.configured():
        return report
    users = list(
        User.objects.filter(identities__isnull=False, posix_username__isnull=False).distinct()
    )
    entries = directory.people_with_logins(u.posix_username for u in users if u.posix_username)
    for user in users:
        entry = entries.get(user.posix_username or "")
        if entry is None or entry.disabled:
            why = "gone from the directory" if entry is None else "disabled in the directory"
            if user_switch_off(user, why=why):
                report.switched_off.append(f"{user}: {why}")
            continue
        if user_switch_on(user):
            report.switched_on.append(str(user))
        if user.is_active:
            report.memberships += memberships_follow_groups(user, directory.groups_of(entry))
    return report


def user_switch_off(user: User, *, why: str) -> bool:
    """Switch ``user`` off for the directory's sake; False when already off."""
    with transaction.atomic():
        updated = User.objects.filter(pk=user.pk, is_active=True).update(
            is_active=False, directory_disabled_at=timezone.now()
        )
        if updated:
            audit_record(
                actor=None, action=AuditEvent.Action.USER_DISABLE, target=user, detail={"why": why}
            )
    if updated:
        logger.warning("user %s switched off: %s; their queued jobs are left alone", user, why)
    return bool(updated)


def user_switch_on(user: User) -> bool:
    """Switch back on a user the directory sync had switched off; False otherwise."""
    with transaction.atomic():
        updated = User.objects.filter(
            pk=user.pk, is_active=False, directory_disabled_at__isnull=False
        ).update(is_active=True, directory_disabled_at=None)
        if updated:
            audit_record(
                actor=None,
                action=AuditEvent.Action.USER_ENABLE,
                target=user,
                detail={"why": "back in the directory"},
            )
    if updated:
        user.is_active = True
        logger.info("user %s switched on again: back in the directory", user)
    return bool(updated)
