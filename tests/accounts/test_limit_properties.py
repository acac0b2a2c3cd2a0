"""Properties of the limits the reconciler writes into Slurm (GrpTRESMins), for every
input (Hypothesis): each covers what the portal still covers at the cheapest price,
rounded up by less than a minute, never below Slurm's own use, and grows with the
balance. Each ``@example`` is an input that once broke a property."""

from decimal import Decimal

from hypothesis import example, given, settings
from hypothesis import strategies as st

from accounts.reconcile import cpu_minutes_limit_for, gpu_minutes_limit_for

FAST = settings(max_examples=300, deadline=None)

# As partitions store them: billing weights 0.001-999.999, CPU-hour rates 0.0001-999.9999.
weights = st.integers(1, 999_999).map(lambda n: Decimal(n) / 1000)
rates = st.integers(1, 9_999_999).map(lambda n: Decimal(n) / 10_000)
# Minutes Slurm counted, and GPU-seconds the portal covers: overdrawn (negative) too.
used = st.integers(0, 2**40)
covered = st.integers(-(2**50), 2**50)


def gpu_limit(used_minutes: int, covered_seconds: int, weight: Decimal) -> int:
    return gpu_minutes_limit_for(
        raw_used_minutes=used_minutes, covered_gpu_seconds=covered_seconds, billing_weight=weight
    )


def cpu_limit(used_minutes: int, covered_seconds: int, rate: Decimal) -> int:
    return cpu_minutes_limit_for(
        raw_used_minutes=used_minutes, covered_gpu_seconds=covered_seconds, cpu_hour_rate=rate
    )


@FAST
@given(used_minutes=used, covered_seconds=covered, price=weights)
@example(used_minutes=0, covered_seconds=2_166_423, price=Decimal("0.071"))  # a minute too many
@example(used_minutes=0, covered_seconds=281_474_976_710_654, price=Decimal("0.001"))  # too few
def test_the_gpu_limit_covers_the_balance_rounded_up_by_less_than_a_minute(
    used_minutes, covered_seconds, price
):
    limit = gpu_limit(used_minutes, covered_seconds, price)
    assert isinstance(limit, int) and limit >= used_minutes >= 0
    room = limit - used_minutes  # raw GPU-minutes left, each charged 60 * price GPU-seconds
    assert room * 60 * price >= max(covered_seconds, 0)  # never blocks a job the portal took
    assert room == 0 or (room - 1) * 60 * price < covered_seconds


@FAST
@given(used_minutes=used, covered_seconds=covered, price=rates)
def test_the_cpu_limit_covers_the_balance_rounded_up_by_less_than_a_minute(
    used_minutes, covered_seconds, price
):
    limit = cpu_limit(used_minutes, covered_seconds, price)
    assert isinstance(limit, int) and limit >= used_minutes >= 0
    room = limit - used_minutes
    assert room * 60 * price >= max(covered_seconds, 0)
    assert room == 0 or (room - 1) * 60 * price < covered_seconds


@FAST
@given(
    used_minutes=used,
    covered_seconds=st.tuples(covered, covered).map(sorted),
    prices=st.tuples(weights, weights).map(sorted),
    rates_=st.tuples(rates, rates).map(sorted),
)
def test_a_larger_balance_or_a_lower_price_never_lowers_a_limit(
    used_minutes, covered_seconds, prices, rates_
):
    less, more = covered_seconds
    cheap, dear = prices
    for limit, low, high in ((gpu_limit, cheap, dear), (cpu_limit, *rates_)):
        assert limit(used_minutes, less, low) <= limit(used_minutes, more, low)
        assert limit(used_minutes, more, high) <= limit(used_minutes, more, low)
