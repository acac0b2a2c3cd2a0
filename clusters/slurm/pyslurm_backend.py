"""The ``pyslurm`` backend: libslurm through the pyslurm binding, in-process.

For sites whose worker runs as root or SlurmUser (an optional extra). libslurm
authenticates every request as the worker's own uid, so a job is submitted for
its owner with the submit description's ``user_id``/``group_id``, which only
root and SlurmUser may set; cancel, hold and release are made by the worker
and checked against the job's owner here, since Slurm itself would let
the worker act on anyone's job.

Written against pyslurm 22.5.3 (the last release for Slurm 22.05) and never
run: the binding must match the cluster's Slurm, and PyPI only has 25.11.
Jobs, nodes and partitions use the new API of 22.5.x (``pyslurm.Jobs``,
``pyslurm.Job``, ``pyslurm.JobSubmitDescription``, ``pyslurm.Nodes``,
``pyslurm.Partitions``). Accounting uses the older ``pyslurm.slurmdb_jobs``,
still shipped in 22.5.x, because ``pyslurm.db.Job`` of that series does not
expose a job's allocated TRES.

Timeouts: pyslurm calls block in C, holding the GIL, and cannot be
interrupted; each one is bounded by Slurm's own MessageTimeout (slurm.conf),
not by ``timeout_s``, which is kept for the record and for callers that
report it.
"""

import contextlib
import datetime as dt
import functools
import os
import pwd
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pyslurm  # type: ignore[import-not-found]

from clusters.slurm.errors import (
    ALREADY_ENDED_MARKERS,
    NotFound,
    SlurmError,
    SlurmRejected,
    SlurmUnavailable,
    error_from_message,
)
from clusters.slurm.parsing import parse_alloc_gpus, parse_gpu_gres
from clusters.slurm.rest_parsing import decode_wait_status, pending_array_tasks
from clusters.slurm.states import SlurmJobState, normalise_state
from clusters.slurm.types import (
    AccountingEntry,
    PartitionInfo,
    QueueEntry,
    StartEstimate,
    SubmitRequest,
)

# How far back find_by_comment looks in accounting, as the other backends do.
_FIND_WINDOW = dt.timedelta(days=14)
# Added to the accounting window: slurmdbd counts "now" on its own clock.
_WINDOW_SLACK_S = 10
# slurmdb.h (22.05): JOBCOND_FLAG_NO_STEP | JOBCOND_FLAG_NO_TRUNC, i.e. sacct
# --allocations without --truncate (start, end and elapsed as they were).
_JOB_COND_FLAGS = 0x2 | 0x4
_NO_VAL = 0xFFFFFFFE
_ENDED_STATES = frozenset(
    {
        SlurmJobState.BOOT_FAIL,
        SlurmJobState.CANCELLED,
        SlurmJobState.COMPLETED,
        SlurmJobState.DEADLINE,
        SlurmJobState.FAILED,
        SlurmJobState.NODE_FAIL,
        SlurmJobState.OUT_OF_MEMORY,
        SlurmJobState.PREEMPTED,
        SlurmJobState.TIMEOUT,
    }
)
_PYSLURM_ERRORS: tuple[type[BaseException], ...] = (
    pyslurm.RPCError,
    getattr(pyslurm, "PyslurmError", pyslurm.RPCError),
    # pyslurm's own checks of a description, and the old API's failures
    # (``ValueError(strerror, errno)``).
    ValueError,
)
# pyslurm copies every SLURM_* variable of the process into a job's
# environment; they are taken out of os.environ while a job is described.
_ENVIRON_LOCK = threading.Lock()
_KEPT_SLURM_VARIABLES = frozenset({"SLURM_CONF"})  # libslurm may need it to find slurm.conf


# --- errors ----------------------------------------------------------------------------


def _message(exc: BaseException) -> str:
    text = getattr(exc, "msg", None) or (exc.args[0] if exc.args else "") or str(exc)
    return str(text).strip() or type(exc).__name__


def error_for(exc: BaseException, where: str) -> SlurmError:
    """The client error for a pyslurm failure, by Slurm's own message."""
    message = _message(exc)
    error = error_from_message(message)
    if isinstance(error, SlurmRejected):
        return error  # Slurm's own words, for the user
    return type(error)(f"{where}: {message}")


@contextlib.contextmanager
def _translated(where: str) -> Iterator[None]:
    try:
        yield
    except _PYSLURM_ERRORS as exc:
        raise error_for(exc, where) from exc


