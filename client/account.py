"""sgp login and sgp projects: who you are to the portal, and what you may spend."""

import argparse
import getpass
import ipaddress
import sys
from urllib.parse import urlsplit

from client import config
from client.api import Api
from client.exits import Exit
from client.formatting import as_json, hours, table
from client.session import Session, UsageError, err, out
from client.sign_in import sso_token


def _read_token() -> str:
    if sys.stdin.isatty():
        return getpass.getpass("Access token (sgp_…, from the portal's Tokens page): ").strip()
    return sys.stdin.readline().strip()


def _is_local(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def cmd_login(args: argparse.Namespace, session: Session) -> int:
    given = args.url or config.stored_url()
    if not given:
        raise UsageError("give the portal's address: sgp login --url URL")
    try:
        url = config.normal_url(given)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if url.startswith("http://") and not _is_local(url):
        err(f"sgp: warning: {url} is plain HTTP: the token travels unencrypted; prefer https://")
    if args.sso:
        if args.token:
            raise UsageError("give either --sso or --token, not both")
        anonymous = Api(url, None, transport=session.transport)
        try:
            token = sso_token(anonymous, say=err, transport=session.transport)
        finally:
            anonymous.close()
    else:
        token = args.token or _read_token()
    if not token:
        raise UsageError("no token given (--token, or type it at the prompt or on stdin)")
    me = session.connect(url, token).get("me/")
    path = config.config_path()
    config.write_config(path, url=url, token=token)
    out(f"Logged in to {url} as {me['username']}; the login is kept in {path}.")
    projects = ", ".join(f"{p['slug']} ({p['role']})" for p in me.get("projects", []))
    out(f"Projects: {projects or 'none yet'}")
    return Exit.OK


def _in_force(allocation: dict) -> bool:
    # A portal before "in_force" counted every active allocation.
    return bool(allocation.get("in_force", allocation.get("state") == "active"))


def cmd_projects(args: argparse.Namespace, session: Session) -> int:
    """One row per allocation in force (a project has one per cluster); a project without
    one shows its (zero) balance once, with no cluster. One granted for a later period
    follows, its hours granted but none available before it starts."""
    projects = session.api.get("projects/")
    if args.json:
        out(as_json(projects))
        return Exit.OK
    rows = []
    for project in projects:
        allocations = project.get("allocations", [])
        active = [a for a in allocations if _in_force(a)]
        upcoming = [a for a in allocations if a.get("state") == "active" and not _in_force(a)]
        for balance in active or [{**project["balance"], "cluster": "-"}]:
            rows.append(
                (
                    project["slug"],
                    project["name"],
                    project["role"],
                    balance["cluster"],
                    hours(balance["granted_gpu_hours"]),
                    hours(balance["used_gpu_hours"]),
                    hours(balance["held_gpu_hours"]),
                    hours(balance["available_gpu_hours"]),
                )
            )
        for later in upcoming:
            rows.append(
                (
                    project["slug"],
                    project["name"],
                    project["role"],
                    later["cluster"],
                    hours(later["granted_gpu_hours"]),
                    "-",
                    "-",
                    f"from {later['starts_on']}",
                )
            )
    if not rows:
        err("You are in no project yet.")
        return Exit.OK
    headers = ["SLUG", "NAME", "ROLE", "CLUSTER",
               "GRANTED GPU-h", "USED GPU-h", "HELD GPU-h", "AVAILABLE GPU-h"]  # fmt: skip
    out(table(headers, rows, right=range(4, 8)))
    return Exit.OK


_NOTIFY_CHOICES = {"all": "every job", "failures": "failed jobs only", "never": "never"}


def cmd_notify(args: argparse.Namespace, session: Session) -> int:
    """Show, or with --all/--failures/--never change, which job ends you are mailed about
    (a PATCH is repeatable: it sets, it does not toggle)."""
    changes = {
        key: value
        for key, value in (("job_mail", args.job_mail), ("mail_language", args.language))
        if value
    }
    if changes:
        me = session.api.request("PATCH", "me/", json=changes, repeatable=True).json()
    else:
        me = session.api.get("me/")
    if args.json:
        out(as_json({"job_mail": me["job_mail"], "mail_language": me["mail_language"]}))
        return Exit.OK
    out(f"Mail when your jobs end: {_NOTIFY_CHOICES.get(me['job_mail'], me['job_mail'])}")
    out(f"Language of those mails: {me['mail_language'] or 'the portal default'}")
    if not me.get("email"):
        err("sgp: warning: your account has no e-mail address: no mail can reach you")
    return Exit.OK
