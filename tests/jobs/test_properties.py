"""Properties of the pure code the books and the composer depend on, for every input
(Hypothesis): pricing, array specs, job-spec validation and rendering, and the time
limits written for Slurm and shown to people. Each ``@example`` is an input that once
broke a property, kept as a regression case."""

import math
from decimal import Decimal

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from client.jobs import _duration as client_duration
from client.jobspec import JobSpecError, parse_minutes
from clusters.slurm.parsing import parse_time_minutes
from jobs.errors import JobInvalid
from jobs.pricing import charge_gpu_seconds, requested_price
from jobs.scripts import _slurm_time, render_script
from jobs.specs import (
    MAX_ARRAY_INDEX,
    MAX_ARRAY_TASKS,
    MAX_TIME_MINUTES,
    JobSpec,
    _duration,
    array_indices,
    array_task_count,
    validate_spec,
)
from portal.templatetags.portal import gpu_hours, minutes

FAST = settings(max_examples=150, deadline=None)

# Billing weights as the partition stores them: up to 999.999, three decimals.
weights = st.integers(0, 999_999).map(lambda n: Decimal(n) / 1000)
counts = st.integers(0, 10_000)
# CPU-hour rates as the partition stores them: up to 999.9999, four decimals.
rates = st.integers(0, 9_999_999).map(lambda n: Decimal(n) / 10_000)


# --- pricing ----------------------------------------------------------------------------


@FAST
@given(
    nodes=counts, gpus=st.integers(0, 64), cpus=st.integers(0, 4096),
    time_limit=st.integers(0, MAX_TIME_MINUTES), tasks=st.integers(1, MAX_ARRAY_TASKS),
    weight=weights, rate=rates,
)  # fmt: skip
def test_a_job_costs_its_gpu_and_cpu_seconds_at_their_prices_rounded_up(
    nodes, gpus, cpus, time_limit, tasks, weight, rate
):
    def price(array_tasks: int) -> int:
        return requested_price(
            nodes=nodes, gpus_per_node=gpus, cpus=cpus, time_limit_minutes=time_limit,
            array_tasks=array_tasks, billing_weight=weight, cpu_hour_rate=rate,
        ).total  # fmt: skip

    cost = price(tasks)
    seconds = time_limit * 60 * tasks
    exact = Decimal(nodes * gpus * seconds) * weight + Decimal(cpus * seconds) * rate
    assert isinstance(cost, int)
    assert cost == math.ceil(exact)
    assert 0 <= cost - exact < 1
    # An array costs its tasks together what each costs alone, up to the one rounding.
    one = price(1)
    assert tasks * one - tasks < cost <= tasks * one


@FAST
@given(
    nodes=st.integers(1, 64), gpus=st.integers(0, 8), cpus=st.integers(0, 512),
    time_limit=st.integers(1, MAX_TIME_MINUTES), elapsed_share=st.fractions(0, 1),
    weight=weights, rate=rates,
)  # fmt: skip
def test_a_job_is_never_charged_more_than_it_held(
    nodes, gpus, cpus, time_limit, elapsed_share, weight, rate
):
    held = requested_price(
        nodes=nodes, gpus_per_node=gpus, cpus=cpus, time_limit_minutes=time_limit,
        array_tasks=1, billing_weight=weight, cpu_hour_rate=rate,
    ).total  # fmt: skip

    def charged(elapsed_s: int) -> int:
        return charge_gpu_seconds(
            allocated_gpus=nodes * gpus, allocated_cpus=cpus, elapsed_s=elapsed_s,
            billing_weight=weight, cpu_hour_rate=rate,
        )  # fmt: skip

    assert 0 <= charged(int(time_limit * 60 * elapsed_share)) <= held
    assert charged(time_limit * 60) == held  # ran to its limit: charged exactly what it held


@FAST
@given(gpu_seconds=st.integers(-(10**12), -1), weight=weights, rate=rates)
def test_negative_seconds_are_refused(gpu_seconds, weight, rate):
    with pytest.raises(ValueError):
        charge_gpu_seconds(
            allocated_gpus=gpu_seconds, allocated_cpus=0, elapsed_s=1,
            billing_weight=weight, cpu_hour_rate=rate,
        )  # fmt: skip


# --- array specs ------------------------------------------------------------------------

array_text = st.one_of(
    st.text(max_size=30),
    st.lists(
        st.sampled_from(["0", "1", "7", "9999", "4000000", "4000001", "-", ",", ":", "%", " "]),
        max_size=12,
    ).map("".join),
)


@FAST
@given(text=array_text)
@example(text="0-4000000")  # too many tasks: refused without building the set
@example(text="%0")
@example(text="")
def test_any_array_text_is_a_task_count_or_a_clear_error(text):
    try:
        count = array_task_count(text)
    except JobInvalid as error:
        assert list(error.fields) == ["array"]
        assert all(message for message in error.fields["array"])
        return
    assert 1 <= count <= MAX_ARRAY_TASKS
    if text:
        assert count == len(array_indices(text))


@st.composite
def array_specs(draw):
    """A valid spec and the task indices it means."""
    items, indices = [], set()
    for _ in range(draw(st.integers(1, 5))):
        first = draw(st.integers(0, MAX_ARRAY_INDEX - 1000))
        last = first + draw(st.integers(0, 999))
        step = draw(st.integers(1, 50))
        items.append(f"{first}-{last}:{step}" if step > 1 else f"{first}-{last}")
        indices |= set(range(first, last + 1, step))
    limit = draw(st.one_of(st.none(), st.integers(1, 100)))
    spec = ",".join(items) + (f"%{limit}" if limit else "")
    return spec, indices


