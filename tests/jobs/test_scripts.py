"""Job spec validation, batch-script rendering and GPU-hour arithmetic (pure logic)."""

import dataclasses
import subprocess
from decimal import Decimal

import pytest

from jobs.errors import JobInvalid
from jobs.pricing import charge_gpu_seconds, cpus_per_task, requested_price
from jobs.scripts import render_script
from jobs.specs import JobSpec, array_task_count, decode_script, validate_spec

LIMITS = {"max_time_minutes": 10080, "max_gpus_per_node": 8, "max_nodes": 4}


def spec(**changes) -> JobSpec:
    base = JobSpec(
        name="train-resnet.v2",
        account="proj-vision",
        partition="gpu",
        nodes=2,
        gpus_per_node=4,
        cpus_per_gpu=8,
        mem_per_gpu_gb=32,
        time_limit_minutes=90,
        working_directory="/home/alice/runs",
        output_path="/home/alice/runs/%x-%j.out",
        error_path="/home/alice/runs/%x-%j.err",
        environment={"DATA": "/scratch/alice/imagenet"},
        array="",
        after_ok=(),
        script="python train.py --epochs 10\n",
        submit_token="8f14e45fceea167a5a36dedd4bea2543",
    )
    return dataclasses.replace(base, **changes)


def errors_of(job: JobSpec, **limits) -> dict[str, list[str]]:
    with pytest.raises(JobInvalid) as caught:
        validate_spec(job, **{**LIMITS, **limits})
    return caught.value.fields


def test_a_good_spec_passes():
    validate_spec(spec(), **LIMITS)
    validate_spec(spec(gpus_per_node=0, cpus_per_gpu=None, mem_per_gpu_gb=None), **LIMITS)


def test_every_bad_field_is_reported_at_once():
    fields = errors_of(spec(name="", nodes=0, time_limit_minutes=0, array="x"))
    assert {"name", "nodes", "time_limit_minutes", "array"} <= set(fields)


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("train\nrm -rf", "a newline"),
        ("a;b", "';'"),
        ("x$(id)", "'$'"),
        ("my job", "a space"),
        ("`id`", "'`'"),
        ("a|b", "'|'"),
    ],
)
def test_a_name_with_a_shell_character_is_refused_naming_it(name, shown):
    [message] = errors_of(spec(name=name))["name"]
    assert shown in message


@pytest.mark.parametrize("name", ["", "x" * 65, ".", ".."])
def test_a_name_empty_too_long_or_only_dots_is_refused(name):
    assert errors_of(spec(name=name))["name"]


def test_account_and_partition_have_the_same_strict_characters():
    fields = errors_of(spec(account="proj\n#SBATCH --qos=high", partition="gpu gpu"))
    assert "a newline" in fields["account"][0]
    assert "a space" in fields["partition"][0]


@pytest.mark.parametrize("nodes", [0, -1, 5, 10**9, True])
def test_nodes_outside_the_partition_are_refused(nodes):
    [message] = errors_of(spec(nodes=nodes))["nodes"]
    assert "1 to 4" in message


@pytest.mark.parametrize("gpus", [-1, 9, 10**9, 10**5000], ids=["-1", "9", "1e9", "1e5000"])
def test_gpus_outside_the_partition_are_refused_gracefully(gpus):
    [message] = errors_of(spec(gpus_per_node=gpus))["gpus_per_node"]
    assert message == "The gpu partition has at most 8 GPUs per node; ask for 0 to 8."


@pytest.mark.parametrize("minutes", [0, -5, 10081, 10**9])
def test_a_time_limit_outside_the_partition_is_refused(minutes):
    [message] = errors_of(spec(time_limit_minutes=minutes))["time_limit_minutes"]
    assert "The gpu partition allows at most 10080 minutes (7 days)" in message


def test_a_partition_without_a_time_limit_still_caps_at_a_year():
    validate_spec(spec(time_limit_minutes=365 * 24 * 60), **{**LIMITS, "max_time_minutes": None})
    fields = errors_of(spec(time_limit_minutes=365 * 24 * 60 + 1), max_time_minutes=None)
    assert "525600 minutes (365 days)" in fields["time_limit_minutes"][0]


