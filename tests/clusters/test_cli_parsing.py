"""The cli adapter's parsers on output recorded from the dev clusters: portal-dev
(Slurm 22.05) and portal-next (Slurm 24.11, the ``*-24.11.txt`` fixtures). squeue's and
sacct's are the bytes the tools printed (tests/fixtures/cli/README.md)."""

import datetime as dt
from pathlib import Path
from typing import NamedTuple

import pytest

from clusters.slurm.cli import export_argument, sbatch_arguments, with_exports
from clusters.slurm.errors import (
    UNKNOWN_JOB_MARKERS,
    NotFound,
    SlurmOutputInvalid,
    error_from_message,
    says,
)
from clusters.slurm.parsing import (
    FIELD_SEPARATOR,
    SACCT_COLUMNS,
    SACCT_RECORD_BYTES,
    TEXT_WIDTH,
    parse_alloc_cpus,
    parse_alloc_gpus,
    parse_array_id,
    parse_cpu_time,
    parse_exit_code,
    parse_job_count,
    parse_sacct,
    parse_sacct_stream,
    parse_sacctmgr_accounts,
    parse_sacctmgr_associations,
    parse_sinfo_partitions,
    parse_size,
    parse_squeue,
    parse_sshare_account,
    parse_test_only,
    parse_tres_limit,
    parse_tres_usage_minutes,
    sacct_record,
    slurm_accounts,
)
from clusters.slurm.states import SlurmJobState
from clusters.slurm.types import (
    AccountLimits,
    PartitionInfo,
    SubmitRequest,
    accounting_checked,
    with_unstarted_ends,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "cli"
TOKEN = "portal:11111111-2222-3333-4444-555555555555"
CONTROLS = "".join(map(chr, range(1, 32)))  # every byte below the space but NUL


def recorded(name: str) -> str:
    # Decoded the way the client decodes the text of the tools other than squeue and sacct.
    return (FIXTURES / name).read_bytes().decode("utf-8", errors="replace")


def printed(name: str) -> bytes:
    """squeue's and sacct's output as they printed it: their parsers read bytes."""
    return (FIXTURES / name).read_bytes()


class Recording(NamedTuple):
    """The jobs of one cluster's squeue*.txt and sacct*.txt, by what each is (README.md)."""

    suffix: str  # of the files' names
    node: str
    partition: str
    running: int  # named "pipe|na\nme", the portal's token as its comment: the victim
    timeout: int  # --time=1
    array: int  # 0-5%2, after the timeout
    odd: int  # named caf\xe9-\xff
    fails: int  # exit 7
    held: int
    requeued: int  # bob's: requeued while it ran, then ran again
    waits: int  # on the running job, cancelled while it waited
    short: int  # burns a CPU in its batch step only, never sampled
    sampled: int  # --acctg-freq=task=1, burns in an srun step and its batch step
    forged: int  # bob's: a forged record of each listing in its name and comment
    per_job: int | None  # --gpus=2 (per job), on portal-dev only


RECORDINGS = {
    "22.05": Recording("", "vm", "debug", running=22034, timeout=22035, array=22036,
                       odd=22037, fails=22038, held=22039, requeued=22040, waits=22041,
                       short=22042, sampled=22043, forged=22045, per_job=22044),
    "24.11": Recording("-24.11", "next1", "short", running=10017, timeout=10018, array=10019,
                       odd=10020, fails=10021, held=10022, requeued=10023, waits=10024,
                       short=10025, sampled=10026, forged=10027, per_job=None),
}  # fmt: skip
RELEASES = pytest.mark.parametrize("release", sorted(RECORDINGS))
SUBMITTED = dt.datetime(2026, 12, 6, 2, 5, 58, tzinfo=dt.UTC)


def queue_of(jobs: Recording):
    return parse_squeue(printed(f"squeue{jobs.suffix}.txt"))


def accounting_of(jobs: Recording):
    return parse_sacct(printed(f"sacct{jobs.suffix}.txt"))


# --- the queue ------------------------------------------------------------------------


@RELEASES
def test_the_queue_reads_every_job_whatever_its_name(release):
    jobs = RECORDINGS[release]
    listing = queue_of(jobs)
    queued = {entry.job_id: entry for entry in listing}
    assert listing.refused == [] and len(queued) == len(listing)
    assert set(queued) == {
        jobs.running, jobs.timeout, jobs.array, jobs.odd, jobs.fails, jobs.held, jobs.requeued,
        jobs.waits, jobs.forged, *([jobs.per_job] if jobs.per_job else []),
    }  # fmt: skip
    odd, running = queued[jobs.odd], queued[jobs.running]
    assert (odd.name, odd.comment, odd.state) == ("caf\ufffd-\ufffd", "", SlurmJobState.COMPLETED)
    assert (running.name, running.comment) == ("pipe|na\nme", TOKEN)
    assert (running.state, running.started_at) == (SlurmJobState.RUNNING, SUBMITTED)
    # --gres=gpu:1 is per node (squeue's %b), and the node is listed.
    assert (running.gpus, running.gpus_known, running.nodes) == (1, True, jobs.node)
    assert (running.user, running.account, running.partition) == (
        "alice", "fixturerec", jobs.partition,
    )  # fmt: skip
    assert running.time_limit_minutes == 10 and running.array_job_id is None
    array = queued[jobs.array]
    assert (array.array_job_id, array.array_task, array.reason) == (
        jobs.array,
        "0-5%2",
        "Dependency",
    )
    assert array.started_at is None
    held = queued[jobs.held]
    assert (held.state, held.reason, held.started_at) == (
        SlurmJobState.PENDING,
        "JobHeldUser",
        None,
    )
    requeued = queued[jobs.requeued]
    assert (requeued.state, requeued.reason, requeued.user) == (
        SlurmJobState.PENDING, "BeginTime", "bob",
    )  # fmt: skip
    assert requeued.started_at is None  # squeue's expected start is not a start
    assert requeued.expected_start_at > requeued.submitted_at > SUBMITTED  # submitted again
    assert (queued[jobs.fails].state, queued[jobs.fails].reason) == (
        SlurmJobState.FAILED, "NonZeroExitCode",
    )  # fmt: skip
    assert queued[jobs.waits].state == SlurmJobState.CANCELLED
    assert queued[jobs.timeout].time_limit_minutes == 1


@RELEASES
def test_a_forged_queue_entry_in_a_name_and_a_comment_is_a_name_and_a_comment(release):
    # bob's job: its name a forged record of squeue's (the running job's id, olga's,
    # SUSPENDED, 8 GPUs) after a line's end; its comment every control byte, bytes that are
    # not UTF-8, a line's end and a forged record of sacct's.
    jobs = RECORDINGS[release]
    queued = {entry.job_id: entry for entry in queue_of(jobs)}
    forger, victim = queued[jobs.forged], queued[jobs.running]
    assert (forger.user, forger.state, forger.gpus) == ("bob", SlurmJobState.RUNNING, 0)
    assert forger.name.startswith(f"\n{jobs.running}\x1f{jobs.running}\x1fN/A\x1folga\x1f")
    assert len(forger.name.encode()) == TEXT_WIDTH  # squeue cut it
    assert forger.comment.startswith(CONTROLS + "\ufffd\ufffd\ufffd(\ufffd\n")
    assert (victim.user, victim.account, victim.state, victim.gpus) == (
        "alice", "fixturerec", SlurmJobState.RUNNING, 1,
    )  # fmt: skip
    assert "olga" not in {entry.user for entry in queued.values()}


def _squeue_records(output: bytes) -> list[bytes]:
    """squeue's records: the texts' fixed widths, then up to the newline."""
    records, start = [], 0
    while start < len(output):
        end = output.index(b"\n", start + 2 * TEXT_WIDTH) + 1
        records.append(output[start:end])
        start = end
    return records


def _safe_part(record: bytes) -> list[bytes]:
    return record[2 * TEXT_WIDTH : -1].split(FIELD_SEPARATOR.encode())


@RELEASES
@pytest.mark.parametrize(
    "change",
    [lambda fields: [*fields[:6], b"NO_SUCH_STATE", *fields[7:]],
     lambda fields: [*fields, b"one field too many"],
     lambda fields: fields[:-1]],
    ids=["an unknown state", "a field too many", "a field too few"],
)  # fmt: skip
def test_a_queue_record_that_does_not_read_is_refused_with_its_id_and_the_rest_read(
    release, change
):
    jobs = RECORDINGS[release]
    records = _squeue_records(printed(f"squeue{jobs.suffix}.txt"))
    [broken] = [r for r in records if _safe_part(r)[0] == str(jobs.held).encode()]
    fields = change(_safe_part(broken))
    unreadable = broken[: 2 * TEXT_WIDTH] + FIELD_SEPARATOR.encode().join(fields) + b"\n"
    # First, so that every other record comes after it.
    listing = parse_squeue(unreadable + b"".join(r for r in records if r is not broken))
    [refused] = listing.refused
    assert refused.job_id == jobs.held and "cannot read the record" in refused.problem
    assert "held" in refused.text
    assert listing == [entry for entry in queue_of(jobs) if entry.job_id != jobs.held]


def test_squeue_output_that_ends_inside_a_record_is_refused_whole():
    output = printed("squeue.txt")
    with pytest.raises(SlurmOutputInvalid, match="ends inside a record"):
        parse_squeue(output[:-1])
    with pytest.raises(SlurmOutputInvalid, match="ends inside a record"):
        parse_squeue(output[: 2 * TEXT_WIDTH + 5])


# --- accounting -----------------------------------------------------------------------


def _column(name: str) -> slice:
    start = 0
    for column, width in SACCT_COLUMNS:
        if column == name:
            return slice(start, start + width)
        start += width + 1
    raise KeyError(name)


def _sacct_records(output: bytes) -> list[bytes]:
    return [
        output[at : at + SACCT_RECORD_BYTES] for at in range(0, len(output), SACCT_RECORD_BYTES)
    ]


def _with(record: bytes, column: str, value: bytes) -> bytes:
    where = _column(column)
    return record[: where.start] + value.ljust(where.stop - where.start) + record[where.stop :]


def _raw_id(record: bytes) -> bytes:
    return record[_column("JobIDRaw")].rstrip()


@RELEASES
def test_accounting_reads_every_job_with_gpus_exit_codes_and_times(release):
    jobs = RECORDINGS[release]
    listing = accounting_of(jobs)
    assert listing.refused == []
    runs = {entry.job_id: entry for entry in listing if entry.job_id != jobs.requeued}
    running = runs[jobs.running]
    assert (running.state, running.ended_at, running.name) == (
        SlurmJobState.RUNNING, None, "pipe|na\nme",
    )  # fmt: skip
    assert (running.allocated_gpus, running.allocated_cpus, running.mem_allocated_bytes) == (
        1, 1, 1000 * 2**20,
    )  # fmt: skip
    # slurmdbd keeps "?" for each byte that is not UTF-8.
    odd = runs[jobs.odd]
    assert (odd.name, odd.state, odd.elapsed_s) == ("caf?-?", SlurmJobState.COMPLETED, 20)
    assert odd.started_at < odd.ended_at and odd.submitted_at == SUBMITTED
    fails = runs[jobs.fails]
    assert (fails.state, fails.exit_code, fails.signal) == (SlurmJobState.FAILED, 7, 0)
    timeout = runs[jobs.timeout]
    assert (timeout.state, timeout.time_limit_minutes) == (SlurmJobState.TIMEOUT, 1)
    assert timeout.elapsed_s > 60
    tasks = {e.array_task: e.job_id for e in runs.values() if e.array_job_id == jobs.array}
    assert set(tasks) == {"0", "1", "2", "3", "4", "5"}
    assert tasks["5"] == jobs.array  # the array's own id is its last task's
    assert len(set(tasks.values())) == 6
    assert jobs.waits not in runs and jobs.held not in runs  # never started
    if jobs.per_job:
        assert runs[jobs.per_job].allocated_gpus == 2  # --gpus=2: AllocTRES says it


@RELEASES
def test_a_forged_accounting_record_in_a_name_and_a_comment_is_a_name_and_a_comment(release):
    jobs = RECORDINGS[release]
    listing = accounting_of(jobs)
    forger = next(entry for entry in listing if entry.job_id == jobs.forged)
    assert (forger.user, forger.state, forger.allocated_gpus, forger.elapsed_s) == (
        "bob", SlurmJobState.COMPLETED, 0, 30,
    )  # fmt: skip
    # sacct cuts a text at its column's width and ends it with "+", one byte past the
    # 64 read: the name reads as its first 64 bytes.
    assert forger.name.startswith(f"\n{jobs.running}\x1f{jobs.running}\x1fN/A\x1folga\x1f")
    assert not forger.name.endswith("+") and len(forger.name.encode()) == TEXT_WIDTH
    assert forger.comment.startswith(CONTROLS + "???(??\n")
    assert [e.user for e in listing if e.job_id == jobs.running] == ["alice"]
    assert "olga" not in {entry.user for entry in listing}
    assert accounting_checked(listing).refused == []


@RELEASES
def test_a_requeued_jobs_runs_are_each_listed_with_their_own_submit_time_and_steps(release):
    # Run with --acctg-freq=task=1, it burns a CPU in an srun step and then in its batch
    # step; the first run was requeued while it slept, the second ran whole.
    jobs = RECORDINGS[release]
    listing = accounting_of(jobs)
    first, second = [entry for entry in listing if entry.job_id == jobs.requeued]
    assert (first.state, second.state) == (SlurmJobState.REQUEUED, SlurmJobState.COMPLETED)
    assert first.submitted_at == SUBMITTED
    # The requeue submits the job again: the second run's submit time is the first's end.
    assert first.ended_at <= second.submitted_at < second.started_at
    assert (first.elapsed_s, second.elapsed_s) == (10, 46)
    assert (first.allocated_gpus, second.allocated_gpus) == (1, 1)
    cpu_s, peak_k = {"22.05": ((2.253, 5.815), (12516, 12568)),
                     "24.11": ((2.294, 5.862), (13208, 13132))}[release]  # fmt: skip
    assert (first.cpu_time_s, second.cpu_time_s) == cpu_s
    assert (first.mem_peak_bytes, second.mem_peak_bytes) == tuple(k * 1024 for k in peak_k)
    # Two runs of one job, not one run listed twice: both are taken.
    checked = accounting_checked(listing)
    assert checked.refused == [] and [first, second] == [
        e for e in checked if e.job_id == jobs.requeued
    ]


@RELEASES
def test_a_refused_runs_steps_are_not_folded_into_another_run_of_its_job(release):
    jobs = RECORDINGS[release]
    records = _sacct_records(printed(f"sacct{jobs.suffix}.txt"))
    # The requeued job's runs, each followed by its steps, one after the other (as sacct
    # lists them when no other job was submitted in between); the second's unreadable.
    requeued = str(jobs.requeued).encode()
    mine = [r for r in records if _raw_id(r).split(b".")[0] == requeued]
    assert [_raw_id(r) for r in mine] == [requeued, requeued + b".batch", requeued + b".0"] * 2
    mine[3] = _with(mine[3], "State", b"NO_SUCH_STATE")
    listing = parse_sacct(b"".join(mine))
    [refused] = listing.refused
    assert refused.job_id == jobs.requeued and "NO_SUCH_STATE" in refused.problem
    first = next(entry for entry in accounting_of(jobs) if entry.job_id == jobs.requeued)
    assert listing == [first]  # its usage its own steps' only


@RELEASES
@pytest.mark.parametrize(
    ("column", "value"),
    [("AllocTRES", b"billing=1,cpu=1,gres/gpu=1," + b"x" * 228 + b"+"),
     ("State", b"CANCELLED by 4294967294" + b"9" * 8 + b"+"),
     ("JobID", b"9" * 128)],
)  # fmt: skip
def test_a_field_of_slurms_own_that_fills_its_column_is_refused_with_its_id(release, column, value):
    # sacct cuts a value longer than its column and ends it with "+": the value read would
    # not be the one Slurm holds.
    jobs = RECORDINGS[release]
    records = _sacct_records(printed(f"sacct{jobs.suffix}.txt"))
    where = next(i for i, r in enumerate(records) if _raw_id(r) == str(jobs.fails).encode())
    records[where] = _with(records[where], column, value)
    listing = parse_sacct(b"".join(records))
    [refused] = listing.refused
    assert refused.job_id == jobs.fails
    assert f"{column} fills its column" in refused.problem
    assert listing == [entry for entry in accounting_of(jobs) if entry.job_id != jobs.fails]


def test_a_user_s_text_that_fills_its_column_is_read_as_cut():
    record = sacct_record(
        ["5", "5", "u", "a", "gpu," * 40, "COMPLETED", "0:0", "gres/gpu=1", "3",
         "2026-12-06T02:05:58", "Unknown", "Unknown", "", "", "", ""],
        comment=b"c" * 100, name=b"n" * 64,
    )  # fmt: skip
    [entry] = parse_sacct(record)
    # sacct marks a cut text with "+" in the column's last byte, past the 64 read.
    assert entry.comment == "c" * 64 and entry.name == "n" * 64
    assert entry.partition == ("gpu," * 40)[:127] + "+"  # a pending job's partitions


@pytest.mark.parametrize(
    "change",
    [lambda output: output[:100] + output[101:],  # a byte short
     lambda output: output[:100] + b" " + output[100:],  # a byte more
     lambda output: output[:-1],  # cut short
     lambda output: output + b"\n",  # a blank line after
     lambda output: output[:SACCT_RECORD_BYTES - 1] + b" " + output[SACCT_RECORD_BYTES:]],
    ids=["a byte short", "a byte more", "cut short", "a blank line after", "no newline"],
)  # fmt: skip
def test_sacct_output_of_another_record_length_is_refused_whole(change):
    # Not what a user can write (every record is as long as its columns, whatever they
    # hold): another format than the one asked for, or an output cut short.
    output = change(printed("sacct.txt"))
    with pytest.raises(SlurmOutputInvalid, match="sacct"):
        parse_sacct(output)
    with pytest.raises(SlurmOutputInvalid, match="sacct"):
        parse_sacct_stream(output[at : at + 4096] for at in range(0, len(output), 4096))


def test_sacct_s_former_delimited_format_is_refused_whole():
    line = FIELD_SEPARATOR.join(
        ["5", "5", "u", "a", "p", "COMPLETED", "0:0", "gres/gpu=1", "3", "Unknown", "Unknown",
         "Unknown", "", "", "", "", "", "two\nlines"]
    )  # fmt: skip
    with pytest.raises(SlurmOutputInvalid):
        parse_sacct(line.encode() + b"\n")


def test_a_newline_in_a_job_name_does_not_split_the_record():
    record = sacct_record(
        ["5", "5", "u", "a", "p", "COMPLETED", "0:0", "gres/gpu=1", "3", "Unknown", "Unknown",
         "Unknown", "", "", "", ""],
        name=b"two\nlines",
    )  # fmt: skip
    [entry] = parse_sacct(record)
    assert entry.name == "two\nlines"
    assert entry.submitted_at is None


# --- usage, from the steps (sacct*.txt: read without --allocations) ---------------------


@RELEASES
def test_sacct_steps_fold_into_the_jobs_usage(release):
    # Both jobs --mem=500M -t 5. The short one burns a CPU for 3 s in its batch step only,
    # which ends before jobacct_gather's first sample (JobAcctGatherFrequency=30): TotalCPU
    # but no MaxRSS. The sampled one runs with --acctg-freq=task=1 and burns in an srun step
    # and in its batch step: both have TRESUsageInMax mem=.
    jobs = RECORDINGS[release]
    runs = {entry.job_id: entry for entry in accounting_of(jobs)}
    short, sampled = runs[jobs.short], runs[jobs.sampled]
    for job in (short, sampled):
        assert job.time_limit_minutes == 5
        assert job.mem_allocated_bytes == 500 * 2**20
        assert job.gpu_util_percent is None and job.gpu_mem_peak_bytes is None  # fake GPUs
    cpu_s, peak_k = {"22.05": ((0.882, 2.275), 12280), "24.11": ((0.978, 2.309), 13208)}[release]
    assert (short.cpu_time_s, sampled.cpu_time_s) == cpu_s
    assert short.mem_peak_bytes is None  # never sampled: unknown, not 0
    assert sampled.mem_peak_bytes == peak_k * 1024  # the batch step's, the higher


@RELEASES
def test_a_job_cancelled_while_it_waited_is_read_from_the_second_read(release):
    jobs = RECORDINGS[release]
    ended = accounting_of(jobs)
    unstarted = parse_sacct(printed(f"sacct-unstarted{jobs.suffix}.txt"))
    [cancelled] = unstarted
    assert (cancelled.job_id, cancelled.state) == (jobs.waits, SlurmJobState.CANCELLED)
    assert cancelled.started_at is None and cancelled.allocated_gpus == 0
    # Read with --allocations: no steps, so no usage recorded (None, never 0).
    assert (cancelled.cpu_time_s, cancelled.mem_peak_bytes) == (None, None)
    assert jobs.waits not in {e.job_id for e in ended}
    assert jobs.waits in {e.job_id for e in with_unstarted_ends(ended, unstarted)}


def test_24_11_accounts_a_refused_submission_as_a_failed_job_that_never_started():
    # sbatch --gres=gpu:5 was refused ("Requested node configuration is not available") yet
    # 24.11 keeps the job: FAILED, exit 1, no allocation, and Start "None" where 22.05
    # printed the submit time. It never ran, so it uses nothing.
    refused = next(e for e in accounting_of(RECORDINGS["24.11"]) if e.name == "refused")
    assert (refused.state, refused.exit_code) == (SlurmJobState.FAILED, 1)
    assert refused.started_at is None and refused.ended_at == refused.submitted_at
    assert (refused.allocated_gpus, refused.allocated_cpus, refused.elapsed_s) == (0, 0, 0)


# --- the other tools --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("billing=1,cpu=1,gres/gpu=2,mem=1000M,node=1", 2),
        ("billing=1,cpu=1,gres/gpu=2,gres/gpu:h200=2,node=1", 2),
        ("cpu=1,gres/gpu:h200=3", 3),
        ("", 0),
        ("cpu=4,mem=4G", 0),
    ],
)
def test_allocated_gpus_come_from_alloc_tres(text, expected):
    assert parse_alloc_gpus(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("billing=1,cpu=4,gres/gpu=2,mem=1000M,node=1", 4), ("", 0), ("gres/gpu=1", 0)],
)
def test_allocated_cpus_come_from_alloc_tres(text, expected):
    assert parse_alloc_cpus(text) == expected


