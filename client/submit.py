"""sgp submit and sgp estimate: a job request from a job file and flags."""

import argparse
import sys
import uuid
from typing import Any

from client.api import ApiError
from client.exits import Exit
from client.formatting import as_json, hours, pairs, when
from client.jobspec import load_job_file, merge, read_script
from client.session import Session, UsageError, err, out


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
        "requeue": args.requeue,
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
