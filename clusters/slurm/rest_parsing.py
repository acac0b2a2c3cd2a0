"""Pure functions of slurmrestd's JSON (Slurm 22.05, OpenAPI v0.0.37/v0.0.38).

The ``rest`` backend calls these; they are tested on recorded answers in
``tests/fixtures/slurmrestd/``.
"""

import datetime as dt
import re
from typing import Any

from clusters.slurm.errors import (
    UNAVAILABLE_MARKERS,
    NotFound,
    SlurmError,
    SlurmRejected,
    SlurmUnavailable,
    reads_slurm_output,
    says,
)
from clusters.slurm.parsing import parse_gpu_gres
from clusters.slurm.states import SlurmJobState, normalise_state
from clusters.slurm.types import (
    AccountingEntry,
    AccountLimits,
    PartitionInfo,
    QueueEntry,
    SlurmAccount,
    SubmitRequest,
)

Json = dict[str, Any]

# Newest first. v0.0.36 (also in 22.05) leaves user_name, partition state and
# node partitions empty; v0.0.39+ (23.02+) reshape every object.
SUPPORTED_VERSIONS = ("v0.0.38", "v0.0.37")
_API_PATH = re.compile(r"^/(slurm|slurmdb)/(v0\.0\.\d+)/")

# Slurm error numbers seen in slurmrestd's "errors" list.
_UNSPECIFIED = -1  # 22.05's answer both when slurmctld is down and when it refuses the token
_AUTH_ERROR = 1007  # SLURM_PROTOCOL_AUTHENTICATION_ERROR: slurmdbd refused the token
_INVALID_JOB_ID = 2017
NOTHING_FOUND = 9003  # ESLURM_REST_EMPTY_RESULT: a query that matched nothing
_UNAVAILABLE_CODES = frozenset(
    {1001, 1002, 1003, 1004, 1800, 1801, 1802, 1803, 5004, 5005, 7000, 7008}
)  # connection, socket timeout, slurmctld and database connection errors
_NO_VALUE = 0xFFFFFFFE  # NO_VAL and INFINITE (and above) mean "not set"


# --- pure parsers ------------------------------------------------------------------


@reads_slurm_output
def error_list(payload: Json | None) -> list[Json]:
    errors = (payload or {}).get("errors") or []
    return [e for e in errors if isinstance(e, dict)]


@reads_slurm_output
def error_codes(payload: Json | None) -> set[int]:
    """Slurm's error numbers; 22.05 names the key ``error_number``, ``error_code`` or ``errno``."""
    codes = set()
    for error in error_list(payload):
        for key in ("error_number", "error_code", "errno"):
            if isinstance(error.get(key), int):
                codes.add(error[key])
                break
    return codes


@reads_slurm_output
def errors_message(payload: Json | None) -> str:
    """Slurm's own words from a response's ``errors``: each description, then its error."""
    parts: list[str] = []
    for error in error_list(payload):
        for key in ("description", "error"):
            text = str(error.get(key) or "").strip()
            if text and not any(text in part for part in parts):
                parts.append(text)
    return "; ".join(parts)


@reads_slurm_output
def error_for(payload: Json | None, *, where: str) -> SlurmError:
    """The client error for a response whose ``errors`` list is not empty."""
    codes = error_codes(payload)
    message = errors_message(payload) or f"slurmrestd reported an error for {where}"
    if codes & _UNAVAILABLE_CODES or says(message, UNAVAILABLE_MARKERS):
        return SlurmUnavailable(f"{message} ({where})")
    if codes == {_UNSPECIFIED}:
        return SlurmUnavailable(
            f"{message} ({where}): slurmctld did not answer slurmrestd, or refused the token"
        )
    if _AUTH_ERROR in codes:
        return SlurmRejected(f"{message} ({where}): Slurm refused the portal's token")
    if codes & {_INVALID_JOB_ID, NOTHING_FOUND}:
        return NotFound(message)
    return SlurmRejected(message)


@reads_slurm_output
def newest_versions(paths: list[str]) -> tuple[str | None, str | None]:
    """The newest supported versions of the ``slurm`` and ``slurmdb`` APIs among ``paths``."""
    offered: dict[str, set[str]] = {"slurm": set(), "slurmdb": set()}
    for path in paths:
        match = _API_PATH.match(path)
        if match:
            offered[match[1]].add(match[2])
    slurm = next((v for v in SUPPORTED_VERSIONS if v in offered["slurm"]), None)
    slurmdb = next((v for v in SUPPORTED_VERSIONS if v in offered["slurmdb"]), None)
    return slurm, slurmdb


