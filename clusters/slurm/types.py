"""Typed requests and results of the Slurm client protocol."""

import datetime as dt
import hashlib
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, TypeVar

from clusters.slurm.states import SlurmJobState

# The organization of every account the portal creates in Slurm: how the reconciler
# tells its own accounts from those a site made by hand (it changes only its own).
PORTAL_ORGANIZATION = "portal"


@dataclass(frozen=True)
class PartitionInfo:
    name: str
    is_default: bool
    is_up: bool
    max_time_minutes: int | None  # None: no limit
    nodes: int
    gpus_per_node: int
    gpu_type: str
    total_gpus: int


@dataclass(frozen=True)
class SubmitRequest:
    """One batch job, fully typed; every adapter turns it into the same Slurm job.

    The authoritative resources (account, partition, nodes, GPUs, time) are
    given to Slurm outside the script, so they win over any directive in it.
    """

    user: str  # the POSIX user the job runs as
    script: str  # the whole batch script, starting with "#!"
    account: str
    partition: str
    name: str
    time_limit_minutes: int
    working_directory: str
    stdout_path: str
    stderr_path: str
    nodes: int = 1
    gpus_per_node: int = 0
    cpus_per_gpu: int | None = None
    mem_per_gpu_mb: int | None = None
    environment: dict[str, str] = field(default_factory=dict)
    array: str | None = None  # Slurm's spec, e.g. "0-9%2"
    after_ok: tuple[int, ...] = ()  # Slurm job ids this one waits for
    comment: str = ""  # the portal puts "portal:<submit token>" here
    # Whether Slurm may run the job again (a node failure, a preemption, its owner's
    # ``scontrol requeue``): said either way, as Slurm's default is the site's JobRequeue.
    requeue: bool = False


# Queue and accounting records are NamedTuples, not dataclasses: a sync builds
# thousands of them per call, and a frozen dataclass costs three times as much
# to construct (bench/slurm_client.py).
class QueueEntry(NamedTuple):
    """A job (or one array task, or a still-pending array) as the queue shows it."""

    job_id: int  # Slurm's own id of this record
    array_job_id: int | None  # the array's id, for an array task or pending array
    array_task: str | None  # "3", or "[4-9%2]" for the tasks not started yet
    name: str
    user: str
    account: str
    partition: str
    state: SlurmJobState
    reason: str  # why it pends, or "None"
    comment: str
    submitted_at: dt.datetime | None
    started_at: dt.datetime | None
    time_limit_minutes: int | None
    # Appended with defaults, so a record built without them still reads.
    priority: int = 0  # Slurm's priority (squeue %Q): higher starts first
    expected_start_at: dt.datetime | None = None  # a pending job's forecast start, if any
    gpus: int = 0  # GPUs the job (or array task) asks for or holds, all its nodes together
    nodes: str = ""  # the compressed node list a running job holds, e.g. "gpu[01-03,05]"
    # False where the listing cannot say how many GPUs the job holds (squeue's %b shows
    # only per-node requests, not --gpus per job): its nodes are not judged stuck.
    gpus_known: bool = True


class AccountingEntry(NamedTuple):
    """One job (or array task) as accounting knows it: the base of charges."""

    job_id: int  # Slurm's own id of this record (JobIDRaw)
    array_job_id: int | None
    array_task: str | None
    name: str
    user: str
    account: str
    partition: str
    state: SlurmJobState
    exit_code: int | None  # None while it runs
    signal: int | None
    allocated_gpus: int  # from AllocTRES gres/gpu; 0 if it never started
    elapsed_s: int
    submitted_at: dt.datetime | None
    started_at: dt.datetime | None
    ended_at: dt.datetime | None
    comment: str
    allocated_cpus: int = 0  # from AllocTRES cpu; 0 if it never started
    # What the job used, for its efficiency; None is "not recorded", never 0 (see StepUsage).
    time_limit_minutes: int | None = None  # None: no limit, or not known
    mem_allocated_bytes: int | None = None  # AllocTRES mem: what it was given
    cpu_time_s: float | None = None  # TotalCPU (user + system) of all its steps
    mem_peak_bytes: int | None = None  # the highest MaxRSS of its steps
    gpu_util_percent: float | None = None  # TRESUsageInAve gres/gpuutil (NVML only)
    gpu_mem_peak_bytes: int | None = None  # TRESUsageInMax gres/gpumem (NVML only)