@pytest.mark.parametrize(
    ("field", "value"),
    [("cpus_per_gpu", 0), ("cpus_per_gpu", 257), ("mem_per_gpu_gb", 0), ("mem_per_gpu_gb", 2049)],
)
def test_per_gpu_cpus_and_memory_have_bounds(field, value):
    assert errors_of(spec(**{field: value}))[field]


def test_per_gpu_resources_need_a_gpu():
    fields = errors_of(spec(gpus_per_node=0))
    assert "need a GPU" in fields["cpus_per_gpu"][0]
    assert "need a GPU" in fields["mem_per_gpu_gb"][0]


@pytest.mark.parametrize(
    "key",
    ["SLURM_JOB_ID", "SBATCH_ACCOUNT", "SRUN_CPUS_PER_TASK", "LD_PRELOAD", "BASH_ENV", "ENV"],
)
def test_reserved_environment_keys_are_refused(key):
    [message] = errors_of(spec(environment={key: "x"}))["environment"]
    assert key in message


@pytest.mark.parametrize("key", ["1X", "A-B", "A B", "", "X" * 129, "É"])
def test_environment_keys_must_be_names(key):
    assert "not a valid variable name" in errors_of(spec(environment={key: "x"}))["environment"][0]


@pytest.mark.parametrize(
    ("value", "shown"), [("a\nb", "a newline"), ("a\x00b", "'\\x00'"), ("a\tb", "a tab")]
)
def test_environment_values_are_one_printable_line(value, shown):
    [message] = errors_of(spec(environment={"X": value}))["environment"]
    assert message.startswith("X:") and shown in message


def test_environment_values_and_count_are_bounded():
    assert errors_of(spec(environment={"X": "v" * 4097}))["environment"]
    many = {f"V{i}": "x" for i in range(101)}
    assert "at most 100" in errors_of(spec(environment=many))["environment"][0]
    allowed = {"X": "v" * 4096, "LD_LIBRARY_PATH": "/usr/local/cuda", "PATH": "/usr/bin"}
    validate_spec(spec(environment=allowed), **LIMITS)


@pytest.mark.parametrize(
    ("array", "count"),
    [("", 1), ("0-9", 10), ("1,3,5", 3), ("0-15:4", 4), ("0-9%2", 10), ("1,1,2", 2), ("7", 1)],
)
def test_array_task_count(array, count):
    assert array_task_count(array) == count
    validate_spec(spec(array=array), **LIMITS)


@pytest.mark.parametrize(
    "array", ["9-0", "0-9:0", "0-9%0", "a-b", "0-", "1,,2", " 0-9", "0-9\n", "0-10000", "0-٣"]
)
def test_a_bad_array_is_refused(array):
    assert errors_of(spec(array=array))["array"]
    with pytest.raises(JobInvalid):
        array_task_count(array)


def test_array_task_count_is_bounded_without_enumerating():
    validate_spec(spec(array="0-9999"), **LIMITS)
    assert "at most 10000 tasks" in errors_of(spec(array="0-3999999"))["array"][0]


def test_dependencies_must_be_job_ids():
    assert errors_of(spec(after_ok=(0,)))["after_ok"]
    assert errors_of(spec(after_ok=(-3,)))["after_ok"]
    assert errors_of(spec(after_ok=tuple(range(1, 102))))["after_ok"]


@pytest.mark.parametrize(
    ("body", "lines"),
    [
        ("#SBATCH --gres=gpu:8\n", "Line 1:"),
        ("echo hi\n  # sbatch --gres=gpu:8\n", "Line 2:"),
        ("echo\n\n#sBaTcH -p big\necho\n#  SBATCH -A other\n", "Lines 3, 5:"),
        ("echo\r\n\t#SBATCH --qos=high\r\n", "Line 2:"),
    ],
)
def test_sbatch_lines_in_the_body_are_refused_with_their_line_numbers(body, lines):
    [message] = errors_of(spec(script=body))["script"]
    assert message.startswith(lines) and "#SBATCH" in message


