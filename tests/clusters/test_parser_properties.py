"""Slurm's output parsers on any text, any bytes and any JSON: a result or
SlurmOutputInvalid, never another exception (a sync would die of a KeyError on a newer
Slurm's answer); what users write into Slurm (every byte but NUL) read as data, never as
a record or a field of its own; and what the portal writes in Slurm's own formats reads
back as it was.

Property-based (Hypothesis): each ``@example`` is an input that once raised
something else, kept as a regression case.
"""

import ast
import datetime as dt
import functools
import inspect
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from clusters.slurm import parsing, rest_parsing
from clusters.slurm.errors import SlurmError, SlurmOutputInvalid
from clusters.slurm.parsing import (
    FIELD_SEPARATOR,
    SACCT_COLUMNS,
    SQUEUE_FIELDS,
    TEXT_WIDTH,
    sacct_record,
    squeue_record,
)
from clusters.slurm.states import SlurmJobState
from clusters.slurm.types import Listing, Refused

FAST = settings(max_examples=150, deadline=None)

# Text as Slurm's tools might print it, or anything at all: the separators, digits,
# colons, dashes and words the parsers look for, drawn far more often than chance.
pieces = st.sampled_from(
    [FIELD_SEPARATOR, "\x1e", "\n", "|", ":", "-", "=", ",", "_", "(null)", "N/A", "gpu",
     "gres/gpu", "gres/gpu:a100", "PENDING", "RUNNING", "COMPLETED", "UNLIMITED",
     "2026-12-02T12:46:10", "0x1F", "[", "]", "%", "*", "+", "up", "1", "99999999999999999999"]
)  # fmt: skip
slurm_text = st.one_of(
    st.text(max_size=200),
    st.lists(st.one_of(pieces, st.text(max_size=8)), max_size=60).map("".join),
)


def parses_or_says_invalid(parse, *args):
    try:
        return parse(*args)
    except SlurmOutputInvalid as error:
        assert isinstance(error, SlurmError)
        assert str(error)  # it says what it could not read
        return None


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", errors="surrogatepass")


def _every(size: int, data: bytes) -> list[bytes]:
    return [data[at : at + size] for at in range(0, len(data), size)]


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    at = sorted({cut % (len(data) + 1) for cut in cuts})
    return [data[start:end] for start, end in zip([0, *at], [*at, len(data)], strict=True)]


# Every parser of Slurm's text, by name (a name may repeat with what it is asked for, after
# a space): ``test_every_parser_is_fuzzed`` finds a parser missing from here. squeue's and
# sacct's take the bytes the tools print: here the text's, and any bytes further down.
TEXT_PARSERS: dict[str, Callable[[str], object]] = {
    "parse_time_minutes": parsing.parse_time_minutes,
    "parse_gpu_gres": parsing.parse_gpu_gres,
    "parse_sinfo_partitions": parsing.parse_sinfo_partitions,
    "parse_slurm_time": parsing.parse_slurm_time,
    "parse_array_id": parsing.parse_array_id,
    "parse_alloc_gpus": parsing.parse_alloc_gpus,
    "parse_exit_code": parsing.parse_exit_code,
    "parse_squeue": lambda text: parsing.parse_squeue(_utf8(text)),
    # As the cli adapter reads its tools: in chunks, cut anywhere (here every 7 bytes).
    "parse_squeue_stream": lambda text: list(
        parsing.parse_squeue_stream(_every(7, _utf8(text)), [])
    ),
    "parse_sacct": lambda text: parsing.parse_sacct(_utf8(text)),
    "parse_sacct_stream": lambda text: parsing.parse_sacct_stream(_every(7, _utf8(text))),
    "parse_test_only": parsing.parse_test_only,
    "parse_alloc_cpus": parsing.parse_alloc_cpus,
    "parse_tres_limit gres/gpu": functools.partial(parsing.parse_tres_limit, tres="gres/gpu"),
    "parse_tres_limit cpu": functools.partial(parsing.parse_tres_limit, tres="cpu"),
    "parse_tres_usage_minutes gres/gpu": functools.partial(
        parsing.parse_tres_usage_minutes, tres="gres/gpu"
    ),
    "parse_tres_usage_minutes cpu": functools.partial(parsing.parse_tres_usage_minutes, tres="cpu"),
    "parse_job_count": parsing.parse_job_count,
    "parse_sshare_account": functools.partial(parsing.parse_sshare_account, account="contract"),
    "parse_sacctmgr_accounts": parsing.parse_sacctmgr_accounts,
    "parse_sacctmgr_associations": parsing.parse_sacctmgr_associations,
    "parse_scontrol_nodes": parsing.parse_scontrol_nodes,
    "parse_devices_constrained": parsing.parse_devices_constrained,
    "node_states": parsing.node_states,
    "gpus_by_type": parsing.gpus_by_type,
    "expand_hostlist": parsing.expand_hostlist,
    "parse_size": parsing.parse_size,
    "parse_cpu_time": parsing.parse_cpu_time,
    "parse_tres_usage": parsing.parse_tres_usage,
}


