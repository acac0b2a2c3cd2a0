"""sgp: the Slurm GPU Portal from a terminal or a script, through its REST API.

    sgp login --url https://portal.example.org      # the token from a prompt or stdin
    sgp login --sso --url https://portal.example.org  # sign in through the site's provider
    sgp projects
    sgp status                                       # GPUs free per partition, the queue
    sgp estimate --project vision --partition debug --gpus 1 --time 30 --script train.sh
    sgp submit job.yaml --env EPOCHS=3               # prints the job id
    sgp jobs --state running,pending
    sgp logs 12 --follow                             # exit 0 if the job completed, 1 if not
    sgp show 12 --json
    sgp hooks add https://example.org/hook --event job.ended   # prints the signing secret once
    sgp notify --failures                            # mail me when a job fails
    sgp caps set vision 200 --member alice           # a member's GPU-hour cap (PI/co-PI)

Human tables by default, ``--json`` for scripts; the exit codes are in
client/exits.py (and ``sgp --help``).
"""

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from client import __version__, config
from client.account import cmd_login, cmd_notify, cmd_projects
from client.api import ApiError
from client.caps import cmd_caps
from client.exits import EPILOG, Exit
from client.formatting import hours
from client.hooks import cmd_hooks
from client.jobs import cmd_cancel, cmd_jobs, cmd_show
from client.jobspec import JobSpecError, parse_assignment, parse_minutes
from client.logs import cmd_logs
from client.session import Session, UsageError, err
from client.status import cmd_status
from client.submit import cmd_estimate, cmd_submit

POLL_INTERVAL_S = 2.0


def _checked(convert: Callable[[str], Any], name: str) -> Callable[[str], Any]:
    def check(value: str) -> Any:
        try:
            return convert(value)
        except JobSpecError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    check.__name__ = name
    return check


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise ValueError(value)
    return number


def _lines(value: str) -> int:
    number = int(value)
    if number < 0:
        raise ValueError(value)
    return number


def _hours(value: str) -> float:
    number = float(value)
    if not 0 <= number < float("inf"):
        raise ValueError(value)
    return number


def _seconds(value: str) -> float:
    number = float(value)
    if not 0.1 <= number <= 3600:
        raise ValueError(value)
    return number