class StepUsage(NamedTuple):
    """What one step (``batch``, ``extern``, ``0``…) of a job used, as accounting keeps it.

    Usage lives on steps only: the job's own record has no MaxRSS, and its TotalCPU is
    the sum of its steps' (slurmrestd leaves it 0; sacct adds them up only when it reads
    the steps). Memory and GPU figures come from jobacct_gather's samples: a step that
    ended before the first sample (JobAcctGatherFrequency, 30 s by default) has none,
    and GPU figures exist only where gres/gpu is NVML-backed and AccountingStorageTRES
    lists gres/gpuutil and gres/gpumem. Missing is None, never 0.
    """

    cpu_time_s: float
    mem_peak_bytes: int | None
    gpu_util_percent: float | None
    gpu_mem_peak_bytes: int | None


def with_step_usage(entry: AccountingEntry, steps: list[StepUsage]) -> AccountingEntry:
    """``entry`` with the usage of its ``steps`` folded in: CPU time added up, peaks the
    highest (steps mostly run one after another, as seff counts them), GPU utilisation
    the mean of the steps that recorded one. No steps: nothing known."""
    if not steps:
        return entry
    mems = [s.mem_peak_bytes for s in steps if s.mem_peak_bytes is not None]
    utils = [s.gpu_util_percent for s in steps if s.gpu_util_percent is not None]
    gpu_mems = [s.gpu_mem_peak_bytes for s in steps if s.gpu_mem_peak_bytes is not None]
    return entry._replace(
        cpu_time_s=round(sum(s.cpu_time_s for s in steps), 3),
        mem_peak_bytes=max(mems) if mems else None,
        gpu_util_percent=sum(utils) / len(utils) if utils else None,
        gpu_mem_peak_bytes=max(gpu_mems) if gpu_mems else None,
    )


@dataclass(frozen=True)
class AccountLimits:
    """An account's associations on one cluster, read in one go: who has one, and the
    limits of the account's own association (None: no limit)."""

    users: tuple[str, ...]  # sorted
    gpu_minutes: int | None  # GrpTRESMins gres/gpu
    cpu_minutes: int | None  # GrpTRESMins cpu
    max_submit_jobs: int | None  # MaxSubmitJobs (each user association inherits it)
    # GrpSubmitJobs (queued or running at once: 0 refuses every sbatch) and GrpJobs
    # (running at once: 0 starts none of those queued), by those names.
    job_counts: dict[str, int | None]
    # Each user's own association's GrpTRESMins gres/gpu and cpu under the account (a
    # member's cap, accounts.caps), by user; a user without one is absent or None.
    user_gpu_minutes: dict[str, int | None] = field(default_factory=dict)
    user_cpu_minutes: dict[str, int | None] = field(default_factory=dict)


@dataclass(frozen=True)
class SlurmAccount:
    """An account as a cluster already has it (the import's listing): who made it, where
    it sits, who has an association under it and the limits of its own association."""

    name: str
    description: str
    organization: str  # PORTAL_ORGANIZATION for the portal's own
    parent: str  # the parent account ("" for root)
    limits: AccountLimits

    @property
    def users(self) -> tuple[str, ...]:
        return self.limits.users


@dataclass(frozen=True)
class MinutesUsed:
    """An account's raw usage as Slurm counts it against ``GrpTRESMins`` (it decays)."""

    gpu: int  # GPU-minutes
    cpu: int  # CPU-minutes
    # The account's standing in the fair-share tree among its siblings (sshare's NormShares
    # and EffectvUsage): the part of the cluster it is entitled to, and the part of the
    # (decayed) usage it had. None where Slurm did not say.
    share: float | None = None
    usage: float | None = None
    # Each user's raw GPU- and CPU-minutes under the account (sshare's user lines), by
    # user: what a member's own GrpTRESMins counts against.
    users_gpu: dict[str, int] = field(default_factory=dict)
    users_cpu: dict[str, int] = field(default_factory=dict)


class NodeInfo(NamedTuple):
    """A compute node as the controller sees it now."""

    name: str
    partitions: tuple[str, ...]
    # The base state then its flags, lower case: ("idle",), ("mixed", "drain"),
    # ("down", "not_responding"), ("idle", "reserved") …
    states: tuple[str, ...]
    reason: str  # why an administrator drained it or Slurm set it down ("" if none)
    gpus_by_type: tuple[tuple[str, int], ...]  # configured, e.g. (("h200", 8),); "" untyped
    allocated_gpus: int
    cpus: int
    allocated_cpus: int

    @property
    def gpus(self) -> int:
        return sum(count for _, count in self.gpus_by_type)