@FAST
@given(text=slurm_text)
@example(text="1:2:3:4")  # parse_time_minutes: four parts
@example(text="x-1")  # a day count that is not a number
@example(text="a|b")  # sinfo: too few fields
@example(text="gres/gpu=two")  # a count that is not a number
@example(text="9" * 5000)  # more digits than int() reads
@example(text="2026-13-45T99:99:99")  # a time no calendar has
@example(text="to start at 2026-02-30T00:00:00 using 1 processors on nodes n1")
@example(text="1e400K")  # parse_size: a size no integer holds (an OverflowError, once)
@example(text="nanK")  # parse_size: not a number
@example(text="1-x:2")  # parse_cpu_time: minutes that are not a number
@example(text="1000x")  # parse_job_count: a count that is not a number (a ValueError, once)
def test_every_text_parser_reads_anything_or_says_it_cannot(text):
    for parse in TEXT_PARSERS.values():
        parses_or_says_invalid(parse, text)


field_text = st.one_of(pieces, st.text(max_size=12))


@FAST
@given(lines=st.lists(st.lists(field_text, max_size=10).map("|".join), max_size=6))
@example(lines=["a|b"])  # an account line without its description
@example(lines=["a||||x|||"])  # a limit that is not a number
@example(lines=["a||||cpu=x|||"])
def test_sacctmgr_listings_of_any_fields(lines):
    # sacctmgr -n -P: lines of "|"-separated fields, as many as asked for or not.
    text = "\n".join(lines)
    parses_or_says_invalid(parsing.parse_sacctmgr_accounts, text)
    parses_or_says_invalid(parsing.parse_sacctmgr_associations, text)


# --- squeue and sacct: what users write is data ----------------------------------------------
#
# Slurm prints a job's name and comment raw, every byte but NUL (issue 33). They are drawn
# here from every such byte, with the bytes the listings were once split on, bytes that
# are not UTF-8, the padding and cut marks of the columns, and whole records of either
# listing drawn far more often than chance.

NOT_UTF8 = [b"\x80", b"\xbf", b"\xc0\xaf", b"\xc3", b"\xc3\x28", b"\xe2\x82", b"\xed\xa0\x80",
            b"\xf4\x90\x80\x80", b"\xfe", b"\xff"]  # fmt: skip
any_byte = st.integers(1, 255).map(lambda byte: bytes([byte]))
text_pieces = st.sampled_from(
    [b"\n", b"\r\n", b"\x1f", b"\x1e", b" ", b"    ", b"+", b"|", b"(null)", b"None", b"N/A",
     "é".encode(), "€".encode(), "😀".encode(), *NOT_UTF8]
)  # fmt: skip
user_text = st.one_of(
    st.lists(st.one_of(any_byte, text_pieces), max_size=100).map(b"".join),
    st.binary(max_size=200).map(lambda data: data.replace(b"\0", b"")),
    st.text(max_size=80).map(lambda text: _utf8(text).replace(b"\0", b"")),
)
EVERY_BYTE = bytes(range(1, 256))
SUBMITTED, STARTED, ENDED = "2026-12-02T12:46:10", "2026-12-02T12:46:11", "2026-12-02T12:47:11"


@dataclass(frozen=True)
class Layout:
    """One listing as the cli adapter reads it: a record as Slurm's tool prints it, the
    parser whole and as a stream, and what a name's or a comment's column holds."""

    tool: str
    write: Callable[..., bytes]  # (job id, comment=, name=, user=, state=) → one record
    parse: Callable[[bytes], Listing]
    stream: Callable[[Iterable[bytes]], Listing]
    column: Callable[[bytes], bytes]  # the bytes of a text its column holds
    no_comment: Callable[[str], bool]  # a comment the listing cannot tell from none


def _squeue(job_id, *, comment=b"(null)", name=b"", user="alice", state="RUNNING") -> bytes:
    return squeue_record(
        [str(job_id), str(job_id), "N/A", user, "acct", "gpu", state, "None", SUBMITTED, STARTED,
         "1:00:00", "7", "gres/gpu:2", "1", "gpu01"],
        comment=comment, name=name,
    )  # fmt: skip


def _sacct(job_id, *, comment=b"", name=b"", user="alice", state="COMPLETED") -> bytes:
    return sacct_record(
        [str(job_id), str(job_id), user, "acct", "gpu", state, "0:0",
         "billing=1,cpu=1,gres/gpu=2,mem=1000M,node=1", "60", SUBMITTED, STARTED, ENDED, "60",
         "00:00:01", "", ""],
        comment=comment, name=name,
    )  # fmt: skip


