"""Pure parsers for the text Slurm's command-line tools print."""

import datetime as dt
import functools
import re
from collections.abc import Iterable, Iterator
from sys import intern

from clusters.slurm.errors import (
    MALFORMED,
    SlurmOutputInvalid,
    reads_slurm_output,
    reads_slurm_stream,
)
from clusters.slurm.states import normalise_state
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
    StartEstimate,
    StepUsage,
    refused_text,
    with_step_usage,
)

_UNLIMITED = {"infinite", "unlimited", "none"}


@functools.lru_cache(maxsize=1024)
@reads_slurm_output
def parse_time_minutes(text: str) -> int | None:
    """Slurm time (``7-00:00:00``, ``1:00:00``, ``30:00``, ``45``) in whole minutes.

    ``infinite``/``UNLIMITED`` give None. Seconds are rounded up: a limit of
    90 seconds lets a job run into its second minute.
    """
    value = text.strip().lower()
    if value in _UNLIMITED:
        return None
    days = 0
    if "-" in value:
        day_text, value = value.split("-", 1)
        days = int(day_text)
        # With days, the rest is hours[:minutes[:seconds]].
        parts = [int(p) for p in value.split(":")] + [0, 0]
        hours, minutes, seconds = parts[0], parts[1], parts[2]
    else:
        parts = [int(p) for p in value.split(":")]
        if len(parts) == 3:
            hours, minutes, seconds = parts
        elif len(parts) == 2:
            hours, (minutes, seconds) = 0, parts
        elif len(parts) == 1:
            hours, minutes, seconds = 0, parts[0], 0
        else:
            raise SlurmOutputInvalid(f"not a Slurm time: {text!r}")
    total_seconds = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    return -(-total_seconds // 60)


_GPU_GRES = re.compile(r"^gpu(?::(?P<type>[^:(]+))?:(?P<count>\d+)")


@reads_slurm_output
def parse_gpu_gres(text: str) -> tuple[str, int]:
    """GPU type and count per node from a GRES string like ``gpu:h200:8(S:0-1),shard:4``."""
    gpu_type, count = "", 0
    for item in text.split(","):
        match = _GPU_GRES.match(item.strip())
        if match:
            gpu_type = gpu_type or (match["type"] or "")
            count += int(match["count"])
    return gpu_type, count


SINFO_PARTITION_FORMAT = "%P|%a|%l|%D|%G"


@reads_slurm_output
def parse_sinfo_partitions(text: str) -> list[PartitionInfo]:
    """Partitions from ``sinfo -h -a -o '%P|%a|%l|%D|%G'``.

    sinfo prints one line per group of identical nodes, so a partition may
    span several lines; node and GPU counts add up across them.
    """
    merged: dict[str, dict] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        name, availability, time_limit, node_count, gres = line.split("|")
        is_default = name.endswith("*")
        name = name.rstrip("*")
        gpu_type, gpus_per_node = parse_gpu_gres(gres)
        nodes = int(node_count)
        entry = merged.setdefault(
            name,
            {
                "name": name,
                "is_default": is_default,
                "is_up": availability.strip().lower() == "up",
                "max_time_minutes": parse_time_minutes(time_limit),
                "nodes": 0,
                "gpus_per_node": 0,
                "gpu_type": "",
                "total_gpus": 0,
            },
        )
        entry["nodes"] += nodes
        entry["gpus_per_node"] = max(entry["gpus_per_node"], gpus_per_node)
        entry["gpu_type"] = entry["gpu_type"] or gpu_type
        entry["total_gpus"] += nodes * gpus_per_node
    return [PartitionInfo(**entry) for entry in merged.values()]


# --- squeue and sacct: what users write is data, never structure -----------------------
#
# Slurm prints what users write (job names, comments) raw: every byte but NUL, the unit
# and record separators and newlines included, so no delimiter can tell a name from the
# record around it (issue 33: a name that held a whole record made the portal store, and
# charge, a job that never was). So no byte of a user's text ever decides where a record
# or a field ends:
#
# - squeue prints the fields no user can write, split by the unit separator, then its
#   newline: the queue sync's listing holds nothing else (SQUEUE_FORMAT). Where the texts
#   are read (SQUEUE_TEXTS_FORMAT), the comment and the name come first, each at a fixed
#   width in bytes (``%64k%64j``: squeue cuts a longer text and pads a shorter one with
#   spaces): a record is 128 bytes, whatever they hold, then text without a newline up to
#   the next newline.
# - sacct prints every field at a fixed width (``Field%-N`` without --parsable: it cuts a
#   longer text, ending it with "+", and pads; no number it prints is wider than 20
#   digits), so every record is exactly SACCT_RECORD_BYTES long and ends with a newline.
#
# The fields no user can write (ids, states, times, TRES, the names of users, accounts
# and partitions an administrator made, Slurm's own reasons) are read strictly: a record
# that does not read is set aside with its id (``Refused``) and the rest of the listing
# goes on. Only output that breaks its own shape (a record of another length, an output
# cut short) is refused whole: that is Slurm's format, nothing a user wrote.
#
# The widths are the tools' own promise, checked on every Slurm release the stack runs
# (tests/clusters/contract.py: names and comments of every byte, longer than the width).

# The bytes of a comment and of a name the listings carry: a submit token's comment is
# 43 ("portal:" and a UUID), a portal job's name at most 64. A longer text is cut.
TEXT_WIDTH = 64
FIELD_SEPARATOR = "\x1f"
_NOT_A_VALUE = {"", "n/a", "none", "unknown", "(null)"}

SQUEUE_FIELDS = (
    "%A", "%F", "%K", "%u", "%a", "%P", "%T", "%r", "%V", "%S", "%l",
    "%Q", "%b", "%D", "%N",  # priority, GPUs per node (tres_per_node), node count, nodes
)  # fmt: skip
# The queue sync's listing: the fields no user writes, and nothing else (the sync reads no
# name or comment, and the texts would make squeue's output half as long again).
SQUEUE_FORMAT = FIELD_SEPARATOR.join(SQUEUE_FIELDS)
# The listing with the users' texts (``SlurmClient.queue``: the token look-up and the
# invariants check read comments): the comment and the name first, at their widths
# (left-justified: squeue cuts and pads them), then the same fields.
SQUEUE_TEXTS_FORMAT = f"%{TEXT_WIDTH}k%{TEXT_WIDTH}j" + SQUEUE_FORMAT
_SQUEUE_TEXTS = 2 * TEXT_WIDTH

# Each field and its width in bytes, left-justified (``%-N``). Wide enough for what Slurm
# writes there; a field of Slurm's own that fills its width may have been cut, and its
# record is refused.
SACCT_COLUMNS = (
    ("JobIDRaw", 24),
    ("JobID", 128),  # an array's pending tasks "24_[2-5,9%2]"
    ("User", 64),
    ("Account", 64),
    # A pending job's partitions, "gpu,debug": as many as its owner listed, so it may be
    # cut, and is not refused for it (a job that ran lists the one it ran in).
    ("Partition", 128),
    ("State", 32),  # "CANCELLED by 4294967294"
    ("ExitCode", 16),
    ("AllocTRES", 256),
    ("ElapsedRaw", 24),
    ("Submit", 24),
    ("Start", 24),
    ("End", 24),
    ("TimelimitRaw", 24),
    ("TotalCPU", 24),
    ("TRESUsageInMax", 256),
    ("TRESUsageInAve", 256),
    # The user's texts, never refused: one byte wider than what is read of them, so that
    # sacct's "+" on a longer text falls outside the first TEXT_WIDTH bytes.
    ("Comment", TEXT_WIDTH + 1),
    ("JobName", TEXT_WIDTH + 1),
)
SACCT_FORMAT = ",".join(f"{name}%-{width}" for name, width in SACCT_COLUMNS)
# sacct prints each field and a space, then a newline.
SACCT_RECORD_BYTES = sum(width + 1 for _, width in SACCT_COLUMNS) + 1
_SACCT_SLICES = tuple(
    slice(start, start + width)
    for start, width in zip(
        [sum(w + 1 for _, w in SACCT_COLUMNS[:i]) for i in range(len(SACCT_COLUMNS))],
        [w for _, w in SACCT_COLUMNS],
        strict=True,
    )
)
# The columns a user chooses the length of: cut at their width, never refused for it.
_SACCT_CUT_OK = frozenset(
    index
    for index, (name, _) in enumerate(SACCT_COLUMNS)
    if name in ("Partition", "Comment", "JobName")
)
_SACCT_TEXTS = frozenset(
    index for index, (name, _) in enumerate(SACCT_COLUMNS) if name in ("Comment", "JobName")
)


def _value(text: str) -> str | None:
    return None if text.strip().lower() in _NOT_A_VALUE else text


def slurm_id(text: str) -> int:
    """A Slurm id as the tools print it: ASCII digits only (``int`` would take " 7", "+7",
    "7_000" and other scripts' digits, none of which Slurm prints)."""
    if not (text.isascii() and text.isdigit()):
        raise SlurmOutputInvalid(f"not a Slurm id: {text[:40]!r}")
    return int(text)


@functools.lru_cache(maxsize=8192)  # a queue repeats its timestamps many times
@reads_slurm_output
def parse_slurm_time(text: str) -> dt.datetime | None:
    """Slurm's ``2026-12-02T12:46:10`` (printed in UTC: the client sets TZ=UTC)."""
    value = _value(text)
    if value is None:
        return None
    return dt.datetime.fromisoformat(value).replace(tzinfo=dt.UTC)


@reads_slurm_output
def parse_array_id(job_id_text: str) -> tuple[int | None, str | None]:
    """``24_3`` → (24, "3"); ``24_[2-5%2]`` → (24, "[2-5%2]"); ``23`` → (None, None)."""
    if "_" not in job_id_text:
        return None, None
    array_job, task = job_id_text.split("_", 1)
    return slurm_id(array_job), task


@reads_slurm_output
def parse_alloc_gpus(tres: str) -> int:
    """GPUs from ``AllocTRES`` like ``billing=1,cpu=1,gres/gpu=2,mem=1000M,node=1``.

    A typed entry (``gres/gpu:h200=2``) counts too, but not next to the untyped
    total, which already includes it.
    """
    total, typed = None, 0
    for item in tres.split(","):
        name, _, count = item.partition("=")
        if name == "gres/gpu":
            total = int(count)
        elif name.startswith("gres/gpu:"):
            typed += int(count)
    return total if total is not None else typed


@reads_slurm_output
def parse_alloc_cpus(tres: str) -> int:
    """CPUs from ``AllocTRES`` like ``billing=1,cpu=4,gres/gpu=2,mem=1000M,node=1``."""
    for item in tres.split(","):
        name, _, count = item.partition("=")
        if name == "cpu":
            return int(count)
    return 0


@reads_slurm_output
def parse_exit_code(text: str) -> tuple[int | None, int | None]:
    """``ExitCode`` ``2:0`` → (2, 0); ``0:9`` → (0, 9) (killed by signal 9)."""
    value = _value(text)
    if value is None or ":" not in value:
        return None, None
    code, signal = value.split(":", 1)
    return int(code), int(signal)


@functools.lru_cache(maxsize=1024)
def _time_limit(text: str) -> int | None:
    return None if _value(text) is None else parse_time_minutes(text)


_TRES_GPU = re.compile(r"gres[:/]gpu(?::[^:,]+)?:(\d+)")


@functools.lru_cache(maxsize=256)
def gpus_per_node(tres_per_node: str) -> int:
    """GPUs per node from squeue's ``%b``: ``gres:gpu:2`` (22.05), ``gres/gpu:2`` or
    ``gres/gpu:b200:4`` (24.11), ``N/A`` for none; several entries add up. A request for
    GPUs per job (``--gpus``) is not in it: such a job reads 0 here."""
    return sum(int(count) for count in _TRES_GPU.findall(tres_per_node))


@functools.lru_cache(maxsize=64)
def _count(text: str) -> int:
    return int(text) if text.isascii() and text.isdigit() else 0


@functools.lru_cache(maxsize=1024)
def _job_gpus(tres_per_node: str, node_count: str) -> int:
    return gpus_per_node(tres_per_node) * _count(node_count)


def squeue_record(
    fields: list[str], *, comment: bytes = b"(null)", name: bytes = b"", texts: bool = True
) -> bytes:
    """A record as squeue prints it (the benches and tests write queues with it): in
    SQUEUE_TEXTS_FORMAT the comment and the name cut or padded to TEXT_WIDTH bytes, then
    the fields no user writes (SQUEUE_FIELDS, in order); in SQUEUE_FORMAT (``texts``
    false) those fields alone; then a newline."""
    written = b"".join(text[:TEXT_WIDTH].ljust(TEXT_WIDTH) for text in (comment, name))
    return (written if texts else b"") + FIELD_SEPARATOR.join(fields).encode() + b"\n"


def _user_text(raw: bytes) -> str:
    """A comment or a name as a fixed-width field holds it: the padding taken off, bytes
    that are not UTF-8 replaced (a text cut inside a character ends in a replacement)."""
    return raw.rstrip(b" ").decode("utf-8", errors="replace")


def _squeue_records(chunks: Iterable[bytes], texts: int) -> Iterator[bytes]:
    """squeue's records one at a time as its output comes in chunks (a record may span
    several; never a list of them all, which would double the output's memory): the
    ``texts`` bytes of the fixed-width texts, if any, then up to the newline. Output that
    ends inside a record was cut short, and the whole listing is refused."""
    rest = b""
    for chunk in chunks:
        data = rest + chunk if rest else chunk
        start, find = 0, data.find
        while (end := find(b"\n", start + texts)) >= 0:
            yield data[start:end]
            start = end + 1
        rest = data[start:]
    if rest:
        raise SlurmOutputInvalid(f"squeue's output ends inside a record: {refused_text(rest)!r}")


@reads_slurm_output
def parse_squeue(output: bytes, *, texts: bool = True) -> Listing[QueueEntry]:
    """squeue's output in SQUEUE_TEXTS_FORMAT (in SQUEUE_FORMAT when ``texts`` is false)."""
    refused: list[Refused] = []
    return Listing(parse_squeue_stream((output,), refused, texts=texts), refused)


@reads_slurm_stream
def parse_squeue_stream(
    chunks: Iterable[bytes], refused: list[Refused], *, texts: bool = True
) -> Iterator[QueueEntry]:
    """squeue's entries as its output comes in (``chunks`` of its bytes, split anywhere),
    each yielded as soon as its record is complete: the queue sync parses while squeue
    still prints. Printed in SQUEUE_TEXTS_FORMAT, or in SQUEUE_FORMAT when ``texts`` is
    false (the entries' names and comments are then ""). A record that does not read goes
    to ``refused`` and the rest go on; what ``chunks`` raises (a tool that failed) comes
    through."""
    # The hot path of every queue sync: names bound locally, values cached. The names a
    # queue repeats (users, accounts, partitions, reasons) are kept once, not once per job:
    # at 100,000 jobs that is a fifth of a sync's memory.
    state_of, time_of, once, text_of = normalise_state, parse_slurm_time, intern, _user_text
    width, fields_count = TEXT_WIDTH, len(SQUEUE_FIELDS)
    start = _SQUEUE_TEXTS if texts else 0
    for record in _squeue_records(chunks, start):
        fields = record[start:].decode("utf-8", errors="replace").split(FIELD_SEPARATOR)
        try:
            if len(fields) != fields_count:
                raise SlurmOutputInvalid(f"{len(fields)} fields, not {fields_count}")
            (job_id, array_job, array_task, user, account, partition, state, reason,
             submitted, started, time_limit, priority, per_node, node_count,
             nodes) = fields  # fmt: skip
            is_array_task = array_task != "N/A"
            pending = state == "PENDING"
            comment = text_of(record[:width]) if texts else ""
            # Positional, in QueueEntry's field order: keywords cost a third more here.
            entry = QueueEntry(
                slurm_id(job_id),
                slurm_id(array_job) if is_array_task else None,
                array_task if is_array_task else None,
                text_of(record[width:start]) if texts else "",
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
                int(priority) if priority.isascii() and priority.isdigit() else 0,
                time_of(started) if pending else None,
                _job_gpus(per_node, node_count),
                "" if pending else nodes,
                per_node != "N/A",
            )
        except MALFORMED as error:
            refused.append(_refused(fields[0], error, record))
            continue
        yield entry


def _refused(job_id: str, error: Exception, record: bytes) -> Refused:
    # No id of Slurm's is longer than 20 digits (and int() refuses thousands of them).
    known = job_id.isascii() and job_id.isdigit() and len(job_id) <= 20
    return Refused(
        job_id=int(job_id) if known else None,
        problem=f"cannot read the record: {error}",
        text=refused_text(record),
    )


_SIZE_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50}