def _add_job_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "job_file", nargs="?", help="a YAML job file: the API's job fields, script or script_file"
    )
    parser.add_argument("--project", help="the paying project's slug")
    parser.add_argument("--cluster", help="needed only when several clusters have the partition")
    parser.add_argument("--partition")
    parser.add_argument("--name", help="the job's name")
    parser.add_argument("--nodes", type=_positive)
    parser.add_argument("--gpus", type=_positive, help="GPUs per node")
    parser.add_argument("--cpus-per-gpu", type=_positive)
    parser.add_argument("--mem-per-gpu", type=_positive, metavar="GB")
    parser.add_argument(
        "--time", type=_checked(parse_minutes, "time"), help="time limit: minutes, or H:MM"
    )
    parser.add_argument("--workdir", help="working directory (absolute, on the cluster)")
    parser.add_argument("--output", help="stdout file (Slurm's %%j etc. allowed)")
    parser.add_argument("--error", help="stderr file")
    parser.add_argument("--array", help="a Slurm array spec, e.g. 0-9%%2")
    parser.add_argument(
        "--requeue",
        action=argparse.BooleanOptionalAction,
        help="whether Slurm may run the job again (every run is charged); "
        "default: the template's, else no",
    )
    parser.add_argument(
        "--env",
        action="append",
        type=_checked(parse_assignment, "KEY=VALUE"),
        metavar="KEY=VALUE",
        help="a variable the job sees (repeatable); the job sees no others",
    )
    parser.add_argument(
        "--depends-on",
        action="append",
        type=_positive,
        metavar="ID",
        help="a portal job that must succeed first (repeatable)",
    )
    parser.add_argument("--template", type=_positive, metavar="ID", help="defaults from a template")
    parser.add_argument("--script", metavar="FILE", help="the script body, or - for stdin")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sgp",
        description="The Slurm GPU Portal from the command line, through its REST API.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"sgp {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler: Callable[..., int], summary: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(
            name,
            help=summary,
            description=summary,
            epilog=EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sub.set_defaults(handler=handler)
        return sub

    def with_json(sub: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sub.add_argument("--json", action="store_true", help="the API's JSON, for scripts")
        return sub

    def with_interval(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--interval",
            type=_seconds,
            default=POLL_INTERVAL_S,
            metavar="S",
            help=f"seconds between polls (default {POLL_INTERVAL_S:g})",
        )

    login = command("login", cmd_login, "check a token with the portal and store it (mode 0600)")
    login.add_argument("--url", help="the portal's address, e.g. https://portal.example.org")
    login.add_argument(
        "--token", help="the token (visible to other users' ps: prefer the prompt or stdin)"
    )
    login.add_argument(
        "--sso",
        action="store_true",
        help="sign in through the site's provider in a browser (a code to confirm) and keep "
        "the portal token it gives",
    )

    with_json(command("projects", cmd_projects, "your projects and their GPU-hours"))
    notify = with_json(
        command("notify", cmd_notify, "show or set which of your jobs' ends you are mailed")
    )
    choice = notify.add_mutually_exclusive_group()
    for flag, value, what in (
        ("--all", "all", "mail me when any job of mine ends"),
        ("--failures", "failures", "only when one fails (the default)"),
        ("--never", "never", "never mail me of job ends"),
    ):
        choice.add_argument(flag, dest="job_mail", action="store_const", const=value, help=what)
    notify.add_argument("--language", metavar="CODE", help="the language of those mails (en, ja)")

    with_json(
        command("status", cmd_status, "each cluster's GPUs in use, idle and unavailable, and queue")
    )

    submit = with_json(command("submit", cmd_submit, "submit a job; prints its id"))
    _add_job_arguments(submit)
    submit.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="repeat a submit that may have failed without making a second job "
        "(default: a new UUID)",
    )

    estimate = with_json(command("estimate", cmd_estimate, "what a job would cost; saves nothing"))
    _add_job_arguments(estimate)
    estimate.add_argument("--show-script", action="store_true", help="print the batch script")

    jobs = with_json(command("jobs", cmd_jobs, "your jobs, newest first"))
    jobs.add_argument(
        "--state", action="append", help="a state, or several comma-separated (repeatable)"
    )
    jobs.add_argument("--project", help="a project's jobs: all of them for its PI and co-PIs")
    jobs.add_argument("--search", metavar="TEXT", help="in the name, or a job or Slurm id")
    jobs.add_argument("--limit", type=_positive, default=50, help="at most N jobs (default 50)")

    show = with_json(command("show", cmd_show, "a job's details and timeline"))
    show.add_argument("id", type=_positive)
    show.add_argument("--script", action="store_true", help="print the batch script too")
    show.add_argument(
        "--wait", action="store_true", help="wait until it ends; exit 1 unless it completed"
    )
    with_interval(show)

    cancel = with_json(command("cancel", cmd_cancel, "cancel a job"))
    cancel.add_argument("id", type=_positive)

    logs = with_json(command("logs", cmd_logs, "a job's output"))
    logs.add_argument("id", type=_positive)
    logs.add_argument("--stderr", action="store_true", help="stderr instead of stdout")
    logs.add_argument("--tail", type=_lines, metavar="N", help="only the last N lines")
    logs.add_argument("--array-task", type=_lines, metavar="N", help="an array job's task N")
    logs.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="print new output until the job ends; exit 0 if it completed, 1 if not",
    )
    with_interval(logs)

    hooks = with_json(command("hooks", cmd_hooks, "your webhooks and your projects'"))
    hooks.add_argument(
        "action", choices=["list", "add", "test", "delete"], nargs="?", default="list"
    )
    hooks.add_argument("target", nargs="?", help="add: the URL; test, delete: the hook's id")
    hooks.add_argument(
        "--event",
        action="append",
        help="add: an event it hears of (repeatable; default job.ended): job.ended, "
        "allocation.usage_80, allocation.usage_100, allocation.expires_soon, member.cap_reached",
    )
    hooks.add_argument("--project", help="add: a project you lead (default: your own jobs)")
    hooks.add_argument("--format", choices=["json", "slack"], default="json")
    caps = with_json(command("caps", cmd_caps, "members' GPU-hour caps on a project"))
    caps.add_argument(
        "action",
        choices=["list", "set", "clear"],
        help="list (yours, or every member's for the PI), set or clear (PI and co-PIs)",
    )
    caps.add_argument("project", help="the project's slug")
    caps.add_argument(
        "gpu_hours", nargs="?", type=_hours, help="set: the cap, in GPU-hours (0 stops new work)"
    )
    caps.add_argument("--member", help="set/clear: a member's own cap (default: every member's)")
    caps.add_argument("--cluster", help="needed only when the project is on several clusters")
    return parser


def report(error: ApiError, command: str) -> None:
    lines = [f"sgp: {error.message}"]
    for field, messages in error.fields.items():
        for message in messages:
            lines.append(f"  {message}" if field == "__all__" else f"  {field}: {message}")
    if error.code == "quota_exceeded":
        requested = error.extra.get("requested_gpu_hours")
        available = error.extra.get("available_gpu_hours")
        lines.append(f"  requested {hours(requested)} GPU-hours, available {hours(available)}")
        remaining = error.extra.get("member_remaining_gpu_hours")
        if remaining is not None:
            lines.append(f"  your cap leaves you {hours(remaining)} GPU-hours")
    if error.exit_code == Exit.RATE_LIMITED and "retry_after" in error.extra:
        lines.append(f"  try again in {error.extra['retry_after']} s")
    if error.status == 401 and command != "login":
        lines.append("  make a new token in the portal and run `sgp login`")
    lines += [f"  {hint}" for hint in error.hints]
    err("\n".join(lines))


def main(argv: Sequence[str] | None = None, *, transport: httpx.BaseTransport | None = None) -> int:
    """Run one command; the exit code (client/exits.py). ``transport`` is for tests."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # --help (0) or a usage error (2)
        return stop.code if isinstance(stop.code, int) else Exit.USAGE
    session = Session(transport)
    try:
        if args.command == "caps" and (args.action == "set") != (args.gpu_hours is not None):
            raise UsageError("give the cap in GPU-hours to `caps set`, and only to it")
        return int(args.handler(args, session))
    except ApiError as error:
        report(error, args.command)
        return error.exit_code
    except (UsageError, JobSpecError) as error:
        err(f"sgp: error: {error}")
        return Exit.USAGE
    except config.NotLoggedIn as error:
        err(f"sgp: {error}")
        return Exit.NOT_LOGGED_IN
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`sgp jobs | head`): stop quietly, and keep Python from
        # complaining again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return Exit.OK
    finally:
        session.close()
