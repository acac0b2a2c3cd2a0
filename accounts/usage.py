"""The usage page's pieces: the stacked SVG chart of GPU-hours per month and user,
and the CSV exports (charges, and GPU-hours per month and user), streamed."""

import csv
import datetime as dt
import math
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from django.db.models import QuerySet
from django.http import StreamingHttpResponse
from django.utils import timezone

from accounts.models import LedgerEntry
from accounts.selectors import MonthlyUsage

NO_USER = "(no portal user)"  # charges of work outside the portal, or of a deleted user
NO_PARTITION = "(unknown partition)"
# Okabe-Ito: told apart by colour-blind readers too; the eighth colour is "others".
SERIES_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442")
OTHERS_COLOUR = "#8C8C8C"


@dataclass(frozen=True)
class Series:
    name: str
    colour: str


@dataclass(frozen=True)
class MonthRow:
    month: str  # "2026-11"
    gpu_hours: list[float]  # one per series
    total: float


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    colour: str
    title: str


@dataclass(frozen=True)
class Tick:
    at: float
    label: str


# The chart's frame in SVG user units; it scales to the page's width.
CHART_WIDTH, CHART_HEIGHT = 720, 300
PLOT_LEFT, PLOT_RIGHT, PLOT_TOP, PLOT_BOTTOM = 64, 712, 12, 256


@dataclass(frozen=True)
class UsageChart:
    """GPU-hours per month stacked by user: the numbers, and the SVG drawn from them."""

    series: list[Series]
    rows: list[MonthRow]
    totals: list[float]  # one per series
    bars: list[Bar]
    y_ticks: list[Tick]
    x_labels: list[Tick]
    width: int = CHART_WIDTH
    height: int = CHART_HEIGHT
    left: int = PLOT_LEFT
    right: int = PLOT_RIGHT
    top: int = PLOT_TOP
    bottom: int = PLOT_BOTTOM

    @property
    def total(self) -> float:
        return sum(self.totals)

    @property
    def first_month(self) -> str:
        return self.rows[0].month if self.rows else ""

    @property
    def last_month(self) -> str:
        return self.rows[-1].month if self.rows else ""


def _month_label(month: dt.date) -> str:
    return f"{month:%Y-%m}"


def _months_from(first: dt.date, last: dt.date) -> list[dt.date]:
    months, month = [], first
    while month <= last:
        months.append(month)
        month = (month.replace(day=28) + dt.timedelta(days=4)).replace(day=1)
    return months


def _nice_ceiling(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 times a power of ten at or above the value."""
    if value <= 0:
        return 1.0
    magnitude = 10.0 ** math.floor(math.log10(value))
    return next(step * magnitude for step in (1, 2, 2.5, 5, 10) if step * magnitude >= value)


def _stack(usage: list[MonthlyUsage], max_series: int) -> tuple[list[Series], list[MonthRow]]:
    """Each month's GPU-hours by user, the largest users first and the rest as "others",
    with every month between the first and the last so that gaps show."""
    per_user: dict[str, float] = defaultdict(float)
    for cell in usage:
        per_user[cell.username or NO_USER] += cell.gpu_hours
    ranked = sorted(per_user, key=lambda name: (-per_user[name], name))
    shown = ranked if len(ranked) <= max_series else ranked[: max_series - 1]
    series = [Series(name, colour) for name, colour in zip(shown, SERIES_COLOURS, strict=False)]
    if len(shown) < len(ranked):
        series.append(Series(f"{len(ranked) - len(shown)} others", OTHERS_COLOUR))
    column = {name: index for index, name in enumerate(shown)}
    months = _months_from(usage[0].month, usage[-1].month) if usage else []
    grid = {month: [0.0] * len(series) for month in months}
    for cell in usage:
        grid[cell.month][column.get(cell.username or NO_USER, len(series) - 1)] += cell.gpu_hours
    return series, [MonthRow(_month_label(m), grid[m], sum(grid[m])) for m in months]


def usage_chart(usage: list[MonthlyUsage], *, max_series: int = len(SERIES_COLOURS)) -> UsageChart:
    """The chart of one project's usage (rows in month order, as the selector gives them)."""
    series, rows = _stack(usage, max_series)
    ceiling = _nice_ceiling(max((row.total for row in rows), default=0))
    scale = (PLOT_BOTTOM - PLOT_TOP) / ceiling
    slot = (PLOT_RIGHT - PLOT_LEFT) / max(len(rows), 1)
    bar_width = min(slot * 0.7, 56)
    label_every = math.ceil(len(rows) / 12) or 1
    bars, x_labels = [], []
    for index, row in enumerate(rows):
        x = PLOT_LEFT + index * slot + (slot - bar_width) / 2
        stacked = 0.0
        for one, used in zip(series, row.gpu_hours, strict=True):
            if used <= 0:
                continue
            bars.append(
                Bar(
                    x=round(x, 1),
                    y=round(PLOT_BOTTOM - (stacked + used) * scale, 1),
                    width=round(bar_width, 1),
                    height=round(used * scale, 1),
                    colour=one.colour,
                    title=f"{one.name}, {row.month}: {used:,.2f} GPU-h",
                )
            )
            stacked += used
        if index % label_every == 0:
            x_labels.append(Tick(round(x + bar_width / 2, 1), row.month))
    y_ticks = [
        Tick(round(PLOT_BOTTOM - ceiling * step / 4 * scale, 1), f"{ceiling * step / 4:,g}")
        for step in range(5)
    ]
    return UsageChart(
        series=series,
        rows=rows,
        totals=[sum(row.gpu_hours[i] for row in rows) for i in range(len(series))],
        bars=bars,
        y_ticks=y_ticks,
        x_labels=x_labels,
    )


class _Echo:
    """A file-like object for csv.writer that hands each line back instead of storing it."""

    def write(self, value: str) -> str:
        return value


def _text(value: str | None) -> str:
    # A cell starting with = + - @ is a formula to a spreadsheet: keep it text.
    value = value or ""
    return f"'{value}" if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


def csv_response(
    filename: str, header: list[str], rows: Iterable[list[str]]
) -> StreamingHttpResponse:
    writer = csv.writer(_Echo())

    def lines() -> Iterator[str]:
        yield writer.writerow(header)
        for row in rows:
            yield writer.writerow(row)

    response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


CHARGES_HEADER = [
    "charged_at",
    "user",
    "cluster",
    "partition",
    "reference",
    "gpu_hours",
    "gpu_seconds",
]
MONTHLY_HEADER = ["project", "month", "user", "gpu_hours", "gpu_seconds"]


def charge_rows(charges: QuerySet[LedgerEntry]) -> Iterator[list[str]]:
    # iterator(): a server-side cursor, so a project with a million charges streams.
    for entry in charges.iterator(chunk_size=2000):
        used = -entry.gpu_seconds
        yield [
            timezone.localtime(entry.created_at).isoformat(timespec="seconds"),
            _text(entry.user.username if entry.user else ""),
            _text(entry.allocation.cluster.name),
            _text(entry.partition.name if entry.partition else ""),
            _text(entry.reference),
            f"{used / 3600:.4f}",
            str(used),
        ]


def monthly_rows(usage: Iterable[MonthlyUsage]) -> Iterator[list[str]]:
    for cell in usage:
        yield [
            _text(cell.project),  # a slug may start with "-"
            _month_label(cell.month),
            _text(cell.username),
            f"{cell.gpu_hours:.4f}",
            str(cell.gpu_seconds),
        ]