@reads_slurm_output
def parse_size(text: str) -> int:
    """A size as sacct prints it, in bytes: ``12460K``, ``500M``, ``2G``; bare is bytes."""
    value = text.strip().upper()
    unit = value[-1] if value and value[-1] in _SIZE_UNITS else ""
    return round(float(value[: len(value) - len(unit)]) * _SIZE_UNITS[unit])


@reads_slurm_output
def parse_cpu_time(text: str) -> float:
    """sacct's TotalCPU in seconds: ``00:05.287``, ``02:03:04``, ``1-02:03:04``."""
    value = text.strip()
    days = 0
    if "-" in value:
        day_text, value = value.split("-", 1)
        days = int(day_text)
    seconds = 0.0
    for part in value.split(":"):
        seconds = seconds * 60 + float(part)
    return days * 86400 + seconds


@reads_slurm_output
def parse_tres_usage(text: str) -> dict[str, str]:
    """``cpu=00:00:02,mem=12460K,gres/gpuutil=87`` by TRES name."""
    return dict(item.partition("=")[::2] for item in text.split(",") if "=" in item)


def _recorded_size(tres: dict[str, str], name: str) -> int | None:
    # A size of 0 is a step that ended before it was sampled: not recorded.
    size = parse_size(tres[name]) if name in tres else 0
    return size or None