def _time(epoch: Any) -> dt.datetime | None:
    """slurmrestd's epoch seconds; 0 means not (yet) set."""
    if not isinstance(epoch, int) or epoch <= 0 or epoch >= _NO_VALUE:
        return None
    return dt.datetime.fromtimestamp(epoch, dt.UTC)


def _minutes(value: Any) -> int | None:
    if not isinstance(value, int) or value < 0 or value >= _NO_VALUE:
        return None
    return value


def decode_wait_status(raw: int) -> tuple[int, int]:
    """slurmctld's ``exit_code`` is a raw wait status: 768 → (3, 0), 9 → (0, 9)."""
    signal = raw & 0x7F
    return (raw >> 8) & 0xFF, signal if signal != 0x7F else 0


@reads_slurm_output
def parse_queue(payload: Json) -> list[QueueEntry]:
    """``GET /slurm/{v}/jobs``: every job the controller still holds, pending to just ended."""
    entries = []
    for job in payload.get("jobs") or []:
        state = normalise_state(job["job_state"])
        array_job_id, array_task = None, None
        if job.get("array_job_id"):
            array_job_id = job["array_job_id"]
            task_id = job.get("array_task_id")
            # A pending array is one record with task_id null and the pending
            # tasks in array_task_string, e.g. "0-3%2" (squeue's %K prints the same).
            array_task = str(task_id) if task_id is not None else job.get("array_task_string")
        entries.append(
            QueueEntry(
                job_id=job["job_id"],
                array_job_id=array_job_id,
                array_task=array_task or None,
                name=job.get("name") or "",
                user=job.get("user_name") or str(job.get("user_id", "")),
                account=job.get("account") or "",
                partition=job.get("partition") or "",
                state=state,
                reason=job.get("state_reason") or "None",
                comment=job.get("comment") or "",
                submitted_at=_time(job.get("submit_time")),
                # A pending job's start_time is the scheduler's forecast, not a start.
                started_at=_time(job.get("start_time")) if state != SlurmJobState.PENDING else None,
                time_limit_minutes=_minutes(job.get("time_limit")),
            )
        )
    return entries


@reads_slurm_output
def parse_queue_exit_codes(payload: Json) -> dict[int, tuple[int, int]]:
    """Exit code and signal of the failed jobs the controller still holds (see parse_accounting)."""
    return {
        job["job_id"]: decode_wait_status(int(job.get("exit_code") or 0))
        for job in payload.get("jobs") or []
        if normalise_state(job["job_state"]) == SlurmJobState.FAILED
    }


@reads_slurm_output
def allocated_gpus(tres: list[Json] | None) -> int:
    """GPUs among allocated TRES like ``{"type": "gres", "name": "gpu", "count": 2}``.

    A typed entry (name ``gpu:h200``) counts too, but not next to the untyped
    total, which already includes it.
    """
    total, typed = None, 0
    for item in tres or []:
        if item.get("type") != "gres":
            continue
        name, count = item.get("name") or "", int(item.get("count") or 0)
        if name == "gpu":
            total = count
        elif name.startswith("gpu:"):
            typed += count
    return total if total is not None else typed


@reads_slurm_output
def allocated_cpus(tres: list[Json] | None) -> int:
    """CPUs among allocated TRES like ``{"type": "cpu", "name": "", "count": 4}``."""
    for item in tres or []:
        if item.get("type") == "cpu":
            return int(item.get("count") or 0)
    return 0


@reads_slurm_output
def accounting_exit_code(
    exit_code: Json | None, state: SlurmJobState
) -> tuple[int | None, int | None]:
    """Exit code and signal from accounting's ``{"status", "return_code", "signal"}``.

    22.05's dbv0.0.3x reports every normal exit as ``SUCCESS`` with return
    code 0, whatever the code was, so a FAILED job's code is unknown here.
    """
    exit_code = exit_code or {}
    status, return_code = exit_code.get("status"), exit_code.get("return_code")
    if status == "SIGNALED":
        return 0, int((exit_code.get("signal") or {}).get("signal_id") or 0)
    if status == "SUCCESS":
        return (None, None) if state == SlurmJobState.FAILED else (0, 0)
    if status == "ERROR" and isinstance(return_code, int):
        return return_code, 0
    return None, None