@FAST
@given(spec_and_indices=array_specs())
def test_an_array_spec_means_its_tasks(spec_and_indices):
    spec, indices = spec_and_indices
    assert array_indices(spec) == indices
    assert array_task_count(spec) == len(indices)


@FAST
@given(indices=st.sets(st.integers(0, MAX_ARRAY_INDEX), min_size=1, max_size=50))
def test_a_list_of_indices_reads_back(indices):
    assert array_indices(",".join(map(str, sorted(indices)))) == indices


# --- job specs: validated, then always renderable -------------------------------------

any_int = st.one_of(st.integers(-5, 300), st.integers(-(2**70), 2**70), st.booleans())
any_text = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["job", "gpu", "alpha", "/home/alice", "/home/alice/out-%j.log", ""]),
)
environment = st.dictionaries(
    st.one_of(st.from_regex(r"[A-Z_][A-Z0-9_]{0,10}", fullmatch=True), st.text(max_size=10)),
    st.text(max_size=20),
    max_size=4,
)
script = st.one_of(
    st.text(max_size=200),
    st.sampled_from(["echo hi\n", "#!/bin/bash\nset -e\npython train.py\n", "#SBATCH -N 2\n"]),
)


@st.composite
def job_specs(draw):
    return JobSpec(
        name=draw(any_text),
        account=draw(st.sampled_from(["alpha", "", "a b", "x" * 70])),
        partition=draw(st.sampled_from(["gpu", "debug", "", "../x"])),
        nodes=draw(any_int),
        gpus_per_node=draw(any_int),
        cpus_per_gpu=draw(st.one_of(st.none(), any_int)),
        mem_per_gpu_gb=draw(st.one_of(st.none(), any_int)),
        time_limit_minutes=draw(any_int),
        working_directory=draw(any_text),
        output_path=draw(any_text),
        error_path=draw(any_text),
        environment=draw(environment),
        array=draw(array_text),
        after_ok=tuple(draw(st.lists(any_int, max_size=3))),
        script=draw(script),
        submit_token=draw(st.sampled_from(["abc-123", "", "a b", "x" * 65])),
    )


@FAST
@given(spec=job_specs())
def test_a_spec_is_refused_field_by_field_or_renders(spec):
    try:
        validate_spec(spec, max_time_minutes=60, max_gpus_per_node=8, max_nodes=4)
    except JobInvalid as error:
        assert error.fields
        assert all(messages and all(messages) for messages in error.fields.values())
        return
    script = render_script(spec)  # never its ValueError for an unvalidated value
    lines = script.split("\n")
    assert lines[0] == "#!/bin/bash"
    header = [n for n, line in enumerate(lines) if line.startswith("#SBATCH")]
    assert header == list(range(1, len(header) + 1))  # every directive is in the header
    assert script.endswith("\n") and "\r" not in script


# --- times ------------------------------------------------------------------------------


@FAST
@given(time_limit=st.integers(0, MAX_TIME_MINUTES))
def test_the_time_slurm_is_given_reads_back_as_the_minutes_asked(time_limit):
    assert parse_time_minutes(_slurm_time(time_limit)) == time_limit


@FAST
@given(time_limit=st.integers(0, 10**7))
def test_the_clients_hours_and_minutes_read_back(time_limit):
    assert parse_minutes(client_duration(time_limit)) == time_limit


@FAST
@given(text=st.text(max_size=20))
@example(text="1:60")
@example(text="²")
def test_the_client_reads_any_time_text_or_says_it_cannot(text):
    try:
        read = parse_minutes(text)
    except JobSpecError:
        return
    assert read >= 0


@FAST
@given(value=st.integers(0, 10**8))
def test_a_shown_time_limit_adds_up_to_the_minutes(value):
    units = {"d": 24 * 60, "h": 60, "min": 1}
    words = minutes(value).split()
    pairs = zip(words[::2], words[1::2], strict=True)
    assert sum(int(number) * units[unit] for number, unit in pairs) == value


@FAST
@given(hours=st.floats(-(10**12), 10**12, allow_nan=False))
@example(hours=-0.001)  # a small negative adjustment
@example(hours=0.001)
def test_gpu_hours_are_shown_with_their_unit_and_sign(hours):
    text = gpu_hours(hours)
    assert text.endswith(" GPU-h")
    number = text.removeprefix("< ").removeprefix("> ").removesuffix(" GPU-h")
    assert number.startswith("-") == (hours < 0)  # a balance overdrawn never reads as left
    assert number.strip("-") not in ("0", "0.00") or hours == 0


@FAST
@given(value=st.integers(0, 10**8))
def test_a_duration_in_words_adds_up_to_the_minutes(value):
    units = {"day": 24 * 60, "days": 24 * 60, "hour": 60, "hours": 60, "minute": 1, "minutes": 1}
    words = _duration(value).split()
    pairs = list(zip(words[::2], words[1::2], strict=True))
    assert sum(int(number) * units[unit] for number, unit in pairs) == value
    assert all((int(number) == 1) == (unit in ("day", "hour", "minute")) for number, unit in pairs)
