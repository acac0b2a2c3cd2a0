"""The burn-down renders for any usage: tiny, zero, huge, and balances above the grant or
below zero. Found from outside: one tiny charge put the run-out day past the year 9999
and the dashboard answered 500."""

import datetime as dt
import itertools

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from portal.charts import BOTTOM, LEFT, RIGHT, burn_down

TODAY = dt.date(2026, 12, 3)


def test_a_tiny_rate_says_the_allocation_lasts_rather_than_failing():
    chart = burn_down(
        granted_gpu_seconds=1000 * 3600,
        available_gpu_seconds=1000 * 3600 - 4,
        daily_used_gpu_seconds={TODAY: 4},  # 0.001 GPU-h today, nothing else
        starts_on=TODAY - dt.timedelta(days=1),
        ends_on=TODAY + dt.timedelta(days=30),
        today=TODAY,
    )
    assert chart.runs_out_on is None
    assert chart.rate_gpu_hours_per_day > 0


def test_a_fast_rate_runs_out_before_the_end():
    chart = burn_down(
        granted_gpu_seconds=100 * 3600,
        available_gpu_seconds=10 * 3600,
        daily_used_gpu_seconds={TODAY - dt.timedelta(days=n): 3 * 3600 for n in range(14)},
        starts_on=TODAY - dt.timedelta(days=20),
        ends_on=TODAY + dt.timedelta(days=30),
        today=TODAY,
    )
    assert chart.runs_out_on == TODAY + dt.timedelta(days=3)


def coordinates(points: str) -> list[tuple[float, float]]:
    return [tuple(map(float, point.split(","))) for point in points.split()]  # type: ignore[misc]


seconds = st.integers(min_value=-(10**12), max_value=10**12)
# Tiny uses (a few GPU-seconds) are what broke the dashboard: drawn as often as any.
used = st.one_of(st.integers(min_value=1, max_value=5), seconds)


@settings(max_examples=300, deadline=None)
@given(
    granted=st.integers(min_value=0, max_value=10**12),
    # Large balances too: with a tiny rate they are what lasts past any date.
    available=st.one_of(seconds, st.integers(min_value=10**8, max_value=10**12)),
    usage=st.dictionaries(st.integers(min_value=-400, max_value=400), seconds, max_size=30),
    start_offset=st.integers(min_value=-3000, max_value=3000),
    length=st.integers(min_value=0, max_value=3000),
)
def test_any_usage_renders_within_the_chart(granted, available, usage, start_offset, length):
    starts_on = TODAY + dt.timedelta(days=start_offset)
    ends_on = starts_on + dt.timedelta(days=length)
    chart = burn_down(
        granted_gpu_seconds=granted,
        available_gpu_seconds=available,
        daily_used_gpu_seconds={TODAY + dt.timedelta(days=d): s for d, s in usage.items()},
        starts_on=starts_on,
        ends_on=ends_on,
        today=TODAY,
    )
    assert chart.runs_out_on is None or TODAY <= chart.runs_out_on < ends_on
    for x, y in coordinates(chart.remaining_points) + coordinates(chart.forecast_points):
        assert LEFT <= x <= RIGHT
        assert y <= BOTTOM  # nothing below the axis; above the top only past the grant
    assert LEFT <= chart.today_x <= RIGHT


@settings(max_examples=200, deadline=None)
@given(
    granted=st.integers(min_value=0, max_value=10**12),
    available=st.one_of(seconds, st.integers(min_value=1, max_value=10**8)),
    usage=st.dictionaries(st.integers(min_value=-40, max_value=40), used, max_size=30),
    start_offset=st.integers(min_value=-400, max_value=400),
    length=st.integers(min_value=0, max_value=400),
)
@example(  # an allocation past its end that the expiry sweep has not reached yet
    granted=3600, available=1800, usage={0: 5}, start_offset=-30, length=29
)
@example(granted=3600, available=1800, usage={0: 5}, start_offset=-1, length=0)  # one day
def test_the_forecast_follows_the_recent_rate_and_never_rises(
    granted, available, usage, start_offset, length
):
    starts_on = TODAY + dt.timedelta(days=start_offset)
    ends_on = starts_on + dt.timedelta(days=length)
    daily = {TODAY + dt.timedelta(days=d): s for d, s in usage.items()}
    chart = burn_down(
        granted_gpu_seconds=granted,
        available_gpu_seconds=available,
        daily_used_gpu_seconds=daily,
        starts_on=starts_on,
        ends_on=ends_on,
        today=TODAY,
    )
    window = [s for day, s in daily.items() if TODAY - dt.timedelta(days=13) <= day <= TODAY]
    assert chart.rate_gpu_hours_per_day * 3600 * 14 == pytest.approx(sum(window))
    assert chart.available_gpu_hours * 3600 == pytest.approx(available)
    forecast = coordinates(chart.forecast_points)
    assert forecast[0] == (chart.today_x, forecast[0][1])
    # Left to right, and down (y grows downwards): spending never gives hours back.
    for (x1, y1), (x2, y2) in itertools.pairwise(forecast):
        assert x1 <= x2
        assert y1 <= y2
    past_days = (min(TODAY, ends_on) - starts_on).days + 1
    assert len(coordinates(chart.remaining_points)) == max(past_days, 0)
