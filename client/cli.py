"""sgp: the Slurm GPU Portal from a terminal or a script, through its REST API.

    sgp login --url https://portal.example.org      # the token from a prompt or stdin
    sgp projects
    sgp estimate --project vision --partition debug --gpus 1 --time 30 --script train.sh
    sgp submit job.yaml --env EPOCHS=3               # prints the job id
    sgp jobs --state running,pending
    sgp logs 12 --follow                             # exit 0 if the job completed, 1 if not
    sgp show 12 --json

Human tables by default, ``--json`` for scripts; the exit codes are in
client/exits.py (and ``sgp --help``).
"""

import argparse
import getpass
import ipaddress
import os
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx

from client import __version__, config
from client.api import Api, ApiError
from client.exits import EPILOG, Exit
from client.formatting import as_json, hours, pairs, table, text, when
from client.jobspec import (
    JobSpecError,
    load_job_file,
    merge,
    parse_assignment,
    parse_minutes,
    read_script,
)

# The portal's ends of a job (jobs/states.py; this package imports nothing of the portal).
TERMINAL_STATES = frozenset(
    {
        "completed",
        "failed",
        "cancelled",
        "timeout",
        "out_of_memory",
        "node_fail",
        "preempted",
        "submit_failed",
    }
)
POLL_INTERVAL_S = 2.0
MAX_PAGE_SIZE = 200  # the API's max_page_size
# While following, each poll asks only for the output's last lines; when more
# than those is new, it asks again for the whole end.
FOLLOW_TAIL_LINES = 200


class UsageError(Exception):
    """A command line that cannot work (exit 2), found after argparse."""


class Session:
    """What a command needs: the API of the stored login, made on first use."""

    def __init__(self, transport: httpx.BaseTransport | None = None) -> None:
        self.transport = transport
        self._api: Api | None = None

    def connect(self, url: str, token: str) -> Api:
        if self._api is not None:
            self._api.close()
        self._api = Api(url, token, transport=self.transport)
        return self._api

    @property
    def api(self) -> Api:
        if self._api is None:
            login = config.current_login()
            return self.connect(login.url, login.token)
        return self._api

    def close(self) -> None:
        if self._api is not None:
            self._api.close()


def out(line: str = "") -> None:
    print(line, file=sys.stdout)


def err(line: str) -> None:
    print(line, file=sys.stderr)


# login


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
    token = args.token or _read_token()
    if not token:
        raise UsageError("no token given (--token, or type it at the prompt or on stdin)")
    if url.startswith("http://") and not _is_local(url):
        err(f"sgp: warning: {url} is plain HTTP: the token travels unencrypted; prefer https://")
    me = session.connect(url, token).get("me/")
    path = config.config_path()
    config.write_config(path, url=url, token=token)
    out(f"Logged in to {url} as {me['username']}; the login is kept in {path}.")
    projects = ", ".join(f"{p['slug']} ({p['role']})" for p in me.get("projects", []))
    out(f"Projects: {projects or 'none yet'}")
    return Exit.OK


# projects


def cmd_projects(args: argparse.Namespace, session: Session) -> int:
    projects = session.api.get("projects/")
    if args.json:
        out(as_json(projects))
        return Exit.OK
    rows = []
    for project in projects:
        balance = project["balance"]
        rows.append(
            (
                project["slug"],
                project["name"],
                project["role"],
                hours(balance["granted_gpu_hours"]),
                hours(balance["used_gpu_hours"]),
                hours(balance["held_gpu_hours"]),
                hours(balance["available_gpu_hours"]),
            )
        )
    if not rows:
        err("You are in no project yet.")
        return Exit.OK
    headers = ["SLUG", "NAME", "ROLE",
               "GRANTED GPU-h", "USED GPU-h", "HELD GPU-h", "AVAILABLE GPU-h"]  # fmt: skip
    out(table(headers, rows, right=range(3, 7)))
    return Exit.OK


# submit and estimate