@dataclass(frozen=True)
class StartEstimate:
    """Slurm's answer to ``--test-only``: when and where the job would start."""

    starts_at: dt.datetime | None
    nodes: str


class Refused(NamedTuple):
    """A record of a listing that the portal does not take: one it cannot read, or one
    that contradicts another record of the same listing (a job id twice in the queue, a
    run twice in accounting). It is set aside, never applied or charged, and reported
    (``clusters.services.refused_records_report``); the rest of the listing goes on."""

    job_id: int | None  # Slurm's id of the record, when it says one
    problem: str  # why it was refused, for a person
    text: str  # the record as Slurm printed it, cut to REFUSED_TEXT_CHARS

    @property
    def fingerprint(self) -> str:
        """The same record, refused again, has the same (``RefusedRecord.fingerprint``)."""
        return hashlib.sha256(
            f"{self.job_id}\0{self.problem}\0{self.text}".encode(errors="replace")
        ).hexdigest()


REFUSED_TEXT_CHARS = 300

_E = TypeVar("_E")


class Listing(list[_E]):
    """A listing's entries, and the records it refused (``refused``): a list like any,
    so a caller that only wants the entries reads it as one."""

    def __init__(self, entries: Iterable[_E] = (), refused: Iterable[Refused] = ()) -> None:
        super().__init__(entries)
        self.refused: list[Refused] = list(refused)


class ListingStream(Generic[_E]):
    """A listing read as it comes (``SlurmClient.queue_stream``): iterate it for the
    entries; ``refused`` fills with the records set aside as they are met, so it is whole
    once the iteration has ended."""

    def __init__(self, entries: Iterator[_E], refused: list[Refused]) -> None:
        self._entries = entries
        self.refused = refused

    def __iter__(self) -> Iterator[_E]:
        return self._entries  # a loop takes the parser's own generator: nothing in between

    def __next__(self) -> _E:
        return next(self._entries)


def refused_text(record: bytes | str) -> str:
    """What a refused record's report shows of it: the text, cut, undecodable bytes
    replaced (nothing of it is ever read as structure again)."""
    if isinstance(record, bytes):
        record = record[: REFUSED_TEXT_CHARS * 4].decode("utf-8", errors="replace")
    return record[:REFUSED_TEXT_CHARS]


def visible(text: str) -> str:
    """A text Slurm printed (a user's bytes) as a page or a terminal may show it without
    being misled: each character that is not printable (a line's end, Slurm's separators,
    a terminal's escape, a direction override) and the backslash written as in Python's
    ``repr`` (``\\n``, ``\\x1e``, ``\\u202e``, ``\\\\``), so no byte can start a line or a
    record of its own, or pass for another."""
    return "".join(
        char if char.isprintable() and char != "\\" else char.encode("unicode_escape").decode()
        for char in text
    )


def repeats_refused(
    entries: Iterable[_E], *, key: Callable[[_E], Hashable], say: Callable[[_E], str]
) -> tuple[list[_E], list[Refused]]:
    """The entries whose ``key`` no other entry has, and each entry that shares its key
    with another, refused: when two records of one listing claim the same job (or run),
    neither is believed, rather than letting the last one win. A refusal's text is what
    ``say`` says of the entry: what stays the same while Slurm keeps listing it (not a
    priority or an elapsed time), so a repeat is counted, not stored anew."""
    kept: dict[Hashable, _E] = {}
    repeated: dict[Hashable, list[_E]] = {}
    for entry in entries:
        marker = key(entry)
        if marker in repeated:
            repeated[marker].append(entry)
        elif marker in kept:
            repeated[marker] = [kept.pop(marker), entry]
        else:
            kept[marker] = entry
    refused = [
        Refused(
            job_id=getattr(entry, "job_id", None),
            problem=f"listed {len(same)} times; none of them is taken",
            text=refused_text(say(entry)),
        )
        for same in repeated.values()
        for entry in same
    ]
    return list(kept.values()), refused


