"""Slurm's output parsers on any text and any JSON: a result or SlurmOutputInvalid,
never another exception (a sync would die of a KeyError on a newer Slurm's answer);
and what the portal writes in Slurm's own formats reads back as it was.

Property-based (Hypothesis): each ``@example`` is an input that once raised
something else, kept as a regression case.
"""

import ast
import datetime as dt
import functools
import inspect
import json
from collections.abc import Callable
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from clusters.slurm import parsing, rest_parsing
from clusters.slurm.errors import SlurmError, SlurmOutputInvalid
from clusters.slurm.parsing import FIELD_SEPARATOR, RECORD_SEPARATOR, SACCT_FIELDS, SQUEUE_FIELDS
from clusters.slurm.states import SlurmJobState

FAST = settings(max_examples=150, deadline=None)

# Text as Slurm's tools might print it, or anything at all: the separators, digits,
# colons, dashes and words the parsers look for, drawn far more often than chance.
pieces = st.sampled_from(
    [FIELD_SEPARATOR, RECORD_SEPARATOR, "\n", "|", ":", "-", "=", ",", "_", "(null)", "N/A",
     "gpu", "gres/gpu", "gres/gpu:a100", "PENDING", "RUNNING", "COMPLETED", "UNLIMITED",
     "2026-12-02T12:46:10", "0x1F", "[", "]", "%", "*", "up", "1", "99999999999999999999"]
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


# Every parser of Slurm's text, by name (a name may repeat with what it is asked for, after
# a space): ``test_every_parser_is_fuzzed`` finds a parser missing from here.
TEXT_PARSERS: dict[str, Callable[[str], object]] = {
    "parse_time_minutes": parsing.parse_time_minutes,
    "parse_gpu_gres": parsing.parse_gpu_gres,
    "parse_sinfo_partitions": parsing.parse_sinfo_partitions,
    "parse_slurm_time": parsing.parse_slurm_time,
    "parse_array_id": parsing.parse_array_id,
    "parse_alloc_gpus": parsing.parse_alloc_gpus,
    "parse_exit_code": parsing.parse_exit_code,
    "parse_squeue": parsing.parse_squeue,
    # As the cli adapter reads squeue: in chunks, cut anywhere (here every 7 characters).
    "parse_squeue_stream": lambda text: list(
        parsing.parse_squeue_stream(text[at : at + 7] for at in range(0, len(text), 7))
    ),
    "parse_sacct": parsing.parse_sacct,
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


def _record(fields: list[str], separator: str = FIELD_SEPARATOR) -> str:
    return separator.join(fields)


field_text = st.one_of(pieces, st.text(max_size=12))


@FAST
@given(fields=st.lists(field_text, min_size=len(SQUEUE_FIELDS), max_size=len(SQUEUE_FIELDS) + 2))
@example(fields=["1", "N/A", "N/A", "u", "a", "p", "BOGUS", *[""] * 10])
@example(fields=["x", "N/A", "N/A", "u", "a", "p", "PENDING", *[""] * 10])
@example(fields=["1", "N/A", "N/A", "u", "a", "p", "PENDING", *[""] * 4, "9" * 5000, *[""] * 5])
def test_squeue_records_of_any_fields(fields):
    parses_or_says_invalid(parsing.parse_squeue, _record(fields) + RECORD_SEPARATOR)


def _cut(text: str, cuts: list[int]) -> list[str]:
    at = sorted({cut % (len(text) + 1) for cut in cuts})
    return [text[start:end] for start, end in zip([0, *at], [*at, len(text)], strict=True)]


@FAST
@given(
    names=st.lists(st.text(st.characters(blacklist_characters=RECORD_SEPARATOR)), max_size=6),
    cuts=st.lists(st.integers(0, 10_000), max_size=12),
)
def test_squeue_read_in_chunks_cut_anywhere_reads_as_the_whole_text(names, cuts):
    # squeue's output comes through the pipe in pieces of any size: a record or a field
    # split between two of them reads as if the text had come whole.
    text = "".join(
        _record([str(job_id), "N/A", "N/A", "u", "a", "p", "PENDING", "Priority",
                 "2026-12-02T12:46:10", "N/A", "1:00:00", "7", "gres/gpu:2", "1", "",
                 "(null)", name]) + RECORD_SEPARATOR + "\n"
        for job_id, name in enumerate(names, start=1)
    )  # fmt: skip
    chunked = list(parsing.parse_squeue_stream(_cut(text, cuts)))
    assert chunked == parsing.parse_squeue(text)
    assert [entry.name for entry in chunked] == names


@FAST
@given(fields=st.lists(field_text, min_size=len(SACCT_FIELDS), max_size=len(SACCT_FIELDS) + 2))
def test_sacct_records_of_any_fields(fields):
    parses_or_says_invalid(parsing.parse_sacct, _record(fields) + "\n")


# sacctmgr -n -P: lines of "|"-separated fields, as many as asked for or not.
sacctmgr_lines = st.lists(st.lists(field_text, max_size=10).map("|".join), max_size=6)


@FAST
@given(lines=sacctmgr_lines)
@example(lines=["a|b"])  # an account line without its description
@example(lines=["a||||x|||"])  # a limit that is not a number
@example(lines=["a||||cpu=x|||"])
def test_sacctmgr_listings_of_any_fields(lines):
    text = "\n".join(lines)
    parses_or_says_invalid(parsing.parse_sacctmgr_accounts, text)
    parses_or_says_invalid(parsing.parse_sacctmgr_associations, text)


# --- what the portal writes reads back --------------------------------------------------

safe_text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x1e\x1f\n\r"), max_size=20
)
times = st.datetimes(min_value=dt.datetime(2000, 1, 1), max_value=dt.datetime(2100, 1, 1)).map(
    lambda t: t.replace(microsecond=0, tzinfo=dt.UTC)
)


@FAST
@given(
    job_id=st.integers(1, 2**32 - 3),
    name=safe_text,
    comment=safe_text,
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
              limit_text, str(priority), tres, str(nodes), "gpu[01-02]",
              comment or "(null)", name]  # fmt: skip
    [entry] = parsing.parse_squeue(_record(fields) + RECORD_SEPARATOR)
    assert entry.job_id == job_id
    assert entry.name == name
    assert entry.comment == (comment if comment != "(null)" else "")
    assert entry.user == user
    assert entry.submitted_at == submitted
    assert entry.started_at == (None if state == "PENDING" else started)
    assert entry.time_limit_minutes == limit
    assert entry.priority == priority
    assert entry.gpus == per_node * nodes
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


@FAST
@given(
    job_id=st.integers(1, 2**31),
    steps=st.lists(
        st.tuples(step_ids, st.integers(0, 10**6), st.integers(0, 999), st.integers(0, 2**40)),
        max_size=4,
    ),
)
def test_a_jobs_steps_fold_into_its_usage(job_id, steps):
    """sacct's steps (TotalCPU as [D-]HH:MM:SS.mmm, MaxRSS in K) add up to the job's CPU
    time and highest peak; a peak of 0 (never sampled) and no step are not recorded."""
    job = [str(job_id), str(job_id), "u", "a", "p", "COMPLETED", "0:0",
           "cpu=2,gres/gpu=1,mem=4G", "60", "Unknown", "Unknown", "Unknown", "", "90", "", "",
           "", "name"]  # fmt: skip
    lines = [_record(job)]
    for step, seconds, millis, rss in steps:
        days, rest = divmod(seconds, 86400)
        hours, rest = divmod(rest, 3600)
        cpu = f"{days}-{hours:02d}:{rest // 60:02d}:{rest % 60:02d}.{millis:03d}"
        usage = f"cpu=00:00:01,mem={rss // 1024}K,energy=0"
        step_id = f"{job_id}.{step}"
        fields = [step_id, step_id, "", "a", "", "COMPLETED", "0:0", "", "1", "", "", "", "",
                  "", cpu, usage, usage, step]  # fmt: skip
        lines.append(_record(fields))
    [entry] = parsing.parse_sacct("\n".join(lines) + "\n")
    assert entry.time_limit_minutes == 90
    assert entry.mem_allocated_bytes == 4 * 2**30
    assert entry.gpu_util_percent is None  # no NVML: never 0
    if not steps:
        assert entry.cpu_time_s is None and entry.mem_peak_bytes is None
        return
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
