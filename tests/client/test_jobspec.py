"""Job requests from flags and YAML job files: times, KEY=VALUE, the file's keys, merging."""

import pytest

from client.jobspec import (
    JobSpecError,
    load_job_file,
    merge,
    parse_assignment,
    parse_minutes,
)


@pytest.mark.parametrize(
    ("text", "minutes"), [("90", 90), ("1:30", 90), ("0:05", 5), (" 2:00 ", 120)]
)
def test_a_time_is_minutes_or_hours_and_minutes(text, minutes):
    assert parse_minutes(text) == minutes


@pytest.mark.parametrize("text", ["1:60", "1h", "", "1:2:3", "-5", "1.5", ":30"])
def test_anything_else_is_not_a_time(text):
    with pytest.raises(JobSpecError, match="minutes"):
        parse_minutes(text)


@pytest.mark.parametrize(
    ("text", "pair"), [("A=1", ("A", "1")), ("A=", ("A", "")), ("_A9=b=c", ("_A9", "b=c"))]
)
def test_an_assignment_is_a_name_and_any_value(text, pair):
    assert parse_assignment(text) == pair


@pytest.mark.parametrize("text", ["A", "=1", "1A=x", "A B=1", "A-B=1"])
def test_an_assignment_needs_a_variable_name(text):
    with pytest.raises(JobSpecError, match="KEY=VALUE"):
        parse_assignment(text)


def write(path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_a_job_file_has_the_apis_field_names_and_reads_its_script_beside_it(tmp_path):
    (tmp_path / "train.sh").write_text("python train.py\n")
    job_file = write(
        tmp_path / "job.yaml",
        "project: vision\n"
        "partition: debug\n"
        "name: train\n"
        "nodes: 2\n"
        "gpus_per_node: 4\n"
        'time_limit_minutes: "1:30"\n'
        "working_directory: /home/alice/runs\n"
        "environment: {EPOCHS: 3, LR: 0.1, MODE: fast}\n"
        "array: 0-9%2\n"
        "depends_on: 12\n"
        "template: 3\n"
        "script_file: train.sh\n",
    )
    assert load_job_file(job_file) == {
        "project": "vision",
        "partition": "debug",
        "name": "train",
        "nodes": 2,
        "gpus_per_node": 4,
        "time_limit_minutes": 90,
        "working_directory": "/home/alice/runs",
        "environment": {"EPOCHS": "3", "LR": "0.1", "MODE": "fast"},
        "array": "0-9%2",
        "depends_on": [12],
        "template": 3,
        "script": "python train.py\n",
    }


def test_an_inline_script_and_a_list_of_dependencies(tmp_path):
    job_file = write(
        tmp_path / "job.yaml", "script: |\n  echo one\n  echo two\ndepends_on: [4, 5]\n"
    )
    assert load_job_file(job_file) == {"script": "echo one\necho two\n", "depends_on": [4, 5]}


def test_an_unquoted_h_mm_is_read_as_minutes_too(tmp_path):
    # YAML 1.1 reads 1:30 as the base-60 number 90: minutes, as H:MM means.
    assert load_job_file(write(tmp_path / "j.yaml", "time_limit_minutes: 1:30\n")) == {
        "time_limit_minutes": 90
    }


def test_a_null_value_is_left_out(tmp_path):
    assert load_job_file(write(tmp_path / "j.yaml", "name: ~\npartition: gpu\n")) == {
        "partition": "gpu"
    }


def test_an_empty_file_is_an_empty_request(tmp_path):
    assert load_job_file(write(tmp_path / "j.yaml", "")) == {}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("gpus: 2\n", "unknown key gpus"),
        ("script: x\nscript_file: y.sh\n", "not both"),
        ("- partition: debug\n", "must be a mapping"),
        ("partition: [debug\n", "not valid YAML"),
        ("environment: {DEBUG: yes}\n", "environment.DEBUG: give text"),
        ("environment: [A=1]\n", "environment: give a mapping"),
        ("nodes: two\n", "nodes: give a whole number"),
        ("nodes: true\n", "nodes: give a whole number"),
        ("requeue: 1\n", "requeue: give true or false"),
        ("requeue: 'yes'\n", "requeue: give true or false"),
        ("time_limit_minutes: soon\n", "not a time"),
        ("name: {a: 1}\n", "name: give text"),
        ("script_file: missing.sh\n", "cannot read the script"),
    ],
)
def test_a_job_file_that_cannot_be_a_request_says_why(tmp_path, text, says):
    with pytest.raises(JobSpecError, match=says):
        load_job_file(write(tmp_path / "job.yaml", text))


def test_a_missing_job_file_says_so(tmp_path):
    with pytest.raises(JobSpecError, match="cannot read the job file"):
        load_job_file(str(tmp_path / "nope.yaml"))


def test_flags_win_over_the_file_and_env_adds_to_its_environment():
    base = {"partition": "gpu", "name": "a", "environment": {"A": "1", "B": "2"}}
    flags = {"partition": "debug", "name": None, "nodes": 2}
    merged = merge(base, flags, environment=[("B", "3"), ("C", "4")])
    assert merged == {
        "partition": "debug",
        "name": "a",
        "nodes": 2,
        "environment": {"A": "1", "B": "3", "C": "4"},
    }
    assert base["environment"] == {"A": "1", "B": "2"}  # the file's request is left alone