def _squeue_stream(chunks: Iterable[bytes]) -> Listing:
    refused: list[Refused] = []
    entries = list(parsing.parse_squeue_stream(chunks, refused))
    return Listing(entries, refused)


SQUEUE = Layout(
    "squeue", _squeue, parsing.parse_squeue, _squeue_stream,
    # squeue cuts a text to its width.
    column=lambda text: text[:TEXT_WIDTH],
    no_comment=lambda shown: shown == "(null)",  # what squeue prints for none
)  # fmt: skip
SACCT = Layout(
    "sacct", _sacct, parsing.parse_sacct, parsing.parse_sacct_stream,
    # sacct ends a text it cuts with "+", in its column's last byte: the column is one
    # byte wider than what is read of it, so a text reads as its first 64 bytes.
    column=lambda text: text[:TEXT_WIDTH],
    no_comment=lambda shown: shown.strip().lower() in parsing._NOT_A_VALUE,
)  # fmt: skip
LAYOUTS = pytest.mark.parametrize("layout", [SQUEUE, SACCT], ids=lambda layout: layout.tool)


def _shown(column: bytes) -> str:
    """A column's text as the listings carry it: the padding off, bytes not UTF-8 replaced."""
    return column.rstrip(b" ").decode("utf-8", errors="replace")


@LAYOUTS
@FAST
@given(texts=st.lists(st.tuples(user_text, user_text), max_size=8))
@example(texts=[(EVERY_BYTE, EVERY_BYTE[::-1]), (EVERY_BYTE[64:], EVERY_BYTE[127:])])
@example(texts=[(b"\n" * 200, b"\x1f\x1e" * 100), (b" " * 70 + b"x", b"x" + b" " * 70)])
def test_any_names_and_comments_read_as_exactly_the_records_written(layout, texts):
    output = b"".join(
        layout.write(job_id, comment=comment, name=name)
        for job_id, (comment, name) in enumerate(texts, start=1)
    )
    listing = layout.parse(output)
    assert listing.refused == []
    assert [entry.job_id for entry in listing] == list(range(1, len(texts) + 1))
    for entry, (comment, name) in zip(listing, texts, strict=True):
        assert entry.name == _shown(layout.column(name))
        shown = _shown(layout.column(comment))
        assert entry.comment == ("" if layout.no_comment(shown) else shown)
        assert (entry.user, entry.account, entry.submitted_at) == (
            "alice", "acct", dt.datetime(2026, 12, 2, 12, 46, 10, tzinfo=dt.UTC),
        )  # fmt: skip


@LAYOUTS
@FAST
@given(
    jobs=st.lists(
        st.tuples(user_text, user_text, st.sampled_from(["RUNNING", "COMPLETED", "NO_SUCH"])),
        max_size=6,
    ),
    cuts=st.lists(st.integers(0, 100_000), max_size=12),
)
def test_a_listing_cut_into_chunks_anywhere_reads_as_it_does_whole(layout, jobs, cuts):
    # The tools' output comes through the pipe in pieces of any size: a record, a field or
    # a character split between two of them reads as if the output had come whole, the
    # records refused included.
    output = b"".join(
        layout.write(job_id, comment=comment, name=name, state=state)
        for job_id, (comment, name, state) in enumerate(jobs, start=1)
    )
    whole = layout.parse(output)
    chunked = layout.stream(_cut(output, cuts))
    assert chunked == whole
    assert chunked.refused == whole.refused
    assert [r.job_id for r in whole.refused] == [
        job_id for job_id, (*_, state) in enumerate(jobs, start=1) if state == "NO_SUCH"
    ]


def _old_squeue(victim: int) -> bytes:
    # The format before issue 33: fields split by U+001F, a record ended by U+001E.
    return FIELD_SEPARATOR.join(
        [str(victim), str(victim), "N/A", "olga", "genomics", "gpu", "SUSPENDED", "None",
         SUBMITTED, STARTED, "7-00:00:00", "999999", "gres/gpu:8", "1", "gpu01", "(null)",
         "forged"]
    ).encode() + b"\x1e\n"  # fmt: skip


def _old_sacct(victim: int) -> bytes:
    return FIELD_SEPARATOR.join(
        [str(victim), str(victim), "olga", "genomics", "gpu", "COMPLETED", "0:0",
         "billing=8,cpu=8,gres/gpu=8,node=1", "360000", SUBMITTED, STARTED, ENDED, "", "", "",
         "", "", "forged"]
    ).encode() + b"\n"  # fmt: skip


