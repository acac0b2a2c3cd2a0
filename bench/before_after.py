"""Before/after tables the benches print: a figure measured the old way and the new, in
the same run, and their ratio."""

NAN = float("nan")


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


SHOWN = {
    "ms": ms,  # a time in seconds, shown in milliseconds
    "MB": lambda v: f"{v:.0f} MB",
    "KiB": lambda v: f"{v / 1024:,.0f} KiB",
    "x": lambda v: f"{v:.2f}",
    "n": lambda v: f"{v:,.0f}" if v == v else "nan",
}


def compared_row(label: str, before_value: float, after_value: float, unit: str) -> tuple:
    """A row of a before/after table: both values and after / before."""
    shown = SHOWN[unit]
    ratio = after_value / before_value if before_value else NAN
    return (label, shown(before_value), shown(after_value), f"{ratio:.2f}")


def print_compared(title: str, rows: list[tuple]) -> None:
    """A before/after table: rows of a label and three values, and lines of their own."""
    width = max([len(title), *(len(row[0]) for row in rows if len(row) > 1)]) + 2
    print(f"{title:<{width}}{'before':>12}{'after':>12}{'after/before':>14}")
    for label, *values in rows:
        if values:
            print(f"{label:<{width}}{values[0]:>12}{values[1]:>12}{values[2]:>14}")
        else:
            print(label)
