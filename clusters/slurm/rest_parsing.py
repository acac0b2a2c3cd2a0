"""Pure functions of slurmrestd's JSON: Slurm 22.05's OpenAPI v0.0.37/v0.0.38 and the
data parsers v0.0.40-v0.0.42 of Slurm 24.11 (v0.0.42 is also in 26.05).

The two families differ in shape, not in meaning, and each parser reads both:

- numbers: 22.05 gives plain integers (NO_VAL and INFINITE as huge values); v0.0.40+
  give most as ``{"set", "infinite", "number"}`` objects (``number``);
- states: 22.05 a string (``"PENDING"``), v0.0.40+ a list of the base state and its
  flags (``["PENDING", "REQUEUED"]``; ``job_state``);
- exit codes: v0.0.40+ an object with a ``status`` list, ``return_code`` and
  ``signal.id`` in the queue as in accounting (``exit_status``);
- a partition's state and limits moved (``partition.state``, ``maximums.time``) and
  its ``DEFAULT`` flag is gone: 24.11's REST does not say which partition is the
  default;
- the job a submission describes: the script inside ``job``, the environment a list of
  ``NAME=value``, GPUs as TRES strings (``job_description``);
- "nothing found" is no longer an error (9003) but an empty list beside a warning.

The ``rest`` backend calls these; they are tested on recorded answers in
``tests/fixtures/slurmrestd/`` (22.05) and ``tests/fixtures/slurmrestd/24.11/``.
"""

import copy
import datetime as dt
import re
from typing import Any

from clusters.slurm.errors import (
    MALFORMED,
    UNAVAILABLE_MARKERS,
    NotFound,
    SlurmError,
    SlurmOutputInvalid,
    SlurmRejected,
    SlurmUnavailable,
    reads_slurm_output,
    says,
)
from clusters.slurm.parsing import TEXT_WIDTH, gpus_by_type, parse_alloc_gpus, parse_gpu_gres
from clusters.slurm.states import SlurmJobState, normalise_state
from clusters.slurm.types import (
    AccountingEntry,
    AccountLimits,
    Listing,
    MinutesUsed,
    NodeInfo,
    PartitionInfo,
    QueueEntry,
    Refused,
    SlurmAccount,
    StepUsage,
    SubmitRequest,
    refused_text,
    with_step_usage,
)

Json = dict[str, Any]

# Newest first. v0.0.36 (also in 22.05) leaves user_name, partition state and
# node partitions empty; v0.0.39 (23.02/23.11 only) is not spoken; v0.0.40-v0.0.42 are
# Slurm 24.11's (v0.0.42 also 26.05's).
SUPPORTED_VERSIONS = ("v0.0.42", "v0.0.41", "v0.0.40", "v0.0.38", "v0.0.37")
# The versions of the reshaped objects (see the module's docstring).
_RESHAPED = frozenset({"v0.0.40", "v0.0.41", "v0.0.42"})
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
_ALREADY_DONE = 2021  # ESLURM_ALREADY_DONE: cancelling a job that already ended


def reshaped(version: str | None) -> bool:
    """Whether ``version`` speaks v0.0.40+'s objects (numbers as objects, lists of states)."""
    return version in _RESHAPED


def number(value: Any) -> int | None:
    """A v0.0.40+ ``{"set", "infinite", "number"}`` or a 22.05 plain integer; None when it
    is not set, infinite, not a number or one of Slurm's NO_VAL/INFINITE values."""
    if isinstance(value, dict):
        if not value.get("set") or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if value < 0 or value >= _NO_VALUE:
        return None
    return int(value)


def number_object(value: int | None) -> Json:
    """``value`` as v0.0.40+ wants a number it may leave unset; None is "no limit"."""
    if value is None:
        return {"set": False, "infinite": True, "number": 0}
    return {"set": True, "infinite": False, "number": int(value)}


# Which name a list of states shows, as Slurm's job_state_string() picks it: a flag
# that says more than the base state first (the cli backend's squeue prints the same).
_FLAG_STATES = (
    "COMPLETING",
    "STAGE_OUT",
    "CONFIGURING",
    "RESIZING",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "SPECIAL_EXIT",
    "STOPPED",
    "RESV_DEL_HOLD",
    "REVOKED",
    "SIGNALING",
)