# Whole records of either listing, in the formats of today and of before, claiming the job
# of a real victim (``victim``) for someone else, finished or suspended, with 8 GPUs.
FORGERIES: dict[str, Callable[[int], bytes]] = {
    "squeue": lambda victim: _squeue(victim, name=b"forged", user="olga", state="SUSPENDED"),
    "squeue's safe fields": lambda victim: b"\n" + _squeue(victim, user="olga")[2 * TEXT_WIDTH :],
    "sacct": lambda victim: _sacct(victim, name=b"forged", user="olga"),
    "sacct after a line": lambda victim: b"\n" + _sacct(victim, user="olga", state="FAILED"),
    "old squeue": _old_squeue,
    "old sacct": _old_sacct,
}


@LAYOUTS
@FAST
@given(
    honest=st.lists(st.tuples(user_text, user_text), min_size=1, max_size=4),
    victim=st.integers(0, 3),
    forgery=st.sampled_from(sorted(FORGERIES)),
    before=user_text,
    after=user_text,
    into=st.sampled_from(["name", "comment", "both"]),
    at=st.integers(0, 4),
)
@example(
    honest=[(b"", b"victim")], victim=0, forgery="squeue's safe fields", before=b"", after=b"",
    into="both", at=1,
)  # fmt: skip
def test_forged_records_in_names_and_comments_never_add_remove_or_change_a_record(
    layout, honest, victim, forgery, before, after, into, at
):
    jobs = list(range(100, 100 + len(honest)))
    forged = before + b"".join(
        FORGERIES[forgery](jobs[victim % len(jobs)]) for _ in range(3)
    ) + after  # fmt: skip
    records = [
        layout.write(job_id, comment=comment, name=name)
        for job_id, (comment, name) in zip(jobs, honest, strict=True)
    ]
    without = layout.parse(b"".join(records))
    records.insert(
        at % (len(records) + 1),
        layout.write(
            999, user="bob",
            comment=forged if into != "name" else b"portal:x",
            name=forged if into != "comment" else b"x",
        ),
    )  # fmt: skip
    listing = layout.parse(b"".join(records))
    assert listing.refused == []
    assert [entry for entry in listing if entry.job_id != 999] == list(without)
    [forger] = [entry for entry in listing if entry.job_id == 999]
    assert (forger.user, forger.account) == ("bob", "acct")
    assert len(listing) == len(jobs) + 1


def _listings_of(record: Callable[[int], bytes]) -> st.SearchStrategy[bytes]:
    return st.builds(record, st.integers(0, 2**64))


whole_records = st.one_of(
    _listings_of(lambda job_id: _squeue(job_id)),
    _listings_of(lambda job_id: _sacct(job_id)),
    *(_listings_of(forge) for forge in FORGERIES.values()),
)
some_bytes = st.one_of(
    st.binary(max_size=4000),
    st.lists(
        st.one_of(
            st.binary(max_size=40),
            whole_records,
            # A record cut short, or with bytes of its own gone or added.
            st.tuples(whole_records, st.integers(0, 2000)).map(lambda cut: cut[0][: cut[1]]),
            st.tuples(whole_records, st.integers(0, 2000), st.binary(max_size=3)).map(
                lambda change: change[0][: change[1]] + change[2] + change[0][change[1] + 1 :]
            ),
        ),
        max_size=8,
    ).map(b"".join),
)


@FAST
@given(output=some_bytes)
@example(output=b"\n")
@example(output=b" " * (2 * TEXT_WIDTH) + b"\n")  # a record of no fields at all
@example(output=b"x" * (parsing.SACCT_RECORD_BYTES - 1) + b"\n")  # every column filled
def test_any_bytes_read_as_a_listing_or_say_they_cannot(output):
    for parse in (SQUEUE.parse, SACCT.parse):
        listing = parses_or_says_invalid(parse, output)
        if listing is not None:
            assert isinstance(listing, Listing)
            for refused in listing.refused:
                assert isinstance(refused, Refused) and refused.problem
                assert refused.job_id is None or isinstance(refused.job_id, int)
    for stream in (SQUEUE.stream, SACCT.stream):
        parses_or_says_invalid(stream, _every(5, output))


@FAST
@given(fields=st.lists(field_text, min_size=len(SQUEUE_FIELDS), max_size=len(SQUEUE_FIELDS) + 2))
@example(fields=["1", "N/A", "N/A", "u", "a", "p", "BOGUS", *[""] * 8])
@example(fields=["x", "N/A", "N/A", "u", "a", "p", "PENDING", *[""] * 8])
@example(fields=["1", "N/A", "N/A", "u", "a", "p", "PENDING", *[""] * 4, "9" * 5000, *[""] * 3])
@example(
    fields=["9" * 5000, "N/A", "N/A", "u", "a", "p", "PENDING", *[""] * 8]
)  # an id of 5000 digits
def test_a_squeue_record_of_any_fields_is_one_entry_or_one_refusal(fields):
    """Whatever the fields no user writes hold, a record of squeue's shape never stops the
    listing: it reads, or it is refused with its id (where its id is one)."""
    if any("\n" in field for field in fields):  # a line's end: another record's start
        fields = [field.replace("\n", " ") for field in fields]
    listing = parsing.parse_squeue(squeue_record(fields, name=b"n"))
    assert len(listing) + len(listing.refused) == 1
    for refused in listing.refused:
        job_id = fields[0]
        said = job_id.isascii() and job_id.isdigit() and len(job_id) <= 20
        assert refused.job_id == (int(job_id) if said else None)