# --- values pyslurm gives ----------------------------------------------------------------


def _values(collection: Any) -> Iterable[Any]:
    """The records of a pyslurm collection: a dict in 22.5.2, a per-cluster map in 22.5.3."""
    return collection.values() if hasattr(collection, "values") else collection


def _attribute(record: Any, *names: str) -> Any:
    """The first of ``names`` the record has (attribute names moved during 22.5.x)."""
    for name in names:
        value = getattr(record, name, None)
        if value is not None:
            return value
    return None


def _count(value: Any) -> int | None:
    """A Slurm number, None for unset, NO_VAL or INFINITE."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value >= _NO_VAL:
        return None
    return value


def _time(epoch: Any) -> dt.datetime | None:
    seconds = _count(epoch)
    return dt.datetime.fromtimestamp(seconds, dt.UTC) if seconds else None


def _timestamp(record: Any, name: str) -> dt.datetime | None:
    # Development versions of 22.5 had formatted ``submit_time`` and the epoch in ``*_raw``.
    return _time(_attribute(record, f"{name}_raw", name))


@functools.lru_cache(maxsize=1024)  # a queue repeats its owners many times
def user_name(uid: Any) -> str:
    """The name of a uid, or the uid itself (pyslurm's own lookup raises for an unknown one)."""
    try:
        return pwd.getpwuid(int(uid)).pw_name
    except (KeyError, TypeError, ValueError):
        return str(uid)


def job_owner(job: Any) -> str:
    # ``user_id`` in 22.5 releases, ``uid`` while the new API was developed.
    return user_name(_attribute(job, "user_id", "uid"))


# --- the queue -----------------------------------------------------------------------------


def _queue_array_task(job: Any) -> tuple[int | None, str | None]:
    array_job_id = _count(job.array_id) or None
    if array_job_id is None:
        return None, None
    task_id = _count(job.array_task_id)
    if task_id is not None:
        return array_job_id, str(task_id)
    # A pending array: pyslurm strips the "%N" limit that squeue's %K keeps.
    waiting = job.array_tasks_waiting
    limit = _count(job.array_tasks_parallel)
    if waiting and limit:
        waiting = f"{waiting}%{limit}"
    return array_job_id, waiting or None


def queue_entry(job: Any) -> QueueEntry:
    """One ``pyslurm.Job`` as squeue shows it."""
    state = normalise_state(job.state)
    array_job_id, array_task = _queue_array_task(job)
    time_limit = _attribute(job, "time_limit_raw", "time_limit")
    return QueueEntry(
        job_id=int(job.id),
        array_job_id=array_job_id,
        array_task=array_task,
        name=job.name or "",
        user=job_owner(job),
        account=job.account or "",
        partition=job.partition or "",
        state=state,
        reason=job.state_reason or "None",
        comment=job.comment or "",
        submitted_at=_timestamp(job, "submit_time"),
        # A pending job's start time is the scheduler's forecast, not a start.
        started_at=_timestamp(job, "start_time") if state != SlurmJobState.PENDING else None,
        time_limit_minutes=_count(time_limit),
    )


# --- accounting ----------------------------------------------------------------------------


def named_tres(tres_ids: str, names: Mapping[int, str]) -> str:
    """``1=2,1001=2`` (slurmdbd's TRES ids) as ``cpu=2,gres/gpu=2``; unknown ids are dropped."""
    items = []
    for item in (tres_ids or "").split(","):
        tres_id, _, count = item.partition("=")
        if tres_id.strip().isdigit() and int(tres_id) in names:
            items.append(f"{names[int(tres_id)]}={count}")
    return ",".join(items)


def _accounting_array_task(record: Mapping[str, Any]) -> tuple[int | None, str | None]:
    array_job_id = _count(record.get("array_job_id")) or None
    if array_job_id is None:
        return None, None
    task_id = _count(record.get("array_task_id"))
    if task_id is not None:
        return array_job_id, str(task_id)
    # Tasks not started yet are a hex bitmap in the database, as in slurmrestd's answer.
    limit = _count(record.get("array_max_tasks"))
    array = {
        "task": record.get("array_task_str") or "",
        "limits": {"max": {"running": {"tasks": limit}}},
    }
    return array_job_id, pending_array_tasks(array)


def accounting_entry(record: Mapping[str, Any], tres_names: Mapping[int, str]) -> AccountingEntry:
    """One record of ``pyslurm.slurmdb_jobs().get()`` as sacct shows it."""
    array_job_id, array_task = _accounting_array_task(record)
    ended_at = _time(record.get("end"))
    # A raw wait status, as sacct decodes it into ExitCode; none until the job ends.
    code, signal = (
        decode_wait_status(int(record.get("exitcode") or 0)) if ended_at else (None, None)
    )
    return AccountingEntry(
        job_id=int(record["jobid"]),
        array_job_id=array_job_id,
        array_task=array_task,
        name=record.get("jobname") or "",
        user=record.get("user") or user_name(record.get("uid")),
        account=record.get("account") or "",
        partition=record.get("partition") or "",
        state=normalise_state(record.get("state_str") or ""),
        exit_code=code,
        signal=signal,
        allocated_gpus=parse_alloc_gpus(named_tres(record.get("tres_alloc_str") or "", tres_names)),
        elapsed_s=_count(record.get("elapsed")) or 0,
        submitted_at=_time(record.get("submit")),
        started_at=_time(record.get("start")),
        ended_at=ended_at,
        # The job comment is kept in derived_es (AccountingStoreFlags=job_comment).
        comment=record.get("derived_es") or "",
    )


# --- partitions ------------------------------------------------------------------------------


def _gres_text(gres: Mapping[str, Any]) -> str:
    """pyslurm's GRES dict (``{"gpu:h200": 8}``) back in Slurm's text (``gpu:h200:8``)."""
    items = []
    for name, value in (gres or {}).items():
        count = value.get("count") if isinstance(value, Mapping) else value
        items.append(f"{name}:{count}")
    return ",".join(items)


def partition_info(partition: Any, nodes: list[Any]) -> PartitionInfo:
    gres = [
        parse_gpu_gres(_gres_text(node.configured_gres))
        for node in nodes
        if partition.name in (node.partitions or [])
    ]
    max_time = partition.max_time_limit  # minutes, or "UNLIMITED"
    return PartitionInfo(
        name=partition.name,
        is_default=bool(partition.is_default),
        is_up=str(partition.state).upper() == "UP",
        max_time_minutes=_count(max_time),
        nodes=_count(partition.total_nodes) or len(gres),
        gpus_per_node=max((count for _, count in gres), default=0),
        gpu_type=next((gpu_type for gpu_type, _ in gres if gpu_type), ""),
        total_gpus=sum(count for _, count in gres),
    )


# --- submission --------------------------------------------------------------------------------


def _environment(environment: Mapping[str, str]) -> dict[str, str] | str:
    for key in environment:
        if not key or "=" in key:
            raise ValueError(f"environment variable {key!r} cannot be passed to pyslurm")
    # pyslurm turns an empty environment into "ALL", the worker's whole
    # environment; "NONE" is sbatch's --export=NONE.
    return dict(environment) or "NONE"


def submit_description(request: SubmitRequest, script_path: str) -> Any:
    """The job ``cli.sbatch_arguments(request)`` describes, as ``request.user``.

    The script is passed as a file: pyslurm first asks whether ``script``
    names a file, and on Python < 3.13 that question raises OSError for a
    script text longer than a path may be, instead of answering no.
    """
    try:
        owner = pwd.getpwnam(request.user)
    except KeyError as exc:
        raise SlurmRejected(f"{request.user!r} is not a user on this worker") from exc
    attributes: dict[str, Any] = {
        "user_id": owner.pw_uid,
        "group_id": owner.pw_gid,
        "script": script_path,
        "name": request.name,
        "account": request.account,
        "partitions": request.partition,
        "nodes": request.nodes,
        # pyslurm defaults to one task; one per node keeps a multi-node job
        # as sbatch would describe it.
        "ntasks": request.nodes,
        "time_limit": str(request.time_limit_minutes),  # plain minutes, as --time=N
        "working_directory": request.working_directory,
        "standard_output": request.stdout_path,
        "standard_error": request.stderr_path,
        "environment": _environment(request.environment),
        # Like sbatch --export: the job also gets its owner's login environment.
        "get_user_environment": True,
    }
    if request.gpus_per_node:
        attributes["gres_per_node"] = {"gpu": request.gpus_per_node}  # --gpus-per-node
        if request.cpus_per_gpu:
            attributes["cpus_per_gpu"] = request.cpus_per_gpu
        if request.mem_per_gpu_mb:
            # pyslurm 22.5's memory_per_gpu fails with a NameError before
            # anything is sent; the same memory per node is what Slurm
            # allocates for --mem-per-gpu with --gpus-per-node.
            attributes["memory_per_node"] = request.mem_per_gpu_mb * request.gpus_per_node
    if request.array:
        attributes["array"] = request.array
    if request.after_ok:
        attributes["dependencies"] = "afterok:" + ":".join(str(i) for i in request.after_ok)
    if request.comment:
        attributes["comment"] = request.comment
    return pyslurm.JobSubmitDescription(**attributes)


@contextlib.contextmanager
def _without_worker_slurm_variables() -> Iterator[None]:
    """Hide the worker's SLURM_* variables from pyslurm while it builds a job's environment.

    The lock keeps two submissions from restoring each other's view; other
    threads of the process briefly see the variables missing.
    """
    with _ENVIRON_LOCK:
        hidden = {
            key: os.environ.pop(key)
            for key in list(os.environ)
            if key.startswith("SLURM_") and key not in _KEPT_SLURM_VARIABLES
        }
        try:
            yield
        finally:
            os.environ.update(hidden)


class PyslurmClient:
    def __init__(self, *, cluster_name: str, timeout_s: float) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self.cluster_name = cluster_name
        # See the module's docstring: Slurm's MessageTimeout bounds each call.
        self.timeout_s = timeout_s
        self._tres_names: dict[int, str] | None = None

    # --- jobs ------------------------------------------------------------------------------

    def ping(self) -> None:
        with _translated("ping slurmctld"):
            code = pyslurm.slurm_ping(0)
        if code != 0:
            raise SlurmUnavailable(
                f"slurmctld did not answer the ping: {pyslurm.slurm_strerror(code)}"
            )

    def submit(self, request: SubmitRequest) -> int:
        with tempfile.NamedTemporaryFile("w", prefix="portal-job-", suffix=".sh") as script:
            script.write(request.script)
            script.flush()
            description = submit_description(request, script.name)
            with _translated(f"submit a job for {request.user}"), _without_worker_slurm_variables():
                return int(description.submit())

    def find_by_comment(self, comment: str) -> list[int]:
        def ids(entries: Iterable[QueueEntry | AccountingEntry]) -> list[int]:
            # An array's tasks share its comment; the array's own id is what submit returned.
            found = (e.array_job_id or e.job_id for e in entries if e.comment == comment)
            return sorted(set(found))

        queued = ids(self.queue())
        if queued:
            return queued
        since = dt.datetime.now(dt.UTC) - _FIND_WINDOW
        return ids(self._accounting(since=since, tres_names={}))

    def queue(self) -> list[QueueEntry]:
        with _translated("load the queue"):
            jobs = pyslurm.Jobs.load()
        return [queue_entry(job) for job in _values(jobs)]

    def accounting_since(self, since: dt.datetime) -> list[AccountingEntry]:
        return self._accounting(since=since, tres_names=self._gpu_tres_names())

    def _accounting(
        self,
        *,
        tres_names: Mapping[int, str],
        since: dt.datetime | None = None,
        job_ids: list[int] | None = None,
    ) -> list[AccountingEntry]:
        query: dict[str, Any] = {"flags": _JOB_COND_FLAGS, "clusters": [self.cluster_name]}
        if since is not None:
            # slurm_parse_time reads a date in the worker's time zone; a time
            # relative to slurmdbd's "now" needs none.
            seconds = max(0, int((dt.datetime.now(dt.UTC) - since).total_seconds()))
            query["starttime"] = f"now-{seconds + _WINDOW_SLACK_S}seconds"
        if job_ids:
            query["jobids"] = job_ids
        with _translated("load accounting"):
            records = pyslurm.slurmdb_jobs().get(**query)
        return [accounting_entry(record, tres_names) for record in records.values()]

    def _gpu_tres_names(self) -> dict[int, str]:
        """slurmdbd's ids of the gres/gpu TRES (``1001`` → ``gres/gpu``), read once."""
        if self._tres_names is None:
            loader = getattr(getattr(pyslurm, "db", None), "TrackableResources", None)
            if loader is None or not hasattr(loader, "load"):
                raise SlurmRejected(
                    f"pyslurm {getattr(pyslurm, '__version__', '?')} cannot read slurmdbd's TRES "
                    "list (no pyslurm.db.TrackableResources.load), so allocated GPUs cannot be "
                    "counted from accounting; use the cli backend"
                )
            with _translated("load the TRES list"):
                resources = loader.load(name_is_key=False)
            self._tres_names = {
                int(tres.id): f"{tres.type}/{tres.name}"
                for tres in resources.values()
                if tres.type == "gres" and str(tres.name or "").split(":")[0] == "gpu"
            }
        return self._tres_names

    def _owned_job(self, job_id: int, user: str) -> Any | None:
        """The job as slurmctld holds it, if ``user`` owns it; None when it ended and was purged.

        The worker acts as root or SlurmUser, whom Slurm lets touch any job,
        so the owner check scancel or scontrol would make for ``user`` is made here.
        """
        try:
            with _translated(f"load job {job_id}"):
                job = pyslurm.Job.load(job_id)
        except NotFound:
            # slurmctld forgets a job MinJobAge after it ended and then answers
            # "Invalid job id" as for one that never was; accounting tells them apart.
            if self._accounting(job_ids=[job_id], tres_names={}):
                return None
            raise
        owner = job_owner(job)
        if owner != user:
            raise SlurmRejected(f"Access/permission denied: job {job_id} belongs to {owner}")
        return job

    def cancel(self, job_id: int, *, user: str) -> None:
        job = self._owned_job(job_id, user)
        if job is None or normalise_state(job.state) in _ENDED_STATES:
            return
        try:
            with _translated(f"cancel job {job_id}"):
                # SIGKILL to the whole job, as scancel does.
                pyslurm.Job(job_id).cancel()
        except (NotFound, SlurmRejected) as exc:
            # It ended (and maybe was purged) between the look and the kill.
            if isinstance(exc, NotFound) or any(
                marker in str(exc).lower() for marker in ALREADY_ENDED_MARKERS
            ):
                return
            raise

    def hold(self, job_id: int, *, user: str) -> None:
        if self._owned_job(job_id, user) is None:
            raise SlurmRejected(f"job {job_id} has already ended")
        # Priority 0 from root or SlurmUser is an administrator's hold
        # (JobHeldAdmin): pyslurm 22.5's hold(mode="user") writes through an
        # unallocated job description, so a user hold cannot be asked for.
        with _translated(f"hold job {job_id}"):
            pyslurm.Job(job_id).hold()

    def release(self, job_id: int, *, user: str) -> None:
        if self._owned_job(job_id, user) is None:
            raise SlurmRejected(f"job {job_id} has already ended")
        with _translated(f"release job {job_id}"):
            pyslurm.Job(job_id).release()

    def list_partitions(self) -> list[PartitionInfo]:
        with _translated("load the partitions and nodes"):
            partitions = pyslurm.Partitions.load()
            nodes = list(_values(pyslurm.Nodes.load()))
        return [partition_info(partition, nodes) for partition in _values(partitions)]

    def estimate_start(self, request: SubmitRequest) -> StartEstimate:
        # pyslurm 22.5 has no will-run call (JobSubmitDescription only submits).
        return StartEstimate(starts_at=None, nodes="")

    # --- accounts and limits ------------------------------------------------------------------

    @staticmethod
    def _no_associations(what: str) -> SlurmRejected:
        return SlurmRejected(
            f"pyslurm 22.5 cannot {what}: it has no API for slurmdbd accounts, associations "
            "or their usage (pyslurm.db.Associations is a work in progress of later "
            "releases); use the cli backend or sacctmgr"
        )

    def ensure_account(self, account: str, *, description: str) -> bool:
        raise self._no_associations(f"create the account {account!r}")

    def ensure_user_association(self, *, user: str, account: str) -> bool:
        raise self._no_associations(f"give {user!r} an association with {account!r}")

    def account_users(self, account: str) -> list[str]:
        raise self._no_associations(f"list the users of the account {account!r}")

    def remove_user_association(self, *, user: str, account: str) -> bool:
        raise self._no_associations(f"remove {user!r}'s association with {account!r}")

    def gpu_minutes_limit(self, account: str) -> int | None:
        raise self._no_associations(f"read GrpTRESMins of the account {account!r}")

    def set_gpu_minutes_limit(self, account: str, minutes: int | None) -> None:
        raise self._no_associations(f"set GrpTRESMins on the account {account!r}")

    def gpu_minutes_used(self, account: str) -> int:
        raise self._no_associations(f"read the GPU usage of the account {account!r}")