def test_limits_read_from_sacctmgr_and_sshare():
    assert parse_tres_limit("cpu=100,gres/gpu=6000", "cpu") == 100
    assert parse_tres_limit("cpu=100,gres/gpu=6000", "gres/gpu") == 6000
    assert parse_tres_limit("gres/gpu=6000", "cpu") is None
    assert parse_tres_usage_minutes("cpu=30,mem=30000,gres/gpu=12", "cpu") == 30
    assert parse_tres_usage_minutes("", "cpu") == 0
    assert (parse_job_count("1000"), parse_job_count("")) == (1000, None)


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_an_accounts_usage_and_fair_share_standing_come_from_its_own_sshare_line(version):
    text = recorded(f"sshare-shares-{version}.txt")  # a CLUSTER: line, a user's line below
    used = parse_sshare_account(text, "contract")
    assert used is not None
    assert used.gpu == 1
    assert used.share == 0.2
    assert 0 < used.usage < 0.2  # used (recently) less than its share
    assert parse_sshare_account(text, "root").share == 0.0  # the root of the tree
    assert parse_sshare_account(text, "no-such-account") is None


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_each_users_raw_gpu_and_cpu_minutes_come_from_the_user_lines_of_sshare_all(version):
    used = parse_sshare_account(recorded(f"sshare-all-{version}.txt"), "contract")
    assert used is not None
    assert used.gpu == 2 and used.users_gpu == {"alice": 2, "bob": 0}
    assert used.users_cpu == {"alice": 1, "bob": 0}
    assert parse_sshare_account(recorded(f"sshare-shares-{version}.txt"), "vision").users_gpu == {}