@FAST
@given(
    fields=st.lists(field_text, min_size=len(SACCT_COLUMNS) - 2, max_size=len(SACCT_COLUMNS) - 2)
)
@example(fields=["1", "1", "u", "a", "p", "BOGUS", *[""] * 10])
@example(fields=["1", "1", "u", "a", "p", "COMPLETED", "0:0", "gres/gpu=x" * 40, *[""] * 8])
def test_a_sacct_record_of_any_fields_is_one_entry_or_one_refusal(fields):
    listing = parsing.parse_sacct(sacct_record(fields, name=b"n"))
    job_id = fields[0].encode()[:24].decode(errors="replace").strip()
    if "." in job_id:  # a step: no run of its own, never an entry
        assert len(listing) == 0
        return
    assert len(listing) + len(listing.refused) == 1


# --- what the portal writes reads back --------------------------------------------------

times = st.datetimes(min_value=dt.datetime(2000, 1, 1), max_value=dt.datetime(2100, 1, 1)).map(
    lambda t: t.replace(microsecond=0, tzinfo=dt.UTC)
)


@FAST
@given(
    job_id=st.integers(1, 2**32 - 3),
    name=user_text,
    comment=user_text,
    user=st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True),
    submitted=times,
    started=times,
    limit=st.one_of(st.none(), st.integers(0, 10**6)),
    state=st.sampled_from(["PENDING", "RUNNING", "COMPLETED"]),
    priority=st.integers(0, 2**32 - 1),
    per_node=st.integers(0, 64),
    nodes=st.integers(1, 128),
    gres=st.sampled_from(["gres:gpu:{}", "gres/gpu:{}", "gres/gpu:h200:{}", "gres:gpu:b200:{}"]),
)
def test_a_squeue_record_reads_back_as_written(
    job_id, name, comment, user, submitted, started, limit, state, priority, per_node, nodes, gres
):
    limit_text = "UNLIMITED" if limit is None else f"{limit}"
    tres = gres.format(per_node) if per_node else "N/A"
    fields = [str(job_id), "N/A", "N/A", user, "acct", "gpu", state, "None",
              submitted.strftime("%Y-%m-%dT%H:%M:%S"), started.strftime("%Y-%m-%dT%H:%M:%S"),
              limit_text, str(priority), tres, str(nodes), "gpu[01-02]"]  # fmt: skip
    [entry] = parsing.parse_squeue(squeue_record(fields, comment=comment, name=name))
    assert entry.job_id == job_id
    assert entry.name == _shown(name[:TEXT_WIDTH])
    shown = _shown(comment[:TEXT_WIDTH])
    assert entry.comment == ("" if shown == "(null)" else shown)
    assert entry.user == user
    assert entry.submitted_at == submitted
    assert entry.started_at == (None if state == "PENDING" else started)
    assert entry.time_limit_minutes == limit
    assert entry.priority == priority
    assert entry.gpus == per_node * nodes
    assert entry.gpus_known == bool(per_node)
    # squeue's %S is a pending job's forecast, a running job's start.
    assert entry.expected_start_at == (started if state == "PENDING" else None)
    assert entry.nodes == ("" if state == "PENDING" else "gpu[01-02]")


@FAST
@given(
    hosts=st.dictionaries(
        st.sampled_from(["gpu", "node", "a1b"]),
        st.sets(st.integers(0, 300), min_size=1, max_size=30),
        min_size=1,
    ),
    width=st.integers(1, 4),
)
def test_a_compressed_host_list_expands_to_its_hosts(hosts, width):
    """What Slurm prints (``gpu[001-003,007],node5``) expands back to every name, padding
    kept, whatever the ranges."""
    parts, expected = [], []
    for prefix, numbers in hosts.items():
        ranges: list[list[int]] = []
        for number in sorted(numbers):
            if ranges and ranges[-1][1] == number - 1:
                ranges[-1][1] = number
            else:
                ranges.append([number, number])
        spec = ",".join(
            f"{a:0{width}d}" if a == b else f"{a:0{width}d}-{b:0{width}d}" for a, b in ranges
        )
        parts.append(f"{prefix}[{spec}]")
        expected += [f"{prefix}{n:0{width}d}" for n in sorted(numbers)]
    assert parsing.expand_hostlist(",".join(parts)) == expected


