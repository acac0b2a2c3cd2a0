"""The queue and accounting listings as the cli adapter read them before issue 33 (commit
80596a8), for the benches' before-and-after figures only: the portal reads them one way,
``clusters/slurm/parsing.py``'s.

Before, squeue printed every field split by the unit separator, the name and comment
last, each record ended by the record separator (and squeue's newline); sacct printed
``--parsable2 --delimiter=\\x1f``, the job name last, one run per job id. A user's name
holding those separators forged and stopped both listings (issue 33): these readers are
kept to time, never to trust. The formats and the parsers below are 80596a8's, verbatim;
the helpers they call, which issue 33 left as they were, are the portal's own.

Import after ``django.setup()``."""

import codecs
import contextlib
import datetime as dt
from collections.abc import Iterable, Iterator
from sys import intern

from clusters.slurm.cli import CliClient
from clusters.slurm.errors import reads_slurm_output, reads_slurm_stream
from clusters.slurm.parsing import (
    FIELD_SEPARATOR,
    _job_gpus,
    _recorded_size,
    _step_usage,
    _time_limit,
    _value,
    parse_alloc_cpus,
    parse_alloc_gpus,
    parse_array_id,
    parse_exit_code,
    parse_slurm_time,
    parse_tres_usage,
)
from clusters.slurm.states import UNSTARTED_END_STATES, normalise_state
from clusters.slurm.types import (
    AccountingEntry,
    ListingStream,
    NodeInfo,
    QueueEntry,
    StepUsage,
    with_step_usage,
)

# --- 80596a8's clusters/slurm/parsing.py, verbatim ----------------------------------

RECORD_SEPARATOR = "\x1e"

SQUEUE_FIELDS = (
    "%A", "%F", "%K", "%u", "%a", "%P", "%T", "%r", "%V", "%S", "%l",
    "%Q", "%b", "%D", "%N",  # priority, GPUs per node (tres_per_node), node count, nodes
    "%k", "%j",  # comment and name last: the fields a user may fill with anything
)  # fmt: skip
SQUEUE_FORMAT = FIELD_SEPARATOR.join(SQUEUE_FIELDS) + RECORD_SEPARATOR

SACCT_FIELDS = (
    "JobIDRaw",
    "JobID",
    "User",
    "Account",
    "Partition",
    "State",
    "ExitCode",
    "AllocTRES",
    "ElapsedRaw",
    "Submit",
    "Start",
    "End",
    "Comment",
    "TimelimitRaw",
    "TotalCPU",
    "TRESUsageInMax",
    "TRESUsageInAve",
    "JobName",  # last: the only field a user may fill with anything
)
SACCT_FORMAT = ",".join(SACCT_FIELDS)


def _records(chunks: Iterable[str]) -> Iterator[str]:
    """squeue's records one at a time, as its output comes in chunks (a record may span
    several): never a list of them all, which would double the text's memory."""
    rest = ""
    for chunk in chunks:
        text = rest + chunk if rest else chunk
        start, end = 0, text.find(RECORD_SEPARATOR)
        while end >= 0:
            yield text[start:end]
            start, end = end + 1, text.find(RECORD_SEPARATOR, end + 1)
        rest = text[start:]
    yield rest


@reads_slurm_output
def parse_squeue(text: str) -> list[QueueEntry]:
    return list(parse_squeue_stream((text,)))