def _step_usage(total_cpu: str, usage_max: str, usage_ave: str) -> StepUsage:
    peaks, means = parse_tres_usage(usage_max), parse_tres_usage(usage_ave)
    util = means.get("gres/gpuutil")
    return StepUsage(
        cpu_time_s=parse_cpu_time(total_cpu) if _value(total_cpu) else 0.0,
        mem_peak_bytes=_recorded_size(peaks, "mem"),
        gpu_util_percent=float(util) if util is not None else None,
        gpu_mem_peak_bytes=_recorded_size(peaks, "gres/gpumem"),
    )


def sacct_record(fields: list[str], *, comment: bytes = b"", name: bytes = b"") -> bytes:
    """A record as sacct prints it in SACCT_FORMAT (the tests write accounting with it):
    the fields Slurm writes (SACCT_COLUMNS but the comment and the name, in order), then
    the comment and the name, each cut as sacct cuts a value longer than its column (its
    first width - 1 bytes, then "+") or padded to the width, and a space; then a newline."""
    values = [*(field.encode() for field in fields), comment, name]
    columns = (
        (value if len(value) <= width else value[: width - 1] + b"+").ljust(width)
        for value, (_, width) in zip(values, SACCT_COLUMNS, strict=True)
    )
    return b"".join(column + b" " for column in columns) + b"\n"