@FAST
@given(
    base=st.sampled_from(["IDLE", "MIXED", "ALLOCATED", "DOWN", "FUTURE"]),
    marks=st.text(alphabet="*~#%!$@^-", max_size=2),
    flags=st.lists(st.sampled_from(["DRAIN", "RESERVED", "PLANNED", "MAINT"]), max_size=3),
)
def test_a_node_state_reads_as_its_base_then_its_flags(base, marks, flags):
    states = parsing.node_states("+".join([base + marks, *flags]))
    marked = [parsing._STATE_MARKS[mark] for mark in marks]
    assert states == (base.lower(), *marked, *[flag.lower() for flag in flags])
    assert len(states) == 1 + len(marks) + len(flags)


@FAST
@given(minutes=st.integers(0, 10**7), seconds=st.integers(0, 59))
def test_slurm_times_in_every_form_read_as_minutes_rounded_up(minutes, seconds):
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    total = minutes + (1 if seconds else 0)
    assert parsing.parse_time_minutes(f"{days}-{hours:02d}:{mins:02d}:{seconds:02d}") == total
    assert parsing.parse_time_minutes(f"{days * 24 + hours}:{mins:02d}:{seconds:02d}") == total
    assert parsing.parse_time_minutes(str(minutes)) == minutes


@FAST
@given(gpus=st.integers(0, 10**6), typed=st.lists(st.integers(0, 1000), max_size=4))
def test_alloc_tres_counts_typed_gpus_only_without_the_total(gpus, typed):
    typed_items = [f"gres/gpu:t{n}={count}" for n, count in enumerate(typed)]
    assert parsing.parse_alloc_gpus(",".join(["cpu=1", *typed_items])) == sum(typed)
    with_total = ",".join(["cpu=1", f"gres/gpu={gpus}", *typed_items, "mem=1G"])
    assert parsing.parse_alloc_gpus(with_total) == gpus


step_ids = st.sampled_from(["batch", "extern", "0", "1"])
steps_of_a_run = st.lists(
    st.tuples(step_ids, st.integers(0, 10**6), st.integers(0, 999), st.integers(0, 2**40)),
    max_size=4,
)


@FAST
@given(job_id=st.integers(1, 2**31), runs=st.lists(steps_of_a_run, min_size=1, max_size=3))
def test_each_run_of_a_job_folds_in_its_own_steps_usage(job_id, runs):
    """sacct --duplicates lists each run of a requeued job (the same id, its own submit
    time), each followed by its steps (TotalCPU as [D-]HH:MM:SS.mmm, MaxRSS in K): each
    run's CPU time and highest peak are its own steps'; a peak of 0 (never sampled) and no
    step are not recorded."""
    output = b""
    for number, steps in enumerate(runs):
        state = "COMPLETED" if number == len(runs) - 1 else "REQUEUED"
        output += sacct_record(
            [str(job_id), str(job_id), "u", "a", "p", state, "0:0", "cpu=2,gres/gpu=1,mem=4G",
             "60", f"2026-12-02T12:{number:02d}:10", "Unknown", "Unknown", "90", "", "", ""],
            name=b"name",
        )  # fmt: skip
        for step, seconds, millis, rss in steps:
            days, rest = divmod(seconds, 86400)
            hours, rest = divmod(rest, 3600)
            cpu = f"{days}-{hours:02d}:{rest // 60:02d}:{rest % 60:02d}.{millis:03d}"
            usage = f"cpu=00:00:01,mem={rss // 1024}K,energy=0"
            step_id = f"{job_id}.{step}"
            output += sacct_record(
                [step_id, step_id, "", "a", "", "COMPLETED", "0:0", "", "1", "", "", "", "",
                 cpu, usage, usage],
                name=step.encode(),
            )  # fmt: skip
    listing = parsing.parse_sacct(output)
    assert [entry.submitted_at.minute for entry in listing] == list(range(len(runs)))
    for entry, steps in zip(listing, runs, strict=True):
        assert entry.time_limit_minutes == 90
        assert entry.mem_allocated_bytes == 4 * 2**30
        assert entry.gpu_util_percent is None  # no NVML: never 0
        if not steps:
            assert entry.cpu_time_s is None and entry.mem_peak_bytes is None
            continue
        assert entry.cpu_time_s == round(sum(s + m / 1000 for _, s, m, _ in steps), 3)
        peak = max(rss // 1024 * 1024 for *_, rss in steps)
        assert entry.mem_peak_bytes == (peak or None)


# --- slurmrestd's JSON ----------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)
JOB_KEYS = ["job_id", "job_state", "state", "array_job_id", "array_task_id", "array_task_string",
            "name", "user_name", "user_id", "account", "partition", "state_reason", "comment",
            "submit_time", "start_time", "time_limit", "exit_code", "array", "time", "tres",
            "user", "steps"]  # fmt: skip
# 24.11's (v0.0.40+) numbers: {"set", "infinite", "number"}, and its lists of states.
number_objects = st.fixed_dictionaries(
    {"set": st.booleans(), "infinite": st.booleans(), "number": st.integers() | st.floats()},
    optional={"extra": json_values},
)
state_lists = st.lists(
    st.sampled_from(["PENDING", "RUNNING", "FAILED", "REQUEUED", "COMPLETING", "LAUNCH_FAILED"])
    | st.text(max_size=8),
    max_size=3,
)
json_values = json_values | number_objects | state_lists
job_like = st.dictionaries(st.sampled_from(JOB_KEYS), json_values, max_size=10)
NODE_KEYS = ["name", "state", "state_flags", "partitions", "reason", "gres", "tres_used",
             "cpus", "alloc_cpus"]  # fmt: skip
node_like = st.dictionaries(
    st.sampled_from(NODE_KEYS), json_values | st.sampled_from(["gpu:h200:8", "gres/gpu=2"])
)
# A job that looks right except for what Hypothesis changes.
good_job = st.fixed_dictionaries(
    {"job_id": st.integers(1, 2**31),
     "job_state": st.sampled_from(["RUNNING", "FAILED", ["FAILED"], ["PENDING", "REQUEUED"]]),
     "state": st.fixed_dictionaries(
         {"current": st.sampled_from(["COMPLETED", "FAILED", ["FAILED"], ["RUNNING"]])}
     )},
    optional={key: json_values for key in JOB_KEYS if key not in ("job_id", "job_state", "state")},
)  # fmt: skip
payloads = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"jobs": st.lists(st.one_of(job_like, good_job, json_values), max_size=4)}
    ),
    st.fixed_dictionaries({"errors": json_values}),
    st.fixed_dictionaries({"nodes": st.lists(node_like | json_values, max_size=3)}),
)