def test_a_users_own_gpu_and_cpu_minutes_limits_come_from_their_association():
    text = (
        "vision|||root|gres/gpu=600|||\n"
        "vision|alice|||cpu=5,gres/gpu=7|||\n"
        "vision|bob||||||\n"
        "vision|carol|debug||gres/gpu=9|||\n"  # a partition's association: not the user's own
    )
    parent, limits = parse_sacctmgr_associations(text)["vision"]
    assert parent == "root" and limits.gpu_minutes == 600
    assert limits.users == ("alice", "bob", "carol")
    assert limits.user_gpu_minutes == {"alice": 7}
    assert limits.user_cpu_minutes == {"alice": 5}


def test_array_ids_and_exit_codes():
    assert parse_array_id("24_3") == (24, "3")
    assert parse_array_id("24_[2-5%2]") == (24, "[2-5%2]")
    assert parse_array_id("23") == (None, None)
    assert parse_exit_code("0:9") == (0, 9)
    assert parse_exit_code("") == (None, None)


def test_test_only_answer():
    estimate = parse_test_only(recorded("testonly.txt"))
    assert estimate.starts_at == dt.datetime(2026, 12, 2, 13, 1, 6, tzinfo=dt.UTC)
    assert estimate.nodes == "vm"
    assert parse_test_only("sbatch: error: something else").starts_at is None


