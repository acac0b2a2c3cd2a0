"""Human output: aligned columns, GPU-hours with two decimals, times in local time."""

import datetime as dt

from client.formatting import hours, pairs, table, when


def test_a_table_lines_up_its_columns_and_right_aligns_numbers():
    shown = table(
        ["ID", "NAME", "GPU-h"], [(7, "train", "1.50"), (1234, "a", "12.00")], right=(0, 2)
    )
    assert shown.splitlines() == [
        "  ID  NAME   GPU-h",
        "   7  train   1.50",
        "1234  a      12.00",
    ]


def test_an_empty_cell_is_a_dash_and_lines_have_no_trailing_spaces():
    shown = table(["A", "B"], [("x", None), ("", "y")])
    assert shown.splitlines() == ["A  B", "x  -", "-  y"]


def test_gpu_hours_have_two_decimals():
    assert hours(1234.5) == "1,234.50"
    assert hours(0.004) == "0.00"
    assert hours(2) == "2.00"
    assert hours(None) == "-"


def test_times_are_shown_in_the_local_zone_to_the_second():
    tokyo = dt.timezone(dt.timedelta(hours=9))
    assert when("2026-01-02T03:04:05.678Z", tz=dt.UTC) == "2026-01-02 03:04:05"
    assert when("2026-01-02T03:04:05+00:00", tz=tokyo) == "2026-01-02 12:04:05"
    assert when(None) == "-"


def test_pairs_line_up_their_values():
    assert pairs([("cost", "1.00"), ("expected start", None)]).splitlines() == [
        "cost            1.00",
        "expected start  -",
    ]