def _sacct_records(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """sacct's records of SACCT_RECORD_BYTES each, as its output comes in chunks. A record
    that does not end with a newline, or output that ends inside one, is not the format
    asked for: the whole listing is refused."""
    size, rest = SACCT_RECORD_BYTES, b""
    for chunk in chunks:
        data = rest + chunk if rest else chunk
        whole = len(data) - len(data) % size
        for start in range(0, whole, size):
            record = data[start : start + size]
            if record[-1:] != b"\n":
                raise SlurmOutputInvalid(
                    f"sacct printed a record that is not {size} bytes: {refused_text(record)!r}"
                )
            yield record
        rest = data[whole:]
    if rest:
        raise SlurmOutputInvalid(f"sacct's output ends inside a record: {refused_text(rest)!r}")


def _sacct_fields(record: bytes) -> list[str]:
    """A record's fields as text. A field of Slurm's own that fills its column may have
    been cut (sacct ends a cut text with "+"): the record is not read. A field whose
    length its user chooses (``_SACCT_CUT_OK``) is read as cut."""
    fields = []
    for index, where in enumerate(_SACCT_SLICES):
        raw = record[where]
        if index in _SACCT_CUT_OK:
            fields.append(_user_text(raw[:TEXT_WIDTH] if index in _SACCT_TEXTS else raw))
            continue
        if raw[-1:] != b" ":
            raise SlurmOutputInvalid(f"{SACCT_COLUMNS[index][0]} fills its column: cut")
        fields.append(raw.decode("utf-8", errors="replace").strip())
    return fields


@reads_slurm_output
def parse_sacct(output: bytes) -> Listing[AccountingEntry]:
    return parse_sacct_stream((output,))


@reads_slurm_output
def parse_sacct_stream(chunks: Iterable[bytes]) -> Listing[AccountingEntry]:
    """Runs of jobs (and array tasks) from sacct (``chunks`` of its output, split
    anywhere), each with the usage of its own steps folded in: the lines ``<raw
    id>.batch``, ``.extern``, ``.0``… that follow a run without ``--allocations``. With
    ``--duplicates`` a requeued job is listed once per run, each run followed by its
    steps. A record that does not read is refused, with its job id."""
    runs: list[tuple[AccountingEntry, list[StepUsage]]] = []
    refused: list[Refused] = []
    # The run the steps that follow belong to; none after a run that was refused: its
    # steps are no other run's (a requeued job's runs share its id).
    current: tuple[AccountingEntry, list[StepUsage]] | None = None
    for record in _sacct_records(chunks):
        raw_id = record[_SACCT_SLICES[0]].decode("utf-8", errors="replace").strip()
        owner, dot, _step = raw_id.partition(".")
        try:
            fields = _sacct_fields(record)
            if dot:
                # A step: it belongs to the run it follows. A heterogeneous job's "7+1.0"
                # and a step without its run (not asked for) are left out.
                if current and owner.isascii() and owner.isdigit():
                    run, steps = current
                    if run.job_id == int(owner):
                        steps.append(_step_usage(*fields[13:16]))
                continue
            current = (_sacct_run(fields), [])
            runs.append(current)
        except MALFORMED as error:
            if not dot:
                current = None
            refused.append(_refused(owner, error, record))
    return Listing((with_step_usage(run, steps) for run, steps in runs), refused)


def _sacct_run(fields: list[str]) -> AccountingEntry:
    (raw_id, job_id, user, account, partition, state, exit_code, alloc_tres, elapsed,
     submitted, started, ended, time_limit, _total_cpu, _usage_max, _usage_ave, comment,
     name) = fields  # fmt: skip
    array_job_id, array_task = parse_array_id(job_id)
    code, signal = parse_exit_code(exit_code)
    allocated = parse_tres_usage(alloc_tres)
    return AccountingEntry(
        job_id=slurm_id(raw_id),
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
        elapsed_s=slurm_id(elapsed) if elapsed else 0,
        submitted_at=parse_slurm_time(submitted),
        started_at=parse_slurm_time(started),
        ended_at=parse_slurm_time(ended),
        comment=_value(comment) or "",
        time_limit_minutes=(
            int(time_limit) if time_limit.isascii() and time_limit.isdigit() else None
        ),
        mem_allocated_bytes=_recorded_size(allocated, "mem"),
    )


_TEST_ONLY = re.compile(r"to start at (?P<at>\S+) using \d+ processors on nodes (?P<nodes>\S+)")


@reads_slurm_output
def parse_test_only(text: str) -> StartEstimate:
    """sbatch ``--test-only``: ``Job 3 to start at 2026-12-02T12:00:00 using 1 processors on
    nodes vm in partition gpu``."""
    match = _TEST_ONLY.search(text)
    if not match:
        return StartEstimate(starts_at=None, nodes="")
    return StartEstimate(starts_at=parse_slurm_time(match["at"]), nodes=match["nodes"])


@reads_slurm_output
def parse_tres_limit(grp_tres_mins: str, tres: str) -> int | None:
    """``GrpTRESMins`` like ``cpu=100,gres/gpu=6000`` and ``cpu`` → 100; None when absent."""
    for item in grp_tres_mins.split(","):
        name, _, value = item.partition("=")
        if name == tres:
            return int(value)
    return None


@reads_slurm_output
def parse_tres_usage_minutes(grp_tres_raw: str, tres: str) -> int:
    """Minutes of ``tres`` from sshare's ``GrpTRESRaw`` like ``cpu=30,gres/gpu=12``."""
    for item in grp_tres_raw.split(","):
        name, _, value = item.partition("=")
        if name == tres:
            return int(float(value))
    return 0


SSHARE_FORMAT = "--format=Account,User,GrpTRESRaw,NormShares,EffectvUsage"


@reads_slurm_output
def parse_sshare_account(text: str, account: str) -> MinutesUsed | None:
    """The account's own line of ``sshare --parsable2 SSHARE_FORMAT`` (not its users'):
    raw usage in minutes and its fair-share standing, with each of its users' raw GPU-
    and CPU-minutes (``sshare --all`` lists them); None when the account is not listed."""
    own = None
    users, users_cpu = {}, {}
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) != 5 or fields[0].strip() != account:
            continue
        if fields[1]:
            users[fields[1]] = parse_tres_usage_minutes(fields[2], "gres/gpu")
            users_cpu[fields[1]] = parse_tres_usage_minutes(fields[2], "cpu")
        elif own is None:
            own = fields
    if own is None:
        return None
    return MinutesUsed(
        gpu=parse_tres_usage_minutes(own[2], "gres/gpu"),
        cpu=parse_tres_usage_minutes(own[2], "cpu"),
        share=_fraction(own[3]),
        usage=_fraction(own[4]),
        users_gpu=users,
        users_cpu=users_cpu,
    )