def submit_request(**changes) -> SubmitRequest:
    fields = {
        "user": "alice",
        "script": "#!/bin/bash\ntrue\n",
        "account": "vision",
        "partition": "gpu",
        "name": "train",
        "time_limit_minutes": 90,
        "working_directory": "/home/alice",
        "stdout_path": "/home/alice/o",
        "stderr_path": "/home/alice/e",
        "gpus_per_node": 4,
        "cpus_per_gpu": 8,
        "mem_per_gpu_mb": 64000,
        "array": "0-9%2",
        "after_ok": (12, 13),
        "comment": "portal:x",
    }
    return SubmitRequest(**{**fields, **changes})


def test_the_authoritative_resources_go_on_the_command_line():
    arguments = sbatch_arguments(submit_request())
    for expected in [
        "--account=vision",
        "--partition=gpu",
        "--gpus-per-node=4",
        "--cpus-per-gpu=8",
        "--mem-per-gpu=64000M",
        "--time=90",
        "--nodes=1",
        "--array=0-9%2",
        "--dependency=afterok:12:13",
        "--comment=portal:x",
        "--export=NONE",
    ]:
        assert expected in arguments


def test_the_environment_is_exported_by_name_its_values_only_in_the_script():
    assert export_argument({}) == "--export=NONE"
    # A command line is every local user's to read: names only.
    assert export_argument({"A": "1", "B": "s3cret, x"}) == "--export=A,B"
    for name in ("B,C", "B=1", "1B", ""):
        with pytest.raises(ValueError, match="cannot be passed"):
            export_argument({name: "x"})
    script = "#!/bin/bash\n#SBATCH --mail-type=END\n\n# note\necho $B\n"
    assert with_exports(script, {"A": "1", "B": "s3cret, x\ny'"}) == (
        "#!/bin/bash\n#SBATCH --mail-type=END\n\n# note\n"
        "export A=1\nexport B='s3cret, x\ny'\"'\"''\necho $B\n"
    )
    assert with_exports("#!/bin/bash\n", {"A": "1"}) == "#!/bin/bash\nexport A=1\n"


