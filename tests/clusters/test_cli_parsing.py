"""The cli adapter's parsers on output recorded from the dev clusters: portal-dev
(Slurm 22.05) and portal-next (Slurm 24.11, the ``*-24.11.txt`` fixtures)."""

import datetime as dt
from pathlib import Path

import pytest

from clusters.slurm.cli import export_argument, sbatch_arguments
from clusters.slurm.errors import UNKNOWN_JOB_MARKERS, NotFound, error_from_message, says
from clusters.slurm.parsing import (
    parse_alloc_cpus,
    parse_alloc_gpus,
    parse_array_id,
    parse_cpu_time,
    parse_exit_code,
    parse_job_count,
    parse_sacct,
    parse_sacctmgr_accounts,
    parse_sacctmgr_associations,
    parse_sinfo_partitions,
    parse_size,
    parse_squeue,
    parse_sshare_account,
    parse_test_only,
    parse_tres_limit,
    parse_tres_usage_minutes,
    slurm_accounts,
)
from clusters.slurm.states import SlurmJobState
from clusters.slurm.types import AccountLimits, PartitionInfo, SubmitRequest, with_unstarted_ends

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "cli"


def recorded(name: str) -> str:
    # Decoded the way the client decodes Slurm's output.
    return (FIXTURES / name).read_bytes().decode("utf-8", errors="replace")


def test_squeue_records_survive_odd_names_and_na_fields():
    jobs = {entry.job_id: entry for entry in parse_squeue(recorded("squeue.txt"))}
    assert set(jobs) == {76, 77, 78, 79, 80, 81}
    assert jobs[76].name == "caf\ufffd-\ufffd" and jobs[76].comment == ""
    assert jobs[77].name == "pipe|name"
    assert jobs[77].comment == "portal:11111111-2222-3333-4444-555555555555"
    assert jobs[77].state == SlurmJobState.RUNNING
    assert jobs[77].started_at == dt.datetime(2026, 12, 2, 12, 50, 56, tzinfo=dt.UTC)
    assert (jobs[78].array_job_id, jobs[78].array_task) == (78, "0-5%2")
    assert jobs[78].reason == "Dependency" and jobs[78].started_at is None
    assert jobs[79].state == SlurmJobState.PENDING and jobs[79].reason == "BeginTime"  # requeued
    assert jobs[79].started_at is None  # squeue's expected start is not a start
    assert jobs[80].state == SlurmJobState.FAILED
    assert jobs[81].reason == "JobHeldUser"
    assert jobs[76].array_job_id is None and jobs[76].time_limit_minutes == 5


def test_sacct_records_carry_gpus_exit_codes_and_times():
    jobs = {entry.job_id: entry for entry in parse_sacct(recorded("sacct.txt"))}
    assert jobs[76].state == SlurmJobState.COMPLETED
    assert jobs[76].allocated_gpus == 1 and jobs[76].elapsed_s == 1
    assert jobs[76].allocated_cpus == 1
    assert jobs[77].ended_at is None and jobs[77].name == "pipe|name"
    assert jobs[79].state == SlurmJobState.REQUEUED
    assert (jobs[80].exit_code, jobs[80].signal) == (7, 0)
    assert jobs[80].state == SlurmJobState.FAILED


def test_a_newline_in_a_job_name_does_not_split_the_record():
    line = "\x1f".join(
        ["5", "5", "u", "a", "p", "COMPLETED", "0:0", "gres/gpu=1", "3", "Unknown",
         "Unknown", "Unknown", "", "", "", "", "", "two\nlines"]
    )  # fmt: skip
    [entry] = parse_sacct(line + "\n")
    assert entry.name == "two\nlines"
    assert entry.submitted_at is None


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
def test_each_users_raw_gpu_minutes_come_from_the_user_lines_of_sshare_all(version):
    used = parse_sshare_account(recorded(f"sshare-all-{version}.txt"), "contract")
    assert used is not None
    assert used.gpu == 2 and used.users_gpu == {"alice": 2, "bob": 0}
    assert parse_sshare_account(recorded(f"sshare-shares-{version}.txt"), "vision").users_gpu == {}


def test_a_users_own_gpu_minutes_limit_comes_from_their_association():
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


def test_the_environment_is_exported_explicitly_or_not_at_all():
    assert export_argument({}) == "--export=NONE"
    assert export_argument({"A": "1", "B": "x y"}) == "--export=A=1,B=x y"
    with pytest.raises(ValueError, match="'B'"):
        export_argument({"B": "a,b"})


# --- Slurm 24.11 (portal-next), the same formats --------------------------------------


def at(hour: int, minute: int, second: int) -> dt.datetime:
    return dt.datetime(2026, 12, 3, hour, minute, second, tzinfo=dt.UTC)