# Every parser of slurmrestd's JSON, by name, each given the drawn payload wherever it
# takes one.
REST_PARSERS: dict[str, Callable[[Any], object]] = {
    "parse_queue": rest_parsing.parse_queue,
    "parse_queue_exit_codes": rest_parsing.parse_queue_exit_codes,
    "parse_accounting": rest_parsing.parse_accounting,
    "step_usage": rest_parsing.step_usage,
    "error_list": rest_parsing.error_list,
    "error_codes": rest_parsing.error_codes,
    "errors_message": rest_parsing.errors_message,
    "gpu_minutes_limit": rest_parsing.gpu_minutes_limit,
    "cpu_minutes_limit": rest_parsing.cpu_minutes_limit,
    "tres_minutes_limit": lambda payload: rest_parsing.tres_minutes_limit(payload, payload),
    "job_count_limits": rest_parsing.job_count_limits,
    "max_submit_jobs": rest_parsing.max_submit_jobs,
    "allocated_cpus": rest_parsing.allocated_cpus,
    "submitted_job_id": rest_parsing.submitted_job_id,
    "error_for": functools.partial(rest_parsing.error_for, where="test"),
    "parse_partitions": lambda payload: rest_parsing.parse_partitions(payload, payload),
    "newest_versions": rest_parsing.newest_versions,
    "pending_array_tasks": rest_parsing.pending_array_tasks,
    "allocated_gpus": rest_parsing.allocated_gpus,
    "accounting_exit_code": lambda payload: rest_parsing.accounting_exit_code(
        payload, SlurmJobState.FAILED
    ),
    "exit_status": rest_parsing.exit_status,
    "minutes_used": lambda payload: rest_parsing.minutes_used(payload, "contract"),
    "cancel_outcome": rest_parsing.cancel_outcome,
    "cancel_message": rest_parsing.cancel_message,
    "limits_hold": lambda payload: rest_parsing.limits_hold(
        payload, minutes={"cpu": 1}, jobs={"GrpJobs": 0}
    ),
    "with_limits": lambda payload: rest_parsing.with_limits(
        payload, minutes={"gres/gpu": None, "cpu": 3}, jobs={"MaxSubmitJobs": 2}
    ),
    "parse_account_list": lambda payload: rest_parsing.parse_account_list(
        payload, payload, cluster="contract"
    ),
    "parse_nodes": rest_parsing.parse_nodes,
}


@FAST
@given(payload=payloads)
@example(payload=[])  # a list where an object belongs
@example(payload={"jobs": [{"job_id": 1}]})  # no job_state
@example(payload={"time": {"total": {"seconds": 1, "microseconds": "x"}}})
@example(payload={"tres": {"requested": {"max": [{"type": "mem", "count": 2**70}]}}})
@example(payload={"jobs": [{"job_id": 1, "job_state": "RUNNING", "submit_time": 10**20}]})
@example(payload={"jobs": [{"job_id": 1, "job_state": "FAILED", "exit_code": "x"}]})
@example(payload={"jobs": [None]})
@example(payload={"errors": "down"})
@example(payload={"task": "0xZZ"})
@example(payload={"jobs": [{"job_id": 1, "job_state": []}]})  # an empty list of states
@example(payload={"shares": {"shares": [{"name": "contract", "type": ["ASSOCIATION"]}]}})
def test_every_json_parser_reads_anything_or_says_it_cannot(payload):
    json.dumps(payload)  # what Hypothesis drew is JSON
    for parse in REST_PARSERS.values():
        parses_or_says_invalid(parse, payload)