# --- Slurm 24.11 (portal-next), the same formats --------------------------------------


def at(hour: int, minute: int, second: int) -> dt.datetime:
    return dt.datetime(2026, 12, 3, hour, minute, second, tzinfo=dt.UTC)


def test_24_11s_partitions_start_estimate_and_usage():
    assert parse_sinfo_partitions(recorded("sinfo-24.11.txt")) == [
        PartitionInfo("batch", True, True, 7 * 24 * 60, 1, 4, "b200", 4),
        PartitionInfo("short", False, True, 60, 1, 4, "b200", 4),
    ]
    estimate = parse_test_only(recorded("testonly-24.11.txt"))
    assert (estimate.starts_at, estimate.nodes) == (at(16, 8, 35), "next1")
    # 24.11 adds gres/gpumem and gres/gpuutil beside gres/gpu: only gres/gpu is GPU usage.
    [line] = [ln for ln in recorded("sshare-24.11.txt").splitlines() if ln.startswith("record24|")]
    raw = line.split("|")[2]
    assert "gres/gpumem=0" in raw and "gres/gpuutil=0" in raw
    used = raw.replace("gres/gpu=0", "gres/gpu=12").replace("gres/gpumem=0", "gres/gpumem=800")
    assert parse_tres_usage_minutes(used, "gres/gpu") == 12
    assert parse_tres_usage_minutes(used.replace("cpu=0", "cpu=30"), "cpu") == 30


