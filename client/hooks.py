"""sgp hooks: your webhooks and your projects' (list, add, test, delete)."""

import argparse
from typing import Any

from client.exits import Exit
from client.formatting import as_json, table, when
from client.session import Session, UsageError, out

HEADERS = ["ID", "FOR", "URL", "EVENTS", "FORMAT", "LAST DELIVERY", "STATE"]


def _last(hook: dict[str, Any]) -> str:
    if not hook.get("last_state"):
        return "-"
    status = f" HTTP {hook['last_status']}" if hook.get("last_status") else ""
    at = f" {when(hook['last_attempt_at'])}" if hook.get("last_attempt_at") else ""
    return f"{hook['last_event']} {hook['last_state']}{status}{at}"


def cmd_hooks(args: argparse.Namespace, session: Session) -> int:
    if args.action == "add" and not args.target:
        raise UsageError("sgp hooks add URL: the URL is missing")
    if args.action in ("test", "delete") and not (args.target or "").isdigit():
        raise UsageError(f"sgp hooks {args.action} ID: the hook's id (a number, see sgp hooks)")
    return {"list": _list, "add": _add, "test": _test, "delete": _delete}[args.action](
        args, session
    )


def _list(args: argparse.Namespace, session: Session) -> int:
    hooks = session.api.get("hooks/")
    if args.json:
        out(as_json(hooks))
        return Exit.OK
    rows = [
        (hook["id"], hook["project"] or "me", hook["url"], ",".join(hook["events"]),
         hook["format"], _last(hook), "disabled" if hook["disabled_at"] else "on")
        for hook in hooks
    ]  # fmt: skip
    out(table(HEADERS, rows, right=[0]))
    for hook in hooks:
        if hook["disabled_at"]:
            out(f"hook {hook['id']}: {hook['disabled_reason']}")
    return Exit.OK


def _add(args: argparse.Namespace, session: Session) -> int:
    events = args.event or ["job.ended"]
    body: dict[str, Any] = {"url": args.target, "events": events, "format": args.format}
    if args.project:
        body["project"] = args.project
    hook = session.api.post("hooks/", body).json()
    if args.json:
        out(as_json(hook))
        return Exit.OK
    out(f"hook {hook['id']} added; its signing secret (shown only this once):")
    out(hook["secret"])
    return Exit.OK


def _test(args: argparse.Namespace, session: Session) -> int:
    answer = session.api.post(f"hooks/{args.target}/test/").json()
    out(as_json(answer) if args.json else f"test delivery {answer['delivery']} queued")
    return Exit.OK


def _delete(args: argparse.Namespace, session: Session) -> int:
    session.api.request("DELETE", f"hooks/{args.target}/")
    if not args.json:
        out(f"hook {args.target} deleted")
    return Exit.OK