def job_request(args: argparse.Namespace) -> dict[str, Any]:
    """The job request of a job file (if given) with the flags on top."""
    if args.script == "-" and args.job_file == "-":
        raise UsageError("the script and the job file cannot both come from stdin")
    base = load_job_file(args.job_file) if args.job_file else {}
    flags = {
        "project": args.project,
        "cluster": args.cluster,
        "partition": args.partition,
        "name": args.name,
        "nodes": args.nodes,
        "gpus_per_node": args.gpus,
        "cpus_per_gpu": args.cpus_per_gpu,
        "mem_per_gpu_gb": args.mem_per_gpu,
        "time_limit_minutes": args.time,
        "working_directory": args.workdir,
        "output_path": args.output,
        "error_path": args.error,
        "array": args.array,
        "depends_on": args.depends_on,
        "template": args.template,
        "script": read_script(args.script) if args.script else None,
    }
    return merge(base, flags, environment=args.env or ())


def cmd_submit(args: argparse.Namespace, session: Session) -> int:
    request = job_request(args)
    # One key per submit, sent on every retry: the portal makes one job for it.
    key = args.idempotency_key or str(uuid.uuid4())
    try:
        response = session.api.post("jobs/", request, idempotency_key=key)
    except ApiError as error:
        if error.exit_code == Exit.UNAVAILABLE:
            error.hints.append(
                "The job may or may not have been made; to retry without making two, "
                f"repeat the command with --idempotency-key {key}"
            )
        raise
    job = response.json()
    if response.headers.get("Idempotent-Replayed") == "true":
        err(f"sgp: this Idempotency-Key was used before; job {job['id']} is that submission.")
    out(as_json(job) if args.json else str(job["id"]))
    return Exit.OK


def cmd_estimate(args: argparse.Namespace, session: Session) -> int:
    # It saves nothing, so it is retried like a read.
    estimate = session.api.post("jobs/estimate/", job_request(args), repeatable=True).json()
    if args.json:
        out(as_json(estimate))
        return Exit.OK
    start = estimate.get("expected_start")
    out(
        pairs(
            [
                ("cost", f"{hours(estimate['requested_gpu_hours'])} GPU-hours"),
                *_cost_parts(estimate),
                ("available", f"{hours(estimate['available_gpu_hours'])} GPU-hours"),
                ("fits", "yes" if estimate["fits"] else "no: the project cannot cover it"),
                ("expected start", when(start) if start else "unknown"),
            ]
        )
    )
    if args.show_script:
        out()
        sys.stdout.write(estimate["rendered_script"])
    return Exit.OK


def _cost_parts(estimate: dict[str, Any]) -> list[tuple[str, str]]:
    """The cost's GPU and CPU parts, from a portal that reports them."""
    if "cpu_hours" not in estimate:
        return []

    def part(value: float) -> str:
        # A job's few CPU-seconds must not read as 0.00, i.e. free.
        return "< 0.01" if 0 < value < 0.005 else hours(value)

    return [
        ("  GPUs", f"{hours(estimate['gpu_hours'])} GPU-hours x {estimate['billing_weight']} "
                   f"= {part(estimate['gpu_part_gpu_hours'])}"),
        ("  CPUs", f"{hours(estimate['cpu_hours'])} CPU-hours x {estimate['cpu_hour_rate']} "
                   f"= {part(estimate['cpu_part_gpu_hours'])}"),
    ]  # fmt: skip


# jobs, show, cancel


def list_jobs(api: Api, params: dict[str, Any], limit: int) -> tuple[list[dict[str, Any]], bool]:
    """Up to ``limit`` jobs, following the cursor's next links; and whether there are more."""
    jobs: list[dict[str, Any]] = []
    while True:
        page = api.get("jobs/", params)
        jobs.extend(page["results"])
        following = page.get("next")
        if not following or len(jobs) >= limit:
            return jobs[:limit], bool(following) or len(jobs) > limit
        # Only the link's query: a proxy in front of the portal may give it another host.
        params = dict(httpx.URL(following).params.multi_items())


def _gpus(job: dict[str, Any]) -> int:
    return int(job.get("nodes") or 1) * int(job.get("gpus_per_node") or 0)