def test_24_11s_queue_reads_as_22_05s():
    jobs = {entry.job_id: entry for entry in parse_squeue(recorded("squeue-24.11.txt"))}
    assert set(jobs) == {3, 4, 5, 6, 7, 8, 9, 10, 11}
    assert jobs[3].name == "caf\ufffd-\ufffd" and jobs[3].state == SlurmJobState.COMPLETED
    assert jobs[4].name == "pipe|name"
    assert jobs[4].comment == "portal:11111111-2222-3333-4444-555555555555"
    assert (jobs[4].state, jobs[4].started_at) == (SlurmJobState.RUNNING, at(15, 58, 28))
    assert (jobs[6].array_job_id, jobs[6].array_task, jobs[6].reason) == (6, "0-5%2", "Dependency")
    assert jobs[7].reason == "JobHeldUser" and jobs[7].started_at is None
    assert (jobs[8].state, jobs[8].reason) == (SlurmJobState.PENDING, "BeginTime")  # requeued
    assert jobs[8].started_at is None  # its expected start is not a start
    assert jobs[9].state == SlurmJobState.CANCELLED
    assert jobs[10].time_limit_minutes == 1 and jobs[5].state == SlurmJobState.FAILED


def test_24_11s_accounting_reads_as_22_05s():
    jobs = {entry.job_id: entry for entry in parse_sacct(recorded("sacct-24.11.txt"))}
    assert (jobs[3].state, jobs[3].allocated_gpus, jobs[3].allocated_cpus) == (
        SlurmJobState.COMPLETED, 1, 1
    )  # fmt: skip
    assert jobs[4].comment == "portal:11111111-2222-3333-4444-555555555555"
    assert (jobs[4].elapsed_s, jobs[4].ended_at) == (60, at(15, 59, 28))
    assert (jobs[5].state, jobs[5].exit_code, jobs[5].signal) == (SlurmJobState.FAILED, 7, 0)
    assert jobs[8].state == SlurmJobState.REQUEUED
    assert (jobs[10].state, jobs[10].elapsed_s) == (SlurmJobState.TIMEOUT, 84)
    tasks = {e.array_task: e.job_id for e in jobs.values() if e.array_job_id == 6}
    assert tasks == {"0": 31, "1": 32, "2": 33, "3": 34, "4": 35, "5": 6}


def test_24_11_accounts_a_refused_submission_as_a_failed_job_that_never_started():
    # sbatch was refused ("Requested node configuration is not available") yet 24.11
    # keeps the job: FAILED, exit 1, no allocation, and Start "None" where 22.05
    # printed the submit time. It never ran, so it uses nothing.
    refused = next(e for e in parse_sacct(recorded("sacct-24.11.txt")) if e.job_id == 13)
    assert (refused.state, refused.exit_code) == (SlurmJobState.FAILED, 1)
    assert refused.started_at is None and refused.ended_at == at(15, 58, 35)
    assert (refused.allocated_gpus, refused.allocated_cpus, refused.elapsed_s) == (0, 0, 0)


def test_24_11s_job_cancelled_while_it_waited_is_read_from_the_second_read():
    ended = parse_sacct(recorded("sacct-24.11.txt"))
    unstarted = parse_sacct(recorded("sacct-unstarted-24.11.txt"))
    [cancelled] = unstarted
    assert (cancelled.job_id, cancelled.state) == (9, SlurmJobState.CANCELLED)  # "by 1001"
    assert cancelled.started_at is None and cancelled.allocated_gpus == 0
    assert 9 not in {e.job_id for e in ended}
    assert 9 in {e.job_id for e in with_unstarted_ends(ended, unstarted)}


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


# --- usage, from the steps (sacct-steps*.txt: without --allocations) -------------------
# Recorded on 2026-12-04 as alice in account contract, --mem=500M -t 5: 28 (22.05) and
# 3 (24.11) burn a CPU for 3 s in the batch step only, which ends before
# jobacct_gather's first sample (30 s): no memory recorded. 39 (22.05) and 15 (24.11)
# run with --acctg-freq=task=1 and burn in an srun step and the batch step.


@pytest.mark.parametrize(
    ("fixture", "short", "sampled", "cpu_s", "peak_k"),
    [("sacct-steps.txt", 28, 39, (1.782, 5.287), 12460),
     ("sacct-steps-24.11.txt", 3, 15, (2.327, 5.619), 13328)],
)  # fmt: skip
def test_sacct_steps_fold_into_the_jobs_usage(fixture, short, sampled, cpu_s, peak_k):
    jobs = {entry.job_id: entry for entry in parse_sacct(recorded(fixture))}
    assert set(jobs) == {short, sampled}  # the steps are no entries of their own
    for job in jobs.values():
        assert job.time_limit_minutes == 5
        assert job.mem_allocated_bytes == 500 * 2**20
        assert job.gpu_util_percent is None and job.gpu_mem_peak_bytes is None  # fake GPUs
    assert (jobs[short].cpu_time_s, jobs[sampled].cpu_time_s) == cpu_s
    assert jobs[short].mem_peak_bytes is None  # never sampled: unknown, not 0
    assert jobs[sampled].mem_peak_bytes == peak_k * 1024  # the batch step's, the higher


def test_an_older_recording_without_usage_reads_as_not_recorded():
    job = next(e for e in parse_sacct(recorded("sacct.txt")) if e.job_id == 76)
    assert (job.cpu_time_s, job.mem_peak_bytes, job.time_limit_minutes) == (None, None, None)
    assert job.mem_allocated_bytes == 1000 * 2**20


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
