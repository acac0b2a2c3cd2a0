"""Which Unix logins a portal user's jobs may run as: never root nor a system account.

Two checks, one rule. Where an administrator sets ``posix_username`` (console,
services), names that are plainly wrong are refused: ``root``, ``nobody``, a
name this host maps to uid 0, one of its system accounts (uid below
``MIN_UID``). The check that counts runs in the worker, on the host that
submits jobs, right before sbatch: the web tier and the database are not
trusted with whom a job runs as, so a name that slipped in another way is
refused there (``posix_login_refusal``).
"""

import pwd

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

# Accounts that are never a person's, whatever uid a site gives them.
RESERVED_LOGINS = frozenset({"root", "nobody"})


def _uid_of(name: str) -> int | None:
    try:
        return pwd.getpwnam(name).pw_uid
    except (KeyError, ValueError):  # ValueError: a NUL in the name
        return None


def validate_posix_username(name: str) -> None:
    """Refuse root and the system accounts of this host (a name it does not know passes:
    the web host need not have every user; the worker checks again)."""
    if name in RESERVED_LOGINS:
        raise ValidationError(
            _("%(login)s is a system account: jobs never run as it.") % {"login": name},
            code="system_account",
        )
    uid = _uid_of(name)
    if uid is not None and uid < settings.MIN_UID:
        raise ValidationError(
            _(
                "%(login)s is a system account here (uid %(uid)s, below %(min_uid)s): "
                "jobs never run as it."
            )
            % {"login": name, "uid": uid, "min_uid": settings.MIN_UID},
            code="system_account",
        )


def posix_login_refusal(name: str) -> str | None:
    """Why jobs may not run as ``name`` on this host (the worker's), or None when they may."""
    if name in RESERVED_LOGINS:
        return f"Jobs never run as the system account {name!r}; ask an administrator."
    uid = _uid_of(name)
    if uid is None:
        return (
            f"The Unix login {name!r} does not exist on the host that submits jobs; "
            "ask an administrator."
        )
    if uid < settings.MIN_UID:
        return (
            f"The Unix login {name!r} is a system account (uid {uid}, below "
            f"PORTAL_MIN_UID={settings.MIN_UID}); jobs never run as it. Ask an administrator."
        )
    return None