def queue_checked(
    entries: Iterable[QueueEntry], *, refused: Iterable[Refused] = ()
) -> Listing[QueueEntry]:
    """A queue listing as the portal takes it: a job id listed twice is refused (both
    records), after the records its parser refused (``refused``, read once ``entries``
    has been)."""
    kept, repeated = repeats_refused(entries, key=_job_id, say=queue_entry_said)
    return Listing(kept, [*refused, *repeated])


def _job_id(entry: QueueEntry) -> int:
    return entry.job_id


def queue_entry_said(entry: QueueEntry) -> str:
    """A queue entry as a refusal shows it: who, where and what, not its priority."""
    return (
        f"job {entry.job_id} of {entry.user} under {entry.account} on {entry.partition}, "
        f"{entry.state}, {entry.gpus} GPUs, name {entry.name!r}, comment {entry.comment!r}"
    )


def run_key(entry: AccountingEntry) -> tuple[int, dt.datetime | None]:
    """One run of a job: its id and when it was submitted (a requeue submits it again, with
    the same id; ``sacct --duplicates`` lists each run)."""
    return entry.job_id, entry.submitted_at


def _run_said(entry: AccountingEntry) -> str:
    submitted = f"{entry.submitted_at:%Y-%m-%dT%H:%M:%S}" if entry.submitted_at else "never"
    return (
        f"run of job {entry.job_id} submitted {submitted} by {entry.user or 'nobody said'} "
        f"under {entry.account} on {entry.partition}, name {entry.name!r}, "
        f"comment {entry.comment!r}"
    )


def accounting_checked(entries: Iterable[AccountingEntry]) -> Listing[AccountingEntry]:
    """Accounting's runs as the portal takes them: a run without a submit time, a run (job
    id and submit time) listed twice, and every run of a job id that accounting gives two
    users (every run of one job is its owner's: an id with two is not one job) are
    refused. A run listed without its user (Slurm 22.05's REST gives none for a run that
    never started after a requeue) is its job's other runs' user, when they have one."""
    timed: list[AccountingEntry] = []
    refused: list[Refused] = []
    for entry in entries:
        if entry.submitted_at is None:
            refused.append(
                Refused(entry.job_id, "a run without a submit time", refused_text(_run_said(entry)))
            )
        else:
            timed.append(entry)
    runs, repeated = repeats_refused(timed, key=run_key, say=_run_said)
    refused += repeated
    users: dict[int, set[str]] = {}
    for entry in runs:
        if entry.user:
            users.setdefault(entry.job_id, set()).add(entry.user)
    split = {job_id for job_id, names in users.items() if len(names) > 1}
    refused += [
        Refused(
            job_id=entry.job_id,
            problem=f"listed for {len(users[entry.job_id])} users "
            f"({', '.join(sorted(users[entry.job_id]))}); none of its runs is taken",
            text=refused_text(_run_said(entry)),
        )
        for entry in runs
        if entry.job_id in split
    ]
    return Listing(
        (
            entry
            if entry.user or entry.job_id not in users
            else entry._replace(user=next(iter(users[entry.job_id])))
            for entry in runs
            if entry.job_id not in split
        ),
        refused,
    )


def with_unstarted_ends(
    entries: Listing[AccountingEntry], ended: Listing[AccountingEntry]
) -> Listing[AccountingEntry]:
    """``entries`` (a window's read) and those runs of ``ended`` (a read of the same window
    by ``UNSTARTED_END_STATES``) that never ran and ``entries`` lacks, checked as one
    listing (``accounting_checked``). Never ran: no time elapsed (Slurm gives some such
    jobs a start, equal to their end), so they cost nothing whatever their record lacks.
    A job that ran and ended between the two reads is left to the next read, whose first
    read has it whole."""
    known = {run_key(entry) for entry in entries}
    merged = accounting_checked(
        [
            *entries,
            *(e for e in ended if run_key(e) not in known and e.elapsed_s == 0),
        ]
    )
    merged.refused[:0] = [*entries.refused, *ended.refused]
    return merged


def ids_with_comment(
    entries: list[QueueEntry] | list[AccountingEntry], *, comment: str, user: str, account: str
) -> list[int]:
    """Ids, lowest first, of the jobs among ``entries`` that ``user`` ran under ``account``
    with exactly ``comment``. An array's tasks share its comment and count once, as the
    array's own id (what submit returned)."""
    return sorted(
        {
            e.array_job_id or e.job_id
            for e in entries
            if e.comment == comment and e.user == user and e.account == account
        }
    )