def _fraction(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0 <= value < float("inf") else None


@reads_slurm_output
def parse_job_count(text: str) -> int | None:
    """A job-count column of sacctmgr (``MaxSubmitJobs``, ``GrpSubmitJobs``, ``GrpJobs``):
    ``1000``, or empty when there is no limit."""
    return int(text) if text.strip() else None


# sacctmgr has no delimiter option: with --parsable2 fields are split by "|", which no
# account, user or partition name holds; a description may, so it comes last.
SACCTMGR_ACCOUNT_FORMAT = "Account,Organization,Description"
SACCTMGR_ASSOCIATION_FORMAT = (
    "Account,User,Partition,ParentName,GrpTRESMins,MaxSubmitJobs,GrpSubmitJobs,GrpJobs"
)


@reads_slurm_output
def parse_sacctmgr_accounts(text: str) -> dict[str, tuple[str, str]]:
    """Each account's organization and description, from ``sacctmgr -n -P show account
    format=Account,Organization,Description``."""
    accounts = {}
    for line in text.splitlines():
        if line.strip():
            name, organization, description = line.split("|", 2)
            accounts[name] = (organization, description)
    return accounts


@reads_slurm_output
def parse_sacctmgr_associations(text: str) -> dict[str, tuple[str, AccountLimits]]:
    """Each account's parent and ``AccountLimits`` (its users, its own association's
    limits), from ``sacctmgr -n -P show association format=`` SACCTMGR_ASSOCIATION_FORMAT
    on one cluster. A user's association (any partition) counts the user once; the
    account's own association is the one without a user or partition."""
    users: dict[str, set[str]] = {}
    # By account, each user's own (gres/gpu, cpu) GrpTRESMins.
    user_limits: dict[str, dict[str, tuple[int | None, int | None]]] = {}
    own: dict[str, list[str]] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = [*line.split("|"), *[""] * 8][:8]
        account, user, partition = fields[:3]
        users.setdefault(account, set())
        if user:
            users[account].add(user)
            if not partition:
                limits = (
                    parse_tres_limit(fields[4], "gres/gpu"),
                    parse_tres_limit(fields[4], "cpu"),
                )
                user_limits.setdefault(account, {})[user] = limits
        elif not partition:
            own[account] = fields
    return {
        account: (fields[3], _limits(fields, users[account], user_limits.get(account, {})))
        for account, fields in own.items()
    }


def _limits(
    fields: list[str], users: set[str], user_limits: dict[str, tuple[int | None, int | None]]
) -> AccountLimits:
    tres_minutes, max_submit, grp_submit, grp_jobs = fields[4:8]
    return AccountLimits(
        users=tuple(sorted(users)),
        gpu_minutes=parse_tres_limit(tres_minutes, "gres/gpu"),
        cpu_minutes=parse_tres_limit(tres_minutes, "cpu"),
        max_submit_jobs=parse_job_count(max_submit),
        job_counts={
            "GrpSubmitJobs": parse_job_count(grp_submit),
            "GrpJobs": parse_job_count(grp_jobs),
        },
        user_gpu_minutes={user: gpu for user, (gpu, _) in user_limits.items() if gpu is not None},
        user_cpu_minutes={user: cpu for user, (_, cpu) in user_limits.items() if cpu is not None},
    )


def slurm_accounts(
    accounts: dict[str, tuple[str, str]], associations: dict[str, tuple[str, AccountLimits]]
) -> list[SlurmAccount]:
    """The accounts that have an association on the cluster, ``root`` aside, by name."""
    return [
        SlurmAccount(
            name=name,
            organization=accounts.get(name, ("", ""))[0],
            description=accounts.get(name, ("", ""))[1],
            parent=parent,
            limits=limits,
        )
        for name, (parent, limits) in sorted(associations.items())
        if name != "root"
    ]


# --- nodes ---------------------------------------------------------------------------

# The marks scontrol and sinfo put after a node's base state, as flags.
_STATE_MARKS = {
    "*": "not_responding",
    "~": "powered_down",
    "#": "powering_up",
    "%": "powering_down",
    "!": "power_down_pending",
    "$": "maint",
    "@": "reboot_requested",
    "^": "reboot_issued",
    "-": "planned",
}


@reads_slurm_output
def node_states(text: str) -> tuple[str, ...]:
    """``MIXED+PLANNED`` → ("mixed", "planned"); ``DOWN*+DRAIN`` → ("down",
    "not_responding", "drain"): the base state, then its flags, lower case."""
    states: list[str] = []
    for part in text.strip().split("+"):
        name = part.rstrip("".join(_STATE_MARKS))
        if name:
            states.append(name.lower())
        states += [_STATE_MARKS[mark] for mark in part[len(name) :]]
    return tuple(states) or ("unknown",)


@reads_slurm_output
def gpus_by_type(gres: str) -> tuple[tuple[str, int], ...]:
    """Configured GPUs by type from a node's ``Gres`` like ``gpu:h200:8(S:0-1),gpu:a100:2``
    (an untyped ``gpu:4`` is type "")."""
    counts: dict[str, int] = {}
    for item in gres.split(","):
        match = _GPU_GRES.match(item.strip())
        if match:
            gpu_type = match["type"] or ""
            counts[gpu_type] = counts.get(gpu_type, 0) + int(match["count"])
    return tuple(sorted(counts.items()))


_NODE_KEY = re.compile(r"(?:^| )([A-Z][A-Za-z_]*)=")
# scontrol prints a reason as "Reason=<text> [<who>@<when>]"; the text is anyone's words.
_NODE_REASON = re.compile(r" Reason=(?P<reason>.*?) \[[^\]@ ]*@[^\] ]*\]")


def parse_devices_constrained(config: str) -> bool:
    """Whether ``scontrol show config`` says a job reaches only the GPUs it was given:
    task/cgroup confines its processes and cgroup.conf's ``ConstrainDevices=yes`` its
    devices. Without both, a job that asked for no GPU (and is billed at the CPU rate)
    may open every GPU of its node. The configuration is the site's, not a user's."""
    settings: dict[str, str] = {}
    for line in config.splitlines():
        key, equals, value = line.partition("=")
        if equals:
            settings.setdefault(key.strip().lower(), value.strip().lower())
    plugins = settings.get("taskplugin", "").replace(",", " ").split()
    return "task/cgroup" in plugins and settings.get("constraindevices") == "yes"


@reads_slurm_output
def parse_scontrol_nodes(text: str) -> list[NodeInfo]:
    """Nodes from ``scontrol --oneliner show nodes``: one line per node of ``Key=value``
    separated by spaces. Values with spaces (``OS``, ``Reason``) are read up to the next
    key; a reason up to its ``[who@when]``."""
    nodes = []
    for line in text.splitlines():
        if not line.startswith("NodeName="):
            continue
        reason = ""
        found = _NODE_REASON.search(line)
        if found:
            reason = found["reason"].strip()
            line = line[: found.start()] + line[found.end() :]
        keys = list(_NODE_KEY.finditer(line))
        fields = {
            key[1]: line[key.end() : following.start() if following else len(line)].strip()
            for key, following in zip(keys, [*keys[1:], None], strict=True)
        }
        if not found:
            reason = fields.get("Reason", "")
        nodes.append(
            NodeInfo(
                name=fields["NodeName"],
                partitions=tuple(p for p in fields.get("Partitions", "").split(",") if p),
                states=node_states(fields.get("State", "")),
                reason="" if reason.lower() in _NOT_A_VALUE else reason,
                gpus_by_type=gpus_by_type(fields.get("Gres", "")),
                allocated_gpus=parse_alloc_gpus(fields.get("AllocTRES", "")),
                cpus=_count(fields.get("CPUTot", "")),
                allocated_cpus=_count(fields.get("CPUAlloc", "")),
            )
        )
    return nodes


_HOST_RANGE = re.compile(r"^(?P<prefix>[^\[]*)\[(?P<ranges>[^\]]*)\](?P<rest>.*)$")


@reads_slurm_output
def expand_hostlist(hostlist: str) -> list[str]:
    """Slurm's compressed host list as names: ``gpu[01-03,05],login`` → gpu01, gpu02,
    gpu03, gpu05, login; zero padding kept, several brackets multiplied out."""
    names: list[str] = []
    depth, start = 0, 0
    for index, char in enumerate(hostlist + ","):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            names += _expand_one(hostlist[start:index].strip())
            start = index + 1
    return names


_MAX_HOSTS = 100_000


def _expand_one(host: str) -> list[str]:
    size = 1
    for ranges in re.findall(r"\[([^\]]*)\]", host):
        for part in ranges.split(","):
            low, _, high = part.partition("-")
            size *= int(high) - int(low) + 1 if high else 1
    if size > _MAX_HOSTS:
        raise SlurmOutputInvalid(f"host list too long: {host[:100]!r}")
    match = _HOST_RANGE.match(host)
    if not match:
        return [host] if host else []
    names = []
    for part in match["ranges"].split(","):
        low, _, high = part.partition("-")
        if not high:
            numbers = [low]
        else:
            width = len(low)
            numbers = [str(n).zfill(width) for n in range(int(low), int(high) + 1)]
        for number in numbers:
            names += _expand_one(f"{match['prefix']}{number}{match['rest']}")
    return names