def job_state(value: Any) -> SlurmJobState:
    """A 22.05 state string or a v0.0.40+ list of the base state and its flags."""
    if isinstance(value, str):
        return normalise_state(value)
    names = [str(name).upper() for name in value]
    flag = next((name for name in _FLAG_STATES if name in names), None)
    return SlurmJobState(flag) if flag else normalise_state(names[0])


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
    """slurmrestd's epoch seconds (plain or as a number object); 0 means not (yet) set."""
    seconds = number(epoch)
    if not seconds:
        return None
    return dt.datetime.fromtimestamp(seconds, dt.UTC)


def _minutes(value: Any) -> int | None:
    return number(value)


def decode_wait_status(raw: int) -> tuple[int, int]:
    """slurmctld's ``exit_code`` is a raw wait status: 768 → (3, 0), 9 → (0, 9)."""
    signal = raw & 0x7F
    return (raw >> 8) & 0xFF, signal if signal != 0x7F else 0


def _jobs(payload: Json) -> list[Json]:
    jobs = payload.get("jobs") or []
    if not isinstance(jobs, list):
        raise SlurmOutputInvalid(f"'jobs' is a {type(jobs).__name__}, not a list")
    return jobs


def _refused(job: Any, error: Exception) -> Refused:
    job_id = job.get("job_id") if isinstance(job, dict) else None
    return Refused(
        job_id=job_id if isinstance(job_id, int) and not isinstance(job_id, bool) else None,
        problem=f"cannot read the record: {type(error).__name__}: {error}",
        text=refused_text(repr(job)),
    )


@reads_slurm_output
def parse_queue(payload: Json) -> Listing[QueueEntry]:
    """``GET /slurm/{v}/jobs``: every job the controller still holds, pending to just
    ended. JSON escapes what users write, so a job is one object whatever its name; one
    that does not read is refused and the others are read."""
    listing: Listing[QueueEntry] = Listing()
    for job in _jobs(payload):
        try:
            listing.append(_queue_entry(job))
        except MALFORMED as error:
            listing.refused.append(_refused(job, error))
    return listing


def _queue_entry(job: Json) -> QueueEntry:
    state = job_state(job["job_state"])
    array_job_id, array_task = None, None
    if number(job.get("array_job_id")):
        array_job_id = number(job["array_job_id"])
        task_id = number(job.get("array_task_id"))
        # A pending array is one record with task_id null and the pending
        # tasks in array_task_string, e.g. "0-3%2" (squeue's %K prints the same).
        array_task = str(task_id) if task_id is not None else job.get("array_task_string")
    pending = state == SlurmJobState.PENDING
    # Both families give the job's TRES as text: allocated once it runs, asked for
    # before (every node together, GPUs per job or per node alike).
    tres = job.get("tres_alloc_str") or job.get("tres_req_str") or ""
    return QueueEntry(
        job_id=_job_id(job["job_id"]),
        array_job_id=array_job_id,
        array_task=array_task or None,
        name=_text(job.get("name")),
        user=job.get("user_name") or str(job.get("user_id", "")),
        account=job.get("account") or "",
        partition=job.get("partition") or "",
        state=state,
        reason=job.get("state_reason") or "None",
        comment=_text(job.get("comment")),
        submitted_at=_time(job.get("submit_time")),
        # A pending job's start_time is the scheduler's forecast, not a start.
        started_at=None if pending else _time(job.get("start_time")),
        time_limit_minutes=_minutes(job.get("time_limit")),
        priority=number(job.get("priority")) or 0,
        expected_start_at=_time(job.get("start_time")) if pending else None,
        gpus=parse_alloc_gpus(tres) if isinstance(tres, str) else 0,
        nodes="" if pending else str(job.get("nodes") or ""),
    )