@reads_slurm_stream
def parse_squeue_stream(chunks: Iterable[str]) -> Iterator[QueueEntry]:
    """squeue's entries as its output comes in (``chunks`` of the text, split anywhere),
    each yielded as soon as its record is complete: the queue sync parses while squeue
    still prints. What ``chunks`` raises (a tool that failed) comes through."""
    # The hot path of every queue sync: names bound locally, values cached. The names a
    # queue repeats (users, accounts, partitions, reasons) are kept once, not once per job:
    # at 100,000 jobs that is a fifth of a sync's memory.
    state_of, time_of, once = normalise_state, parse_slurm_time, intern
    for record in _records(chunks):
        record = record.lstrip("\n")
        if not record:
            continue
        (job_id, array_job, array_task, user, account, partition, state, reason,
         submitted, started, time_limit, priority, per_node, node_count, nodes, comment,
         name) = record.split(FIELD_SEPARATOR, len(SQUEUE_FIELDS) - 1)  # fmt: skip
        is_array_task = array_task != "N/A"
        pending = state == "PENDING"
        # Positional, in QueueEntry's field order: keywords cost a third more here.
        yield QueueEntry(
            int(job_id),
            int(array_job) if is_array_task else None,
            array_task if is_array_task else None,
            name,
            once(user),
            once(account),
            once(partition),
            state_of(state),
            once(reason),
            "" if comment == "(null)" else comment,
            time_of(submitted),
            # For a pending job squeue prints its expected start here; only a
            # job that runs or ran has really started.
            None if pending else time_of(started),
            _time_limit(time_limit),
            int(priority) if priority.isdigit() else 0,
            time_of(started) if pending else None,
            _job_gpus(per_node, node_count),
            "" if pending else nodes,
            per_node != "N/A",
        )


def _sacct_records(text: str) -> list[list[str]]:
    """Split sacct's lines into records; a newline inside a job name (the last
    field) makes a line without separators, which continues the record before it."""
    records: list[list[str]] = []
    for line in text.splitlines():
        if line.count(FIELD_SEPARATOR) >= len(SACCT_FIELDS) - 1:
            records.append(line.split(FIELD_SEPARATOR, len(SACCT_FIELDS) - 1))
        elif records:
            records[-1][-1] += "\n" + line
    return records


@reads_slurm_output
def parse_sacct(text: str) -> list[AccountingEntry]:
    """Jobs (and array tasks) from sacct, each with the usage of its steps folded in
    (the lines ``<raw id>.batch``, ``.extern``, ``.0``… that follow it without
    ``--allocations``)."""
    entries = []
    steps: dict[int, list[StepUsage]] = {}
    for fields in _sacct_records(text):
        (raw_id, job_id, user, account, partition, state, exit_code, alloc_tres, elapsed,
         submitted, started, ended, comment, time_limit, total_cpu, usage_max, usage_ave,
         name) = fields  # fmt: skip
        if "." in raw_id:
            owner = raw_id.split(".", 1)[0]
            if owner.isascii() and owner.isdigit():  # a heterogeneous job's "7+1.0" is left out
                steps.setdefault(int(owner), []).append(
                    _step_usage(total_cpu, usage_max, usage_ave)
                )
            continue
        array_job_id, array_task = parse_array_id(job_id)
        code, signal = parse_exit_code(exit_code)
        allocated = parse_tres_usage(alloc_tres)
        entries.append(
            AccountingEntry(
                job_id=int(raw_id),
                array_job_id=array_job_id,
                array_task=array_task,
                name=name,
                user=user,
                account=account,
                partition=partition,
                state=normalise_state(state),
                exit_code=code,
                signal=signal,
                allocated_gpus=parse_alloc_gpus(alloc_tres),
                allocated_cpus=parse_alloc_cpus(alloc_tres),
                elapsed_s=int(elapsed or 0),
                submitted_at=parse_slurm_time(submitted),
                started_at=parse_slurm_time(started),
                ended_at=parse_slurm_time(ended),
                comment=_value(comment) or "",
                time_limit_minutes=(
                    int(time_limit) if time_limit.isascii() and time_limit.isdigit() else None
                ),
                mem_allocated_bytes=_recorded_size(allocated, "mem"),
            )
        )
    return [with_step_usage(entry, steps.get(entry.job_id, [])) for entry in entries]


# --- 80596a8's clusters/slurm/types.py ------------------------------------------------


def with_unstarted_ends(
    entries: list[AccountingEntry], ended: list[AccountingEntry]
) -> list[AccountingEntry]:
    """``entries`` (a window's read) and those of ``ended`` (a read of the same window by
    ``UNSTARTED_END_STATES``) that never ran and ``entries`` lacks. Never ran: no time
    elapsed (Slurm gives some such jobs a start, equal to their end), so they cost
    nothing whatever their record lacks. A job that ran and ended between the two reads
    is left to the next read, whose first read has it whole."""
    known = {entry.job_id for entry in entries}
    return entries + [
        entry for entry in ended if entry.job_id not in known and entry.elapsed_s == 0
    ]