# GET /slurmdb/vX/accounts and /associations: lists of objects with the keys the import
# reads, holding anything.
ACCOUNT_KEYS = ["name", "description", "organization", "account", "user", "partition",
                "cluster", "parent_account", "max"]  # fmt: skip
account_like = st.dictionaries(
    st.sampled_from(ACCOUNT_KEYS),
    st.sampled_from(["contract", "root", "a", ""]) | json_values,
    max_size=7,
)
listing = st.one_of(
    json_values,
    st.fixed_dictionaries({"accounts": st.lists(account_like | json_values, max_size=3)}),
    st.fixed_dictionaries({"associations": st.lists(account_like | json_values, max_size=4)}),
)


@FAST
@given(accounts=listing, associations=listing)
@example(accounts={"accounts": [{"name": ["a"]}]}, associations={})  # a name not hashable
@example(accounts={}, associations={"associations": [{"account": "a", "user": "u"}]})
def test_an_account_listing_of_any_shape_reads_or_says_it_cannot(accounts, associations):
    read = functools.partial(rest_parsing.parse_account_list, cluster="contract")
    parses_or_says_invalid(read, accounts, associations)


def _marked_parsers(module) -> set[str]:
    """The module's parsers: its functions marked ``@reads_slurm_output`` or named parse_*."""
    tree = ast.parse(inspect.getsource(module))
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and (
            node.name.startswith("parse_")
            or any(
                isinstance(d, ast.Name) and d.id == "reads_slurm_output"
                for d in node.decorator_list
            )
        )
    }


def test_every_parser_is_fuzzed():
    """A parser added to either module without an entry in TEXT_PARSERS or REST_PARSERS
    fails here, as a route without a crawl entry fails the crawl."""
    for module, fuzzed in ((parsing, TEXT_PARSERS), (rest_parsing, REST_PARSERS)):
        listed = {name.split()[0] for name in fuzzed}
        marked = _marked_parsers(module)
        assert marked - listed == set(), f"{module.__name__}: parsers not fuzzed"
        assert listed - marked == set(), f"{module.__name__}: listed but not parsers"


@FAST
@given(tasks=st.sets(st.integers(0, 300), min_size=1, max_size=40), limit=st.integers(0, 50))
def test_a_pending_array_bitmap_reads_as_the_tasks_it_holds(tasks, limit):
    bitmap = hex(sum(1 << task for task in tasks))
    text = rest_parsing.pending_array_tasks(
        {"task": bitmap, "limits": {"max": {"running": {"tasks": limit}}}}
    )
    spec, _, shown_limit = text.strip("[]").partition("%")
    read = set()
    for item in spec.split(","):
        first, _, last = item.partition("-")
        read |= set(range(int(first), int(last or first) + 1))
    assert read == tasks
    assert shown_limit == (str(limit) if limit else "")


@FAST
@given(
    value=st.integers(-(2**40), 2**40),
    set_=st.booleans(),
    infinite=st.booleans(),
)
def test_a_number_object_reads_as_its_number_only_when_set_and_finite(value, set_, infinite):
    read = rest_parsing.number({"set": set_, "infinite": infinite, "number": value})
    plain = rest_parsing.number(value)
    assert read == (plain if set_ and not infinite else None)
    assert plain == (value if 0 <= value < 0xFFFFFFFE else None)


@FAST
@given(
    minutes=st.dictionaries(
        st.sampled_from(["gres/gpu", "cpu"]), st.none() | st.integers(0, 2**40), max_size=2
    ),
    jobs=st.dictionaries(
        st.sampled_from(["MaxSubmitJobs", "GrpSubmitJobs", "GrpJobs"]),
        st.none() | st.integers(0, 2**31),
        max_size=3,
    ),
)
def test_limits_written_into_an_association_read_back_as_written(minutes, jobs):
    association = {"account": "a", "max": {"tres": {"group": {"minutes": [
        {"type": "mem", "name": "", "count": 9}]}}}}  # fmt: skip
    changed = rest_parsing.with_limits(association, minutes=minutes, jobs=jobs)
    assert rest_parsing.limits_hold(changed, minutes=minutes, jobs=jobs)
    assert rest_parsing.tres_minutes_limit(changed, {"type": "mem", "name": ""}) == 9