def _job_id(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise SlurmOutputInvalid(f"not a Slurm job id: {value!r}")
    return value


def _text(value: Any) -> str:
    """A user's text (name, comment) as the cli listings carry it: its first TEXT_WIDTH
    bytes as Slurm wrote them (the answer's bytes that are not UTF-8 arrive as
    surrogates: ``rest.RestClient._send``), spaces at the end dropped, bytes that are
    not UTF-8 replaced."""
    if not value:
        return ""
    if not isinstance(value, str):
        raise SlurmOutputInvalid(f"a text that is a {type(value).__name__}")
    try:
        written = value.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError:  # a surrogate JSON escaped ("\\ud800"): not a byte of it
        written = value.encode("utf-8", errors="replace")
    return written[:TEXT_WIDTH].rstrip(b" ").decode("utf-8", errors="replace")


@reads_slurm_output
def parse_queue_exit_codes(payload: Json) -> dict[int, tuple[int, int]]:
    """Exit code and signal of the failed jobs the controller still holds (see parse_accounting):
    22.05 gives the raw wait status, v0.0.40+ the same object as accounting."""
    codes = {}
    for job in payload.get("jobs") or []:
        if job_state(job["job_state"]) != SlurmJobState.FAILED:
            continue
        exit_code = job.get("exit_code")
        if isinstance(exit_code, dict):
            code, signal = exit_status(exit_code)
            if code is not None and signal is not None:
                codes[job["job_id"]] = (code, signal)
        else:
            codes[job["job_id"]] = decode_wait_status(int(exit_code or 0))
    return codes


@reads_slurm_output
def exit_status(exit_code: Json) -> tuple[int | None, int | None]:
    """Exit code and signal from v0.0.40+'s ``{"status": [...], "return_code", "signal":
    {"id"}}``: (None, None) when it says neither (``PENDING``, ``INVALID``)."""
    status = exit_code.get("status") or []
    statuses = {str(s).upper() for s in ([status] if isinstance(status, str) else status)}
    signal = number((exit_code.get("signal") or {}).get("id"))
    if "SIGNALED" in statuses:
        return 0, signal or 0
    return_code = number(exit_code.get("return_code"))
    if statuses & {"SUCCESS", "ERROR"} and return_code is not None:
        return return_code, 0
    return None, None


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
    code 0, whatever the code was, so a FAILED job's code is unknown here. v0.0.40+
    (a list of statuses, numbers as objects) keep the real code.
    """
    exit_code = exit_code or {}
    if isinstance(exit_code.get("status"), list):
        return exit_status(exit_code)
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


def _tres_count(tres: list[Json] | None, kind: str, name: str = "") -> int | None:
    for item in tres or []:
        if item.get("type") == kind and (item.get("name") or "") == name:
            return number(item.get("count"))
    return None


def _cpu_seconds(times: Json) -> float:
    # 22.05 lets microseconds run past a million (1 s + 1405304 µs is 2.405304 s).
    total = times.get("total") or {}
    return (number(total.get("seconds")) or 0) + (number(total.get("microseconds")) or 0) / 1e6


@reads_slurm_output
def step_usage(step: Json) -> StepUsage:
    """A step's ``time.total`` and its usage (``tres.requested``: TRESUsageIn, by the
    name both 22.05 and 24.11 give it): ``max`` mem (MaxRSS) and gres/gpumem, ``average``
    gres/gpuutil. A size of 0 is a step never sampled: not recorded."""
    usage = (step.get("tres") or {}).get("requested") or {}
    peaks, means = usage.get("max"), usage.get("average")
    util = _tres_count(means, "gres", "gpuutil")
    return StepUsage(
        cpu_time_s=_cpu_seconds(step.get("time") or {}),
        mem_peak_bytes=_tres_count(peaks, "mem") or None,
        gpu_util_percent=float(util) if util is not None else None,
        gpu_mem_peak_bytes=_tres_count(peaks, "gres", "gpumem") or None,
    )


@reads_slurm_output
def parse_accounting(payload: Json) -> Listing[AccountingEntry]:
    """``GET /slurmdb/{v}/jobs``: one entry per run of a job or array task, the usage of
    its steps (when asked without ``skip_steps``) folded in.

    A requeued job comes once per run, each with its own submit time and steps (22.05's
    slurmrestd lists every run; 24.11's only when asked with ``show_duplicates=true``, as
    sacct's ``--duplicates``): every run is kept (each is charged). A job that does not
    read is refused and the others are read."""
    listing: Listing[AccountingEntry] = Listing()
    for job in _jobs(payload):
        try:
            listing.append(_accounting_entry(job))
        except MALFORMED as error:
            listing.refused.append(_refused(job, error))
    return listing


def _accounting_entry(job: Json) -> AccountingEntry:
    state = job_state(job["state"]["current"])
    code, signal = accounting_exit_code(job.get("exit_code"), state)
    array = job.get("array") or {}
    array_job_id, array_task = None, None
    if number(array.get("job_id")):
        array_job_id = number(array["job_id"])
        task_id = number(array.get("task_id"))
        array_task = str(task_id) if task_id is not None else pending_array_tasks(array)
    times = job.get("time") or {}
    entry = AccountingEntry(
        job_id=_job_id(job["job_id"]),
        array_job_id=array_job_id,
        array_task=array_task,
        name=_text(job.get("name")),
        # 22.05 names the user through the association only, and a run that never
        # started after a requeue may have none (``types.accounting_checked``).
        user=job.get("user") or (job.get("association") or {}).get("user") or "",
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
        # 24.11 gives a job still running "now" as its end unless asked with
        # disable_truncate_usage_time: only an ended job has an end.
        ended_at=_time(times.get("end")) if state not in _UNENDED else None,
        # With AccountingStoreFlags=job_comment; null (24.11: "") until the job ends.
        comment=_text((job.get("comment") or {}).get("job")),
        time_limit_minutes=_minutes(times.get("limit")),
        mem_allocated_bytes=_mib_as_bytes(
            _tres_count((job.get("tres") or {}).get("allocated"), "mem")
        ),
    )
    return with_step_usage(entry, [step_usage(step) for step in job.get("steps") or []])


def _mib_as_bytes(mib: int | None) -> int | None:
    return mib * 2**20 if mib else None


# A run in these states has not ended. REQUEUED is not among them: in accounting a record
# in that state is a run that ended when its job was requeued (each run has its own
# record, with its own submit time), and the job's next run is another record.
_UNENDED = frozenset(
    {
        SlurmJobState.PENDING,
        SlurmJobState.RUNNING,
        SlurmJobState.SUSPENDED,
        SlurmJobState.CONFIGURING,
        SlurmJobState.COMPLETING,
        SlurmJobState.RESIZING,
        SlurmJobState.SIGNALING,
        SlurmJobState.STAGE_OUT,
    }
)


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
        if "maximums" in partition:  # v0.0.40+: no flags, so no DEFAULT either
            states = (partition.get("partition") or {}).get("state") or []
            is_up = [str(state).upper() for state in states] == ["UP"]
            max_time = (partition.get("maximums") or {}).get("time")
            total_nodes = (partition.get("nodes") or {}).get("total")
        else:
            is_up = str(partition.get("state") or "").upper() == "UP"
            max_time = partition.get("max_time_limit")
            total_nodes = partition.get("total_nodes")
        result.append(
            PartitionInfo(
                name=name,
                is_default="default" in flags,
                is_up=is_up,
                max_time_minutes=_minutes(max_time),
                nodes=int(total_nodes or len(gres)),
                gpus_per_node=max((count for _, count in gres), default=0),
                gpu_type=next((gpu_type for gpu_type, _ in gres if gpu_type), ""),
                total_gpus=sum(count for _, count in gres),
            )
        )
    return result


@reads_slurm_output
def parse_nodes(payload: Json) -> list[NodeInfo]:
    """``GET /slurm/{v}/nodes``: 22.05 gives the base state as a string beside
    ``state_flags``, v0.0.40+ one list of both (as ``node_states`` reads scontrol's)."""
    nodes = []
    for node in payload.get("nodes") or []:
        state = node.get("state") or []
        states = [state] if isinstance(state, str) else list(state)
        states += list(node.get("state_flags") or [])
        nodes.append(
            NodeInfo(
                name=str(node["name"]),
                partitions=tuple(str(p) for p in node.get("partitions") or []),
                states=tuple(str(s).lower() for s in states) or ("unknown",),
                reason=str(node.get("reason") or ""),
                gpus_by_type=gpus_by_type(str(node.get("gres") or "")),
                allocated_gpus=parse_alloc_gpus(str(node.get("tres_used") or "")),
                cpus=number(node.get("cpus")) or 0,
                allocated_cpus=number(node.get("alloc_cpus")) or 0,
            )
        )
    return nodes


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
    return {"GrpSubmitJobs": _limit(per.get("submitted")), "GrpJobs": _limit(per.get("count"))}


def _limit(value: Any) -> int | None:
    """A job-count limit: 22.05 leaves an unset one out, v0.0.40+ say so in the object."""
    if value is None:
        return None
    if isinstance(value, dict):
        return number(value)
    return int(value)


@reads_slurm_output
def max_submit_jobs(association: Json) -> int | None:
    """The association's ``MaxSubmitJobs``: ``max.jobs.total`` in v0.0.38 (``max.jobs.per.
    submitted`` is GrpSubmitJobs), as sacctmgr set them on the dev cluster."""
    return _limit(((association.get("max") or {}).get("jobs") or {}).get("total"))


@reads_slurm_output
def with_limits(
    association: Json,
    *,
    minutes: dict[str, int | None] | None = None,
    jobs: dict[str, int | None] | None = None,
) -> Json:
    """The account's own association as v0.0.40+ read it, with ``minutes`` (by TRES name,
    ``gres/gpu`` or ``cpu``) in ``max.tres.group.minutes`` and ``jobs`` (by the names of
    ``AccountLimits``: MaxSubmitJobs, GrpSubmitJobs, GrpJobs) changed, None clearing one.

    24.11 applies a POSTed association as a whole: a TRES list it is sent replaces the
    stored one (so every other TRES is sent as it was) and a TRES list left out is
    cleared. So the association goes back as it was read, with only these changed.
    """
    changed = copy.deepcopy(association)
    limits = changed.setdefault("max", {})
    if minutes:
        group = limits.setdefault("tres", {}).setdefault("group", {})
        kept = [item for item in group.get("minutes") or [] if _tres_name(item) not in minutes]
        added = [
            {"type": tres.partition("/")[0], "name": tres.partition("/")[2], "count": count}
            for tres, count in minutes.items()
            if count is not None
        ]
        group["minutes"] = kept + added
    for name, value in (jobs or {}).items():
        path = _JOB_LIMIT_PATHS[name]
        where = limits.setdefault("jobs", {})
        for key in path[:-1]:
            where = where.setdefault(key, {})
        where[path[-1]] = number_object(value)
    return changed


@reads_slurm_output
def limits_hold(
    association: Json,
    *,
    minutes: dict[str, int | None] | None = None,
    jobs: dict[str, int | None] | None = None,
) -> bool:
    """Whether the association already has these limits (see ``with_limits``)."""
    for tres, wanted in (minutes or {}).items():
        kind, _, name = tres.partition("/")
        if tres_minutes_limit(association, {"type": kind, "name": name}) != wanted:
            return False
    current = {**job_count_limits(association), "MaxSubmitJobs": max_submit_jobs(association)}
    return all(current[name] == wanted for name, wanted in (jobs or {}).items())


# Where v0.0.38 and v0.0.40+ keep the job-count limits under ``max.jobs`` (what
# max_submit_jobs and job_count_limits read).
_JOB_LIMIT_PATHS = {
    "MaxSubmitJobs": ("total",),
    "GrpSubmitJobs": ("per", "submitted"),
    "GrpJobs": ("per", "count"),
}


def _tres_name(item: Json) -> str:
    return "/".join(part for part in (item.get("type"), item.get("name")) if part)


@reads_slurm_output
def minutes_used(payload: Json, account: str) -> MinutesUsed | None:
    """``GET /slurm/{v}/shares`` (v0.0.40+): the account's raw GPU and CPU usage in whole
    minutes, as sshare's GrpTRESRaw prints it (``tres.usage`` is in TRES-seconds), with
    each of its users' GPU- and CPU-minutes (their shares are of type USER, named for the user,
    the account their parent); None when the answer has no such account."""
    shares = (payload.get("shares") or {}).get("shares") or []
    user_shares = [
        share
        for share in shares
        if share.get("parent") == account
        and "USER" in {str(t).upper() for t in share.get("type") or []}
        and not share.get("partition")
    ]
    users = {
        str(share.get("name")): int(float(_usage(share).get("gres/gpu") or 0) // 60)
        for share in user_shares
    }
    users_cpu = {
        str(share.get("name")): int(float(_usage(share).get("cpu") or 0) // 60)
        for share in user_shares
    }
    for share in shares:
        types = {str(t).upper() for t in share.get("type") or []}
        if share.get("name") != account or "ASSOCIATION" not in types or share.get("partition"):
            continue
        usage = _usage(share)
        return MinutesUsed(
            gpu=int(float(usage.get("gres/gpu") or 0) // 60),
            cpu=int(float(usage.get("cpu") or 0) // 60),
            share=_share_number(share.get("shares_normalized")),
            usage=_share_number(share.get("effective_usage")),
            users_gpu=users,
            users_cpu=users_cpu,
        )
    return None


def _usage(share: Json) -> dict[str, Any]:
    return {
        item.get("name"): item.get("value") for item in (share.get("tres") or {}).get("usage") or []
    }


def _share_number(value: Json) -> float | None:
    """A fraction of /shares, a number object ``{set, infinite, number}`` (or a bare number)."""
    number: object = value
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        number = value.get("number")
    if isinstance(number, int | float) and not isinstance(number, bool):
        return float(number) if 0 <= number < float("inf") else None
    return None


@reads_slurm_output
def cancel_outcome(payload: Json | None) -> set[int]:
    """The error numbers of a v0.0.41+ cancellation's per-job ``status`` list (its ``errors``
    stay empty when slurmctld refused one job): 2017 for an id it does not know, 2021
    for a job that already ended. v0.0.40 (and 22.05) send no status."""
    codes = set()
    for status in (payload or {}).get("status") or []:
        code = (status.get("error") or {}).get("code")
        if isinstance(code, int) and code:
            codes.add(code)
    return codes


@reads_slurm_output
def cancel_message(payload: Json | None) -> str:
    return "; ".join(
        str((status.get("error") or {}).get("message") or "")
        for status in (payload or {}).get("status") or []
        if (status.get("error") or {}).get("code")
    )


def job_description(request: SubmitRequest, version: str | None = None) -> Json:
    """The ``job`` object of ``POST /slurm/{v}/job/submit``.

    slurmrestd starts the job with exactly ``environment`` (no --export, no
    login environment) but refuses an empty one ("environment must be set");
    SLURM_JOB_NAME is the one variable Slurm sets to the same value anyway.
    Without PATH, bash falls back to its built-in search path.

    v0.0.40+ (``version``) want the script inside the job, the environment as a list of
    ``NAME=value``, the time limit as a number object (v0.0.40 warns about a plain
    one), the node count as text and GPUs as TRES strings: they have no
    ``gpus_per_node``, and 24.11 *ignores* a key it does not know (with a warning, the
    job queued anyway), so only keys of its job_desc_msg may be sent.

    Requeue is always said, as Slurm's default is the site's JobRequeue: v0.0.40+ read
    ``requeue`` as the boolean it is; 22.05 reads ``requeue`` and ``no_requeue`` as
    sbatch's flags, either one set whatever its value (``"requeue": false`` asks for
    requeue), so it is sent the one that means what is wanted.
    """
    for key in request.environment:
        if not key or "=" in key:
            raise ValueError(f"environment variable {key!r} cannot be passed to slurmrestd")
    environment = dict(request.environment) or {"SLURM_JOB_NAME": request.name}
    job: Json = {
        "account": request.account,
        "partition": request.partition,
        "name": request.name,
        "nodes": request.nodes,
        "time_limit": request.time_limit_minutes,
        "current_working_directory": request.working_directory,
        "standard_output": request.stdout_path,
        "standard_error": request.stderr_path,
        "environment": environment,
    }
    dependency = "afterok:" + ":".join(map(str, request.after_ok)) if request.after_ok else ""
    if reshaped(version):
        job.update(
            script=request.script,
            nodes=str(request.nodes),
            time_limit=number_object(request.time_limit_minutes),
            environment=[f"{key}={value}" for key, value in environment.items()],
        )
        gpu = "gres/gpu"
        optional: dict[str, Any] = {
            "tres_per_node": f"{gpu}={request.gpus_per_node}" if request.gpus_per_node else "",
            "cpus_per_tres": f"{gpu}:{request.cpus_per_gpu}" if request.cpus_per_gpu else "",
            "memory_per_tres": f"{gpu}:{request.mem_per_gpu_mb}" if request.mem_per_gpu_mb else "",
        }
        job["requeue"] = request.requeue
    else:
        job["requeue" if request.requeue else "no_requeue"] = True
        optional = {
            # 22.05 refuses tres_per_node/tres_per_job ("Unknown key").
            "gpus_per_node": request.gpus_per_node,
            "cpus_per_gpu": request.cpus_per_gpu,
            "memory_per_gpu": request.mem_per_gpu_mb,
        }
    optional.update(array=request.array, dependency=dependency, comment=request.comment)
    job.update({key: value for key, value in optional.items() if value})
    return job


def submit_body(request: SubmitRequest, version: str | None) -> Json:
    """The body of ``POST /slurm/{v}/job/submit``: v0.0.41+ deprecate the outer script."""
    if reshaped(version):
        return {"job": job_description(request, version)}
    return {"script": request.script, "job": job_description(request, version)}


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
