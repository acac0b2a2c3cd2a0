"""Properties of the template filters a page cannot render without, for every input
(Hypothesis): ``when`` (relative times), ``percent`` (bar widths) and ``price``
(billing weights and CPU-hour rates). Each ``@example`` is an input that once broke a
property, kept as a regression case."""

import datetime as dt
import re
from decimal import Decimal

from django.utils import timezone, translation
from hypothesis import example, given, settings
from hypothesis import strategies as st

from portal.templatetags.portal import percent, price, when

FAST = settings(max_examples=200, deadline=None)

# What Python's dates hold, in UTC (as the database and the parsers give them).
moments = st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31)).map(
    lambda t: t.replace(tzinfo=dt.UTC)
)
zones = st.sampled_from(["UTC", "Asia/Tokyo", "America/Los_Angeles", "Pacific/Kiritimati"])
languages = st.sampled_from(["en", "ja"])


@FAST
@given(value=moments, zone=zones, language=languages)
# Within hours of the last and first dates: no local date held them (an OverflowError).
@example(value=dt.datetime(9999, 12, 31, 23, tzinfo=dt.UTC), zone="Asia/Tokyo", language="en")
@example(value=dt.datetime(1, 1, 1, tzinfo=dt.UTC), zone="America/Los_Angeles", language="en")
def test_any_moment_is_shown_with_its_exact_time_for_machines(value, zone, language):
    with timezone.override(zone), translation.override(language):
        html = when(value)
    machine = re.fullmatch(r'<time datetime="([^"]+)" title="[^"]+">[^<]+</time>', html)
    assert machine, html
    assert dt.datetime.fromisoformat(machine[1]) == value


def test_no_moment_is_a_dash():
    assert when(None) == "—"


# GPU-seconds as balances hold them: bigint, overdrawn or over the top.
seconds = st.integers(-(2**63), 2**63 - 1)
amounts = seconds | st.floats(-(10**15), 10**15, allow_nan=False)


@FAST
@given(part=amounts, whole=amounts)
@example(part=1, whole=0)
@example(part=-5, whole=10)  # a negative adjustment larger than the use
@example(part=10**10, whole=3600)  # over the top
def test_a_share_is_a_bar_width_from_0_to_100(part, whole):
    share = percent(part, whole)
    assert 0 <= share <= 100
    if whole <= 0:
        assert share == 0


@FAST
@given(smaller=seconds, larger=seconds, whole=st.integers(1, 2**63 - 1))
def test_a_larger_part_is_never_a_narrower_bar(smaller, larger, whole):
    smaller, larger = sorted((smaller, larger))
    assert percent(smaller, whole) <= percent(larger, whole)


# Billing weights and CPU-hour rates as partitions store them (three and four decimals,
# positive), and any other decimal a template might be given.
weights = st.integers(1, 999_999).map(lambda n: Decimal(n) / 1000)
rates = st.integers(1, 9_999_999).map(lambda n: Decimal(n) / 10_000)
decimals = st.decimals(
    min_value=-(10**12), max_value=10**12, places=6, allow_nan=False, allow_infinity=False
)


@FAST
@given(value=weights | rates | decimals, language=languages)
@example(value=Decimal("0.0100"), language="en")  # reads as typed: 0.01
@example(value=Decimal("1000.0000"), language="ja")
def test_a_price_reads_back_as_its_value(value, language):
    with translation.override(language):
        shown = price(value)
    assert Decimal(shown.replace(",", "")) == value
    assert shown.startswith("-") == (value < 0) or value == 0
    assert not re.search(r"\.\d*0$", shown)  # no trailing zeros after the point


@FAST
@given(value=st.floats(-(10**9), 10**9, allow_nan=False))
def test_a_price_given_a_float_renders(value):
    assert price(value)
    assert price(None) == "—"
