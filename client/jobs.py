"""sgp jobs, sgp show and sgp cancel: jobs listed, described, waited for, cancelled."""

import argparse
import sys
import time
from typing import Any

import httpx

from client.api import Api
from client.exits import Exit
from client.formatting import as_json, hours, pairs, table, text, when
from client.session import Session, err, out

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
MAX_PAGE_SIZE = 200  # the API's max_page_size


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


def note_state(job: dict[str, Any], previous: str | None) -> str:
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
        state = note_state(job, state)
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
