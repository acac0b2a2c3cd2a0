"""The cli adapter's parsers on output recorded from the dev cluster."""

import datetime as dt
from pathlib import Path

import pytest

from clusters.slurm.cli import export_argument, sbatch_arguments
from clusters.slurm.parsing import (
    parse_alloc_cpus,
    parse_alloc_gpus,
    parse_array_id,
    parse_exit_code,
    parse_job_count,
    parse_sacct,
    parse_squeue,
    parse_test_only,
    parse_tres_limit,
    parse_tres_usage_minutes,
)
from clusters.slurm.states import SlurmJobState
from clusters.slurm.types import SubmitRequest

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
         "Unknown", "Unknown", "", "two\nlines"]
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