def cmd_jobs(args: argparse.Namespace, session: Session) -> int:
    params: dict[str, Any] = {"page_size": min(args.limit, MAX_PAGE_SIZE)}
    if args.state:
        params["state"] = ",".join(args.state)
    if args.project:
        params["project"] = args.project
    if args.search:
        params["search"] = args.search
    jobs, more = list_jobs(session.api, params, args.limit)
    if args.json:
        out(as_json(jobs))
        return Exit.OK
    rows = [
        (
            job["id"],
            job["name"],
            job["project"],
            job["partition"],
            job["state"],
            job.get("slurm_job_id"),
            _gpus(job),
            hours(job.get("requested_gpu_hours")),
            hours(job.get("used_gpu_hours")),
            when(job.get("created_at")),
        )
        for job in jobs
    ]
    headers = ["ID", "NAME", "PROJECT", "PARTITION", "STATE", "SLURM ID", "GPUS",
               "REQUESTED GPU-h", "USED GPU-h", "CREATED"]  # fmt: skip
    out(table(headers, rows, right=(0, 5, 6, 7, 8)))
    if more:
        err(f"(more jobs than {args.limit}: raise --limit or narrow with --state/--search)")
    return Exit.OK


def _duration(minutes: int | None) -> str:
    if minutes is None:
        return "-"
    return f"{minutes // 60}:{minutes % 60:02d}"


def describe(job: dict[str, Any]) -> str:
    """A job's facts and its timeline, for people."""
    resources = f"{job['nodes']} node(s) x {job['gpus_per_node']} GPU(s)"
    if job.get("array"):
        resources += f", array {job['array']} ({job.get('array_tasks', '?')} tasks)"
    state = job["state"]
    if job.get("exit_code") is not None:
        state += f" (exit code {job['exit_code']})"
    used = job.get("used_gpu_hours")
    facts: list[tuple[str, Any]] = [
        ("job", f"{job['id']}  {job['name']}"),
        ("state", state),
        ("slurm", f"job {text(job.get('slurm_job_id'))}, {text(job.get('slurm_state'))}"),
        ("reason", job.get("reason")),
        ("project", job["project"]),
        ("owner", job["owner"]),
        ("where", f"{job['cluster']} / {job['partition']}"),
        ("resources", resources),
        ("time limit", _duration(job.get("time_limit_minutes"))),
        ("requested", f"{hours(job.get('requested_gpu_hours'))} GPU-hours"),
        ("used", "not charged yet" if used is None else f"{hours(used)} GPU-hours"),
        ("working dir", job.get("working_directory")),
        ("output", job.get("output_path")),
        ("errors", job.get("error_path")),
        ("depends on", ", ".join(map(str, job.get("depends_on") or [])) or None),
        ("created", when(job.get("created_at"))),
        ("submitted", when(job.get("submitted_at"))),
        ("started", when(job.get("started_at"))),
        ("ended", when(job.get("ended_at"))),
    ]
    if job.get("submit_error"):
        facts.append(("refused", job["submit_error"]))
    lines = [pairs(facts)]
    events = job.get("events") or []
    if events:
        lines += ["", "timeline:"]
        lines += [
            "  " + line
            for line in table(
                ["AT", "STATE", "DETAIL"],
                [(when(e["at"]), e["state"], e.get("detail")) for e in events],
            ).splitlines()
        ]
    return "\n".join(lines)


def ended(job: dict[str, Any]) -> int:
    """The exit code for a job that ended: 0 if it completed, 1 (saying how) if not."""
    if job["state"] == "completed":
        return Exit.OK
    how = job["state"]
    if job.get("exit_code") is not None:
        how += f", exit code {job['exit_code']}"
    if job.get("submit_error"):
        how += f": {job['submit_error']}"
    err(f"sgp: job {job['id']} ended {how}")
    return Exit.JOB_FAILED


def _note_state(job: dict[str, Any], previous: str | None) -> str:
    """Tell a person at a terminal when the job moves on (scripts read the exit code)."""
    state = str(job["state"])
    if state != previous and sys.stderr.isatty():
        reason = f" ({job['reason']})" if job.get("reason") else ""
        err(f"[job {job['id']}: {state}{reason}]")
    return state


def wait_until_finished(api: Api, job_id: int, interval_s: float) -> dict[str, Any]:
    state = None
    while True:
        job = api.get(f"jobs/{job_id}/")
        state = _note_state(job, state)
        if job["state"] in TERMINAL_STATES:
            return job
        time.sleep(interval_s)