def test_24_11s_scancel_of_an_unknown_job_is_not_found():
    output = recorded("scancel-unknown-24.11.txt")  # scancel exits 0 even so
    errors = "\n".join(line for line in output.splitlines() if "error:" in line)
    assert says(errors, UNKNOWN_JOB_MARKERS)
    assert isinstance(error_from_message(errors), NotFound)


# The import's listing: an account made by hand under a parent of its own, with a user,
# a user on one partition only and limits (sacctmgr-associations*.txt, -accounts*.txt).
HAND_MADE = AccountLimits(
    users=("alice", "bob"),
    gpu_minutes=5000,
    cpu_minutes=90000,
    max_submit_jobs=50,
    job_counts={"GrpSubmitJobs": None, "GrpJobs": 4},
)


@pytest.mark.parametrize("release", ["", "-24.11"])
def test_the_accounts_a_cluster_already_has_are_listed_with_users_parent_and_limits(release):
    accounts = slurm_accounts(
        parse_sacctmgr_accounts(recorded(f"sacctmgr-accounts{release}.txt")),
        parse_sacctmgr_associations(recorded(f"sacctmgr-associations{release}.txt")),
    )
    by_name = {account.name: account for account in accounts}
    assert list(by_name) == ["adoptrec", "adoptrecgrp", "contract"]  # root is no one's to adopt
    adoptrec = by_name["adoptrec"]
    assert (adoptrec.organization, adoptrec.parent) == ("physics", "adoptrecgrp")
    assert adoptrec.description == "lattice qcd | group"  # Slurm lower-cases it; "|" kept
    assert adoptrec.limits == HAND_MADE and adoptrec.users == ("alice", "bob")
    assert by_name["adoptrecgrp"].parent == "root" and by_name["adoptrecgrp"].users == ()
    assert by_name["contract"].limits.gpu_minutes is None


def test_an_account_known_to_slurmdbd_but_without_an_association_here_is_not_listed():
    accounts = slurm_accounts(
        {"elsewhere": ("physics", "on another cluster")},
        parse_sacctmgr_associations(recorded("sacctmgr-associations.txt")),
    )
    assert "elsewhere" not in [account.name for account in accounts]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("00:05.287", 5.287), ("02:03:04", 7384), ("1-02:03:04", 93784), ("00:00:00", 0)],
)
def test_total_cpu_in_every_form(text, seconds):
    assert parse_cpu_time(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "size"), [("12460K", 12460 * 1024), ("500M", 500 * 2**20), ("2G", 2**31), ("0", 0)]
)
def test_sizes_as_sacct_prints_them(text, size):
    assert parse_size(text) == size
