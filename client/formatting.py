"""Human output: aligned tables, GPU-hours with two decimals, local times."""

import datetime as dt
import json
from collections.abc import Iterable, Sequence
from typing import Any


def hours(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def when(value: str | None, *, tz: dt.tzinfo | None = None) -> str:
    """An API time (ISO 8601) in local time (or ``tz``), to the second."""
    if not value:
        return "-"
    try:
        at = dt.datetime.fromisoformat(value)
    except ValueError:
        return value
    return at.astimezone(tz).strftime("%Y-%m-%d %H:%M:%S")


def text(value: Any) -> str:
    if value is None or value == "":
        return "-"
    return str(value)


def table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], *, right: Iterable[int] = ()
) -> str:
    """Columns padded to their widest cell, two spaces apart; ``right`` ones right-aligned."""
    cells = [[text(cell) for cell in row] for row in rows]
    widths = [max([len(h), *(len(row[i]) for row in cells)]) for i, h in enumerate(headers)]
    flush_right = set(right)

    def line(row: Sequence[str]) -> str:
        padded = [
            cell.rjust(widths[i]) if i in flush_right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        return "  ".join(padded).rstrip()

    return "\n".join([line(headers), *(line(row) for row in cells)])


def pairs(rows: Iterable[tuple[str, Any]]) -> str:
    """``name  value`` lines, the values lined up."""
    kept = [(name, text(value)) for name, value in rows]
    width = max((len(name) for name, _ in kept), default=0)
    return "\n".join(f"{name:<{width}}  {value}".rstrip() for name, value in kept)


def as_json(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False)