@reads_slurm_output
def pending_array_tasks(array: Json) -> str | None:
    """Accounting's pending tasks, a hex bitmap like ``0xF``, as sacct prints them: ``[0-3%2]``."""
    text = array.get("task") or ""
    if not text.lower().startswith("0x"):
        return text or None
    bits = int(text, 16)
    ranges: list[list[int]] = []
    for task in (i for i in range(bits.bit_length()) if bits >> i & 1):
        if ranges and ranges[-1][1] == task - 1:
            ranges[-1][1] = task
        else:
            ranges.append([task, task])
    spec = ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)
    limit = (((array.get("limits") or {}).get("max") or {}).get("running") or {}).get("tasks")
    return f"[{spec}%{limit}]" if limit else f"[{spec}]"


@reads_slurm_output
def parse_accounting(payload: Json) -> list[AccountingEntry]:
    """``GET /slurmdb/{v}/jobs``: one entry per job or array task, steps ignored.

    slurmrestd always asks with sacct's ``--duplicates``, so a requeued job
    comes once per run; the last submission is the job as it stands.
    """
    latest: dict[int, tuple[int, AccountingEntry]] = {}
    for job in payload.get("jobs") or []:
        state = normalise_state(job["state"]["current"])
        code, signal = accounting_exit_code(job.get("exit_code"), state)
        array = job.get("array") or {}
        array_job_id, array_task = None, None
        if array.get("job_id"):
            array_job_id = array["job_id"]
            task_id = array.get("task_id")
            array_task = str(task_id) if task_id is not None else pending_array_tasks(array)
        times = job.get("time") or {}
        entry = AccountingEntry(
            job_id=job["job_id"],
            array_job_id=array_job_id,
            array_task=array_task,
            name=job.get("name") or "",
            user=job.get("user") or "",
            account=job.get("account") or "",
            partition=job.get("partition") or "",
            state=state,
            exit_code=code,
            signal=signal,
            allocated_gpus=allocated_gpus((job.get("tres") or {}).get("allocated")),
            allocated_cpus=allocated_cpus((job.get("tres") or {}).get("allocated")),
            elapsed_s=int(times.get("elapsed") or 0),
            submitted_at=_time(times.get("submission")),
            started_at=_time(times.get("start")),
            ended_at=_time(times.get("end")),
            # With AccountingStoreFlags=job_comment; null until the job ends.
            comment=(job.get("comment") or {}).get("job") or "",
        )
        submitted = int(times.get("submission") or 0)
        if entry.job_id not in latest or submitted >= latest[entry.job_id][0]:
            latest[entry.job_id] = (submitted, entry)
    return [entry for _, entry in latest.values()]


@reads_slurm_output
def submitted_job_id(payload: Json | None) -> int | None:
    """The id in a submission's answer. A job id means the job was queued, even
    beside an error such as "Job is in held state": calling that a refusal
    would lose a real job."""
    job_id = (payload or {}).get("job_id")
    return job_id if isinstance(job_id, int) and job_id > 0 else None


@reads_slurm_output
def parse_partitions(partitions: Json, nodes: Json) -> list[PartitionInfo]:
    """``GET /slurm/{v}/partitions`` with GPU counts from ``GET /slurm/{v}/nodes`` GRES."""
    node_list = nodes.get("nodes") or []
    result = []
    for partition in partitions.get("partitions") or []:
        name = partition["name"]
        gres = [
            parse_gpu_gres(node.get("gres") or "")
            for node in node_list
            if name in (node.get("partitions") or [])
        ]
        flags = [str(flag).lower() for flag in partition.get("flags") or []]
        result.append(
            PartitionInfo(
                name=name,
                is_default="default" in flags,
                is_up=str(partition.get("state") or "").upper() == "UP",
                max_time_minutes=_minutes(partition.get("max_time_limit")),
                nodes=int(partition.get("total_nodes") or len(gres)),
                gpus_per_node=max((count for _, count in gres), default=0),
                gpu_type=next((gpu_type for gpu_type, _ in gres if gpu_type), ""),
                total_gpus=sum(count for _, count in gres),
            )
        )
    return result


@reads_slurm_output
def gpu_minutes_limit(association: Json) -> int | None:
    """The association's ``GrpTRESMins`` for ``gres/gpu`` (``max.tres.group.minutes``)."""
    return tres_minutes_limit(association, GPU_TRES)


@reads_slurm_output
def cpu_minutes_limit(association: Json) -> int | None:
    """The association's ``GrpTRESMins`` for ``cpu`` (a TRES of type "cpu", no name)."""
    return tres_minutes_limit(association, CPU_TRES)


