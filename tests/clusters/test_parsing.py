"""Parsers of Slurm's command-line output (pure logic, recorded output)."""

import pytest

from clusters.slurm.parsing import parse_gpu_gres, parse_sinfo_partitions, parse_time_minutes
from clusters.slurm.types import PartitionInfo


@pytest.mark.parametrize(
    ("text", "minutes"),
    [
        ("7-00:00:00", 7 * 24 * 60),
        ("1-12", 36 * 60),
        ("1:00:00", 60),
        ("30:00", 30),
        ("45", 45),
        ("0:01:30", 2),
        ("infinite", None),
        ("UNLIMITED", None),
    ],
)
def test_it_reads_slurm_times(text, minutes):
    assert parse_time_minutes(text) == minutes


def test_it_refuses_what_is_not_a_time():
    with pytest.raises(ValueError):
        parse_time_minutes("1:2:3:4")


@pytest.mark.parametrize(
    ("gres", "expected"),
    [
        ("gpu:h200:8", ("h200", 8)),
        ("gpu:h200:8(S:0-1)", ("h200", 8)),
        ("gpu:4", ("", 4)),
        ("gpu:a100:2,gpu:a100:2,shard:8", ("a100", 4)),
        ("(null)", ("", 0)),
        ("shard:8", ("", 0)),
    ],
)
def test_it_reads_gpu_gres(gres, expected):
    assert parse_gpu_gres(gres) == expected


def test_it_merges_a_partition_spread_over_node_groups():
    text = (
        "gpu*|up|7-00:00:00|2|gpu:h200:8\n"
        "gpu*|up|7-00:00:00|1|gpu:h100:4(S:0)\n"
        "cpu|down|1:00:00|3|(null)\n"
    )
    assert parse_sinfo_partitions(text) == [
        PartitionInfo("gpu", True, True, 10080, 3, 8, "h200", 20),
        PartitionInfo("cpu", False, False, 60, 3, 0, "", 0),
    ]