def test_a_script_over_the_size_bound_is_refused():
    [message] = errors_of(spec(script="é" * 600), max_script_bytes=1000)["script"]
    assert "1200 bytes" in message and "1000" in message  # counted in UTF-8 bytes
    validate_spec(spec(script="é" * 500), **LIMITS, max_script_bytes=1000)


@pytest.mark.parametrize("body", ["", "  \n\n", "echo a\x00b\n", "echo \ud800\n"])
def test_an_empty_or_binary_script_is_refused(body):
    assert errors_of(spec(script=body))["script"]


def test_a_foreign_shebang_is_refused_and_a_shell_one_accepted():
    assert "Line 1" in errors_of(spec(script="#!/usr/bin/python3\nprint(1)\n"))["script"][0]
    assert errors_of(spec(script="#!/bin/bash -l\necho\n"))["script"]
    for shebang in ("#!/bin/bash", "#!/bin/sh", "#!/usr/bin/env bash", "#! /usr/bin/bash"):
        validate_spec(spec(script=f"{shebang}\necho hi\n"), **LIMITS)


def test_decode_script_reports_the_offset_of_invalid_utf8():
    with pytest.raises(JobInvalid) as caught:
        decode_script(b"echo ok\necho \xff\xfe\n")
    assert "offset 13" in caught.value.fields["script"][0]
    assert decode_script("\ufeffecho é\n".encode()) == "echo é\n"


def test_render_writes_every_directive_from_the_fields():
    text = render_script(spec(array="0-9%2", after_ok=(101, 102)))
    lines = text.split("\n")
    assert lines[0] == "#!/bin/bash"
    directives = [line for line in lines if line.startswith("#SBATCH")]
    assert directives == [
        "#SBATCH --job-name=train-resnet.v2",
        "#SBATCH --account=proj-vision",
        "#SBATCH --partition=gpu",
        "#SBATCH --nodes=2",
        "#SBATCH --gpus-per-node=4",
        "#SBATCH --cpus-per-gpu=8",
        "#SBATCH --mem-per-gpu=32G",
        "#SBATCH --time=0-01:30:00",
        "#SBATCH --chdir=/home/alice/runs",
        "#SBATCH --output=/home/alice/runs/%x-%j.out",
        "#SBATCH --error=/home/alice/runs/%x-%j.err",
        "#SBATCH --array=0-9%2",
        "#SBATCH --dependency=afterok:101:102",
        "#SBATCH --no-requeue",
        "#SBATCH --export=NONE",
        "#SBATCH --comment=portal:8f14e45fceea167a5a36dedd4bea2543",
    ]
    assert lines[1 : len(directives) + 1] == directives  # sbatch reads only the leading block
    assert text.endswith("python train.py --epochs 10\n")
    assert "set -e" not in text


def test_render_leaves_out_what_was_not_asked_for():
    text = render_script(spec(gpus_per_node=0, cpus_per_gpu=None, mem_per_gpu_gb=None))
    assert "--gpus-per-node" not in text and "--cpus-per-gpu" not in text
    assert "--mem-per-gpu" not in text and "--array" not in text and "--dependency" not in text
    assert "#SBATCH --time=7-00:00:00" in render_script(spec(time_limit_minutes=10080))


def test_render_is_deterministic_whatever_the_environment_order():
    one = spec(environment={"B": "2", "A": "1"})
    other = spec(environment={"A": "1", "B": "2"})
    assert render_script(one) == render_script(other) == render_script(one)
    assert render_script(one).index("export A=") < render_script(one).index("export B=")


def test_export_values_are_single_quoted_so_bash_keeps_them_verbatim():
    value = "it's a $(whoami) `test` with \\ and spaces"
    text = render_script(spec(environment={"MSG": value}, script='printf %s "$MSG"\n'))
    assert "export MSG='it'\\''s a $(whoami) `test` with \\ and spaces'" in text
    run = subprocess.run(["bash", "-c", text], capture_output=True, text=True, check=True)
    assert run.stdout == value