def cmd_show(args: argparse.Namespace, session: Session) -> int:
    if args.wait:
        job = wait_until_finished(session.api, args.id, args.interval)
    else:
        job = session.api.get(f"jobs/{args.id}/")
    if args.json:
        out(as_json(job))
    else:
        out(describe(job))
        if args.script:
            out()
            sys.stdout.write(job.get("rendered_script", ""))
    return ended(job) if args.wait else Exit.OK


def cmd_cancel(args: argparse.Namespace, session: Session) -> int:
    job = session.api.post(f"jobs/{args.id}/cancel/").json()
    if args.json:
        out(as_json(job))
    elif job["state"] in TERMINAL_STATES:
        out(f"Job {job['id']} is {job['state']}.")
    else:
        out(f"Job {job['id']}: cancel requested; it is {job['state']} until Slurm ends it.")
    return Exit.OK


# logs


def unseen_text(text: str, size_bytes: int, shown_bytes: int) -> tuple[str, bool]:
    """What of a file's end is new, when ``shown_bytes`` of it were printed before.

    ``text`` is the file's last bytes as the API decoded them, ``size_bytes`` the
    whole file's size. The second value is False when more was written than the
    answer holds (some output is skipped). Exact for UTF-8 output; a byte that is
    not UTF-8 counts as the three of its replacement character.
    """
    if size_bytes < shown_bytes:  # cut short or rewritten: it is all new
        return text, True
    data = text.encode()
    unseen = size_bytes - shown_bytes
    if unseen > len(data):
        return text, False
    return data[len(data) - unseen :].decode("utf-8", errors="replace"), True


def _output(
    api: Api, job_id: int, stream: str, tail: int | None, task: int | None = None
) -> dict[str, Any]:
    params: dict[str, Any] = {"stream": stream}
    if tail is not None:
        params["tail"] = tail
    if task is not None:
        params["array_task"] = task
    return api.get(f"jobs/{job_id}/output/", params)


def follow(
    api: Api,
    job_id: int,
    *,
    stream: str,
    tail: int | None,
    interval_s: float,
    task: int | None = None,
) -> int:
    """Print the output as it grows until the job has ended and all of it is printed."""
    shown: int | None = None  # bytes of the file printed so far
    state = None
    while True:
        # The state first, the output after: once the job is seen ended, the output
        # read next is complete (Slurm closes the files before the job ends).
        job = api.get(f"jobs/{job_id}/")
        state = _note_state(job, state)
        finished = job["state"] in TERMINAL_STATES
        try:
            if shown is None:
                output = _output(api, job_id, stream, tail, task)
                new, complete = output["text"], not (output["truncated"] and tail is None)
            else:
                output = _output(api, job_id, stream, FOLLOW_TAIL_LINES, task)
                new, complete = unseen_text(output["text"], output["size_bytes"], shown)
                if not complete and output["truncated"]:
                    output = _output(api, job_id, stream, None, task)
                    new, complete = unseen_text(output["text"], output["size_bytes"], shown)
            if not complete:
                err(f"[… earlier output skipped; the portal shows the last {len(new)} characters]")
            sys.stdout.write(new)
            sys.stdout.flush()
            shown = output["size_bytes"]
        except ApiError as error:
            if error.code != "output_unavailable":
                raise
            if finished and shown is None:
                err(f"sgp: {error.message}")  # it never wrote any: cancelled early, refused
        if finished:
            return ended(job)
        time.sleep(interval_s)


def cmd_logs(args: argparse.Namespace, session: Session) -> int:
    stream = "stderr" if args.stderr else "stdout"
    if args.follow:
        if args.json:
            raise UsageError("--follow prints the text as it comes; it has no --json")
        return follow(
            session.api,
            args.id,
            stream=stream,
            tail=args.tail,
            interval_s=args.interval,
            task=args.array_task,
        )
    output = _output(session.api, args.id, stream, args.tail, args.array_task)
    if args.json:
        out(as_json(output))
        return Exit.OK
    sys.stdout.write(output["text"])
    if output["truncated"] and args.tail is None:
        err(f"[the output is {output['size_bytes']:,} bytes; this is its end]")
    return Exit.OK


# The command line.


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
    parser.add_argument("--cluster", help="needed only when the portal has several")
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

    with_json(command("projects", cmd_projects, "your projects and their GPU-hours"))

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
