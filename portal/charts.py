"""The dashboard's burn-down: GPU-hours left per day, and a forecast at the recent rate.

Drawn as server-side SVG geometry (no JavaScript, no CDN); the template shows
the same numbers in words for screen readers.
"""

import datetime as dt
from dataclasses import dataclass

WIDTH, HEIGHT = 480, 160
LEFT, RIGHT, TOP, BOTTOM = 8, 472, 10, 140
RATE_WINDOW_DAYS = 14


@dataclass(frozen=True)
class BurnDown:
    remaining_points: str  # SVG polyline points of the past
    forecast_points: str  # from today to the forecast's end, dashed
    today_x: float
    granted_gpu_hours: float
    available_gpu_hours: float
    rate_gpu_hours_per_day: float
    runs_out_on: dt.date | None  # None: no recent use, or it lasts past the period
    ends_on: dt.date


def burn_down(
    *,
    granted_gpu_seconds: int,
    available_gpu_seconds: int,
    daily_used_gpu_seconds: dict[dt.date, int],
    starts_on: dt.date,
    ends_on: dt.date,
    today: dt.date,
) -> BurnDown:
    """Remaining hours from the period's start to today, then the forecast to its end."""
    span_days = max((ends_on - starts_on).days, 1)
    ceiling = max(granted_gpu_seconds, available_gpu_seconds, 1)

    def x(day: dt.date) -> float:
        return round(
            LEFT + (RIGHT - LEFT) * min(max((day - starts_on).days, 0), span_days) / span_days, 1
        )

    def y(seconds: float) -> float:
        return round(BOTTOM - (BOTTOM - TOP) * max(seconds, 0) / ceiling, 1)

    # Walk back from today's balance: what was left each day is today's plus what was spent since.
    days = [
        starts_on + dt.timedelta(days=n) for n in range((min(today, ends_on) - starts_on).days + 1)
    ]
    remaining = available_gpu_seconds
    past = []
    for day in reversed(days):
        past.append((x(day), y(remaining)))
        remaining += daily_used_gpu_seconds.get(day, 0)
    past.reverse()
    window_start = today - dt.timedelta(days=RATE_WINDOW_DAYS - 1)
    recent = sum(s for day, s in daily_used_gpu_seconds.items() if window_start <= day <= today)
    rate = recent / RATE_WINDOW_DAYS  # GPU-seconds a day
    runs_out_on = None
    forecast = [(x(today), y(available_gpu_seconds))]
    days_to_end = (ends_on - today).days
    if days_to_end <= 0:
        # The period is over (its expiry not yet swept): nothing left to forecast. A
        # forecast "to" an end in the past would draw the balance rising, once.
        pass
    elif rate > 0 and available_gpu_seconds > 0:
        days_left = available_gpu_seconds / rate
        # Compared as a number of days first: at a tiny rate the run-out day lies past the
        # year 9999, which no date can hold (a 500 on the dashboard, once).
        if days_left < days_to_end:
            runs_out_on = today + dt.timedelta(days=int(days_left))
            forecast.append((x(runs_out_on), y(0)))
        else:
            forecast.append((x(ends_on), y(available_gpu_seconds - rate * days_to_end)))
    elif available_gpu_seconds > 0:
        forecast.append((x(ends_on), y(available_gpu_seconds)))
    return BurnDown(
        remaining_points=" ".join(f"{px},{py}" for px, py in past),
        forecast_points=" ".join(f"{px},{py}" for px, py in forecast),
        today_x=x(today),
        granted_gpu_hours=granted_gpu_seconds / 3600,
        available_gpu_hours=available_gpu_seconds / 3600,
        rate_gpu_hours_per_day=rate / 3600,
        runs_out_on=runs_out_on,
        ends_on=ends_on,
    )