# --- 80596a8's cli adapter reads, through today's runner ----------------------------


def squeue_argv(*selection: str) -> list[str]:
    """The cli adapter's squeue command line before issue 33."""
    return ["squeue", "--noheader", "--all", "--states=all", *selection, "-o", SQUEUE_FORMAT]


SQUEUE_ARGV = squeue_argv()


def slurm_start(since: dt.datetime) -> str:
    """A window's start as the adapter gives it to sacct (now and then alike)."""
    # sacct refuses a start after its end ("now"); Slurm's clock may be behind ours.
    since = min(since, dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1))
    return since.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")


def sacct_argv(start: str, *selection: str, steps: bool = False) -> list[str]:
    """The cli adapter's sacct command line before issue 33 (from ``start``, a Slurm time
    in UTC, until now): one record per job id, fields split by the unit separator."""
    only_jobs = [] if steps else ["--allocations"]
    return ["sacct", *selection, *only_jobs, "--noheader", "--parsable2",
            f"--delimiter={FIELD_SEPARATOR}", f"--starttime={start}", "--endtime=now",
            f"--format={SACCT_FORMAT}"]  # fmt: skip


def decoded(chunks: Iterable[bytes]) -> Iterator[str]:
    """A tool's output chunks as text, as the adapter decoded them before (a character
    split between two chunks decoded whole, a byte that is no UTF-8 replaced)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    for chunk in chunks:
        yield decoder.decode(chunk)
    yield decoder.decode(b"", final=True)


@contextlib.contextmanager
def queue_stream(tools: CliClient, *selection: str) -> Iterator[ListingStream[QueueEntry]]:
    """``CliClient.queue_stream`` as it was: squeue in the old format, parsed as it
    prints (the old parser refused nothing: ``refused`` stays empty)."""
    with tools._streamed(squeue_argv(*selection)) as chunks:
        yield ListingStream(parse_squeue_stream(decoded(chunks)), [])


def queue(tools: CliClient, *selection: str) -> list[QueueEntry]:
    with queue_stream(tools, *selection) as entries:
        return list(entries)


def accounting_since(
    tools: CliClient, since: dt.datetime, *selection: str
) -> list[AccountingEntry]:
    """``CliClient.accounting_since`` as it was (of the jobs ``selection`` picks, sacct's
    options; all by default): the window with the steps, and the jobs that ended without
    running, each read whole, then parsed."""
    start = slurm_start(since)

    def read(*chosen: str, steps: bool = False) -> list[AccountingEntry]:
        return parse_sacct(tools._run(sacct_argv(start, *chosen, steps=steps)).stdout)

    return with_unstarted_ends(
        read("--allusers", *selection, steps=True),
        read("--allusers", *selection, f"--state={','.join(UNSTARTED_END_STATES)}"),
    )


class BeforeClient:
    """A cli adapter that lists the queue as before (``queue_stream``), for
    ``jobs.queue_sync.queue_sync``: the same sync, only the listing and its parser are
    the old ones. Its nodes are the cluster's own."""

    def __init__(self, tools: CliClient) -> None:
        self.tools = tools

    def queue(self) -> list[QueueEntry]:
        return queue(self.tools)

    def queue_stream(self) -> contextlib.AbstractContextManager[ListingStream[QueueEntry]]:
        return queue_stream(self.tools)

    def nodes(self) -> list[NodeInfo]:
        return self.tools.nodes()


def squeue_record(fields: list[str], *, comment: bytes = b"(null)", name: bytes = b"") -> bytes:
    """A record as squeue printed it in the old SQUEUE_FORMAT (``parsing.squeue_record``'s
    fields, comment and name): all split by the unit separator, then the record separator
    and squeue's newline."""
    separator = FIELD_SEPARATOR.encode()
    texts = [*(field.encode() for field in fields), comment, name]
    return separator.join(texts) + RECORD_SEPARATOR.encode() + b"\n"
