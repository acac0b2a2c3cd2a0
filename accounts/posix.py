"""Which Unix logins a portal user's jobs may run as: never root nor a system account.

Two checks, one rule. Where an administrator or a sign-in sets ``posix_username``
(console, services, ``accounts.identity``), names that are plainly wrong are refused:
``root``, ``nobody``, a name this host maps to uid 0, one of its system accounts (uid
below ``MIN_UID``). The check that counts runs in the worker, where jobs are submitted,
right before sbatch: the web tier and the database are not trusted with whom a job
runs as, so a name that slipped in another way is refused there
(``posix_login_refusal``). A cluster whose tools the worker runs through a command
prefix (another host, another root) is asked through that prefix: the login must exist
there, not only on the worker's host.
"""

import pwd
import subprocess

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from clusters.models import Cluster
from clusters.prefixes import command_prefix_argv
from clusters.selectors import clusters_enabled
from clusters.slurm import SlurmUnavailable

# Accounts that are never a person's, whatever uid a site gives them.
RESERVED_LOGINS = frozenset({"root", "nobody"})


def _uid_of(name: str) -> int | None:
    try:
        return pwd.getpwnam(name).pw_uid
    except (KeyError, ValueError):  # ValueError: a NUL in the name
        return None


def _uid_on(cluster: Cluster, name: str) -> int | None:
    """``name``'s uid as ``getent passwd`` through the cluster's command prefix says it.
    SlurmUnavailable when that cannot be asked (the answer is unknown, not no)."""
    if "\0" in name:
        return None
    command = [*command_prefix_argv(cluster.command_prefix), "getent", "passwd", name]
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=settings.SLURM_COMMAND_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SlurmUnavailable(f"could not look up {name!r} on {cluster}: {error}") from None
    if done.returncode == 2:  # getent: no such key
        return None
    fields = done.stdout.split(":")
    if done.returncode != 0 or len(fields) < 3 or not fields[2].isdigit():
        raise SlurmUnavailable(
            f"could not look up {name!r} on {cluster}: getent answered {done.returncode} "
            f"{done.stderr.strip()[:200]!r}"
        )
    return int(fields[2])


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


def posix_login_refusal(name: str, cluster: Cluster | None = None) -> str | None:
    """Why jobs may not run as ``name`` on this host (the worker's) and, for a cluster
    reached through a command prefix, there too; None when they may. SlurmUnavailable
    when such a cluster cannot be asked."""
    if name in RESERVED_LOGINS:
        return f"Jobs never run as the system account {name!r}; ask an administrator."
    places = [("the host that submits jobs", _uid_of(name))]
    if cluster is not None and cluster.command_prefix:
        places.append((f"cluster {cluster}", _uid_on(cluster, name)))
    for where, uid in places:
        if uid is None:
            return f"The Unix login {name!r} does not exist on {where}; ask an administrator."
        if uid < settings.MIN_UID:
            return (
                f"The Unix login {name!r} is a system account on {where} (uid {uid}, below "
                f"PORTAL_MIN_UID={settings.MIN_UID}); jobs never run as it. Ask an "
                "administrator."
            )
    return None


def posix_login_survey(name: str) -> dict[str, str | None]:
    """For each enabled cluster, why jobs may not run as ``name`` there (None: they may;
    "unknown: …" when the cluster could not be asked). A worker answers this for a
    sign-in (``accounts.identity``): the web tier cannot see where jobs are submitted."""
    answers: dict[str, str | None] = {}
    for cluster in clusters_enabled():
        try:
            answers[cluster.name] = posix_login_refusal(name, cluster)
        except SlurmUnavailable as error:
            answers[cluster.name] = f"unknown: {error}"
    return answers