GPU_TRES = {"type": "gres", "name": "gpu"}
CPU_TRES = {"type": "cpu", "name": ""}


@reads_slurm_output
def tres_minutes_limit(association: Json, tres: Json) -> int | None:
    limits = (((association.get("max") or {}).get("tres") or {}).get("group") or {}).get("minutes")
    for item in limits or []:
        if item.get("type") == tres["type"] and (item.get("name") or "") == tres["name"]:
            return int(item["count"])
    return None


@reads_slurm_output
def job_count_limits(association: Json) -> dict[str, int | None]:
    """The association's GrpSubmitJobs and GrpJobs (None: no limit). dbv0.0.38 names
    them ``max.jobs.per.submitted`` and ``max.jobs.per.count`` (its ``max.jobs.total``
    is MaxSubmitJobs)."""
    per = ((association.get("max") or {}).get("jobs") or {}).get("per") or {}
    submitted, count = per.get("submitted"), per.get("count")
    return {
        "GrpSubmitJobs": None if submitted is None else int(submitted),
        "GrpJobs": None if count is None else int(count),
    }


@reads_slurm_output
def max_submit_jobs(association: Json) -> int | None:
    """The association's ``MaxSubmitJobs``: ``max.jobs.total`` in v0.0.38 (``max.jobs.per.
    submitted`` is GrpSubmitJobs), as sacctmgr set them on the dev cluster."""
    value = ((association.get("max") or {}).get("jobs") or {}).get("total")
    return None if value is None else int(value)


def job_description(request: SubmitRequest) -> Json:
    """The ``job`` object of ``POST /slurm/{v}/job/submit``.

    slurmrestd starts the job with exactly ``environment`` (no --export, no
    login environment) but refuses an empty one ("environment must be set");
    SLURM_JOB_NAME is the one variable Slurm sets to the same value anyway.
    Without PATH, bash falls back to its built-in search path.
    """
    for key in request.environment:
        if not key or "=" in key:
            raise ValueError(f"environment variable {key!r} cannot be passed to slurmrestd")
    job: Json = {
        "account": request.account,
        "partition": request.partition,
        "name": request.name,
        "nodes": request.nodes,
        "time_limit": request.time_limit_minutes,
        "current_working_directory": request.working_directory,
        "standard_output": request.stdout_path,
        "standard_error": request.stderr_path,
        "environment": dict(request.environment) or {"SLURM_JOB_NAME": request.name},
    }
    optional = {
        # 22.05 refuses tres_per_node/tres_per_job ("Unknown key").
        "gpus_per_node": request.gpus_per_node,
        "cpus_per_gpu": request.cpus_per_gpu,
        "memory_per_gpu": request.mem_per_gpu_mb,
        "array": request.array,
        "dependency": "afterok:" + ":".join(map(str, request.after_ok)) if request.after_ok else "",
        "comment": request.comment,
    }
    job.update({key: value for key, value in optional.items() if value})
    return job


# --- the client --------------------------------------------------------------------


# --- the import's listing (end of module: kept apart for the v0.0.40+ rewrite) -------


@reads_slurm_output
def parse_account_list(accounts: Json, associations: Json, *, cluster: str) -> list[SlurmAccount]:
    """The accounts with an association on ``cluster``, ``root`` aside, by name, from
    ``GET /slurmdb/vX/accounts`` and ``GET /slurmdb/vX/associations?cluster=``."""
    known = {a["name"]: a for a in accounts.get("accounts") or [] if a.get("name")}
    own: dict[str, Json] = {}
    users: dict[str, set[str]] = {}
    for association in associations.get("associations") or []:
        if association.get("cluster") not in (None, cluster):
            continue
        account = association.get("account")
        if not account:
            continue
        users.setdefault(account, set())
        if association.get("user"):
            users[account].add(association["user"])
        elif not association.get("partition"):
            own[account] = association
    return [
        SlurmAccount(
            name=name,
            description=str((known.get(name) or {}).get("description") or ""),
            organization=str((known.get(name) or {}).get("organization") or ""),
            parent=str(association.get("parent_account") or ""),
            limits=AccountLimits(
                users=tuple(sorted(users[name])),
                gpu_minutes=gpu_minutes_limit(association),
                cpu_minutes=cpu_minutes_limit(association),
                max_submit_jobs=max_submit_jobs(association),
                job_counts=job_count_limits(association),
            ),
        )
        for name, association in sorted(own.items())
        if name != "root"
    ]