def test_render_drops_a_shell_shebang_and_windows_line_endings():
    text = render_script(spec(script="#!/usr/bin/env bash\r\necho one\r\necho two"))
    assert text.count("#!") == 1 and "\r" not in text
    assert text.endswith("\necho one\necho two\n")


def test_render_refuses_an_unvalidated_directive_value():
    with pytest.raises(ValueError, match="not validated"):
        render_script(spec(partition="gpu\n#SBATCH --qos=high"))


def cost(
    nodes: int, gpus: int, minutes: int, tasks: int, weight: str, cpus: int = 0, rate: str = "0"
) -> int:
    return requested_price(
        nodes=nodes,
        gpus_per_node=gpus,
        cpus=cpus,
        time_limit_minutes=minutes,
        array_tasks=tasks,
        billing_weight=Decimal(weight),
        cpu_hour_rate=Decimal(rate),
    ).total


def test_cost_multiplies_every_factor_and_rounds_up():
    assert cost(2, 4, 90, 10, "1.5") == 2 * 4 * 90 * 60 * 10 * 3 // 2
    assert cost(1, 1, 1, 1, "0.001") == 1  # 0.06 GPU-seconds still costs one
    assert cost(1, 1, 1, 1, "0.01") == 1  # 0.6
    assert cost(1, 0, 60, 3, "2") == 0


def test_cpus_are_charged_at_the_rate_beside_the_gpus():
    # One GPU and 4 CPUs for an hour at 0.01: 3600 + 4 * 3600 * 0.01 GPU-seconds.
    assert cost(1, 1, 60, 1, "1", cpus=4, rate="0.01") == 3600 + 144
    # A CPU-only job is not free: 16 CPUs for a week, 10 tasks.
    week = 7 * 24 * 60
    assert cost(1, 0, week, 10, "1", cpus=16, rate="0.01") == 16 * week * 60 * 10 // 100
    # One rounding, of the sum: 30 + 0.006 GPU-seconds.
    assert cost(1, 1, 1, 1, "0.5", cpus=1, rate="0.0001") == 31
    assert cost(1, 0, 1, 1, "1", cpus=1, rate="0.0001") == 1  # 0.006 still costs one


def test_a_jobs_cpus_are_cpus_per_gpu_for_each_gpu_else_one_per_node():
    assert cpus_per_task(nodes=2, gpus_per_node=4, cpus_per_gpu=8) == 64
    assert cpus_per_task(nodes=2, gpus_per_node=4, cpus_per_gpu=None) == 2
    assert cpus_per_task(nodes=3, gpus_per_node=0, cpus_per_gpu=None) == 3


def test_cost_uses_the_array_task_count():
    assert cost(1, 2, 10, array_task_count("0-15:4"), "1") == 4 * 2 * 10 * 60
    assert cost(1, 2, 10, array_task_count(""), "1") == 2 * 10 * 60


def charge(gpus: int, seconds: int, weight: str, cpus: int = 0, rate: str = "0") -> int:
    return charge_gpu_seconds(
        allocated_gpus=gpus,
        allocated_cpus=cpus,
        elapsed_s=seconds,
        billing_weight=Decimal(weight),
        cpu_hour_rate=Decimal(rate),
    )


def test_charge_is_allocated_gpus_times_elapsed_times_weight_rounded_up():
    assert charge(8, 3601, "1.5") == 43212
    assert charge(3, 7, "0.3") == 7  # 6.3
    assert charge(0, 100, "1") == 0
    with pytest.raises(ValueError):
        charge(1, 1, "-1")


def test_charge_adds_the_allocated_cpus_at_the_rate():
    assert charge(1, 3600, "1", cpus=16, rate="0.01") == 3600 + 576
    assert charge(0, 3600, "1", cpus=2, rate="0.01") == 72  # a CPU-only job pays
    with pytest.raises(ValueError):
        charge(0, 1, "1", cpus=1, rate="-0.01")
