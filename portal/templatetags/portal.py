"""Filters for readable numbers and times: GPU-hours with their unit, relative times
with the absolute one on hover, job-state badges, why a pending job waits."""

import datetime as dt
from decimal import Decimal

from django import template
from django.contrib.humanize.templatetags.humanize import naturaltime
from django.template.defaultfilters import floatformat
from django.utils import formats, timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _

from jobs.pending_reasons import explain_job_wait

register = template.Library()


@register.filter
def gpu_hours(value: float | int | None, digits: str = "-2g") -> str:
    """Hours as "1,234.50 GPU-h" in the active language's number format."""
    if value is None:
        return "—"
    if 0 < value < 0.01:
        # A short job's few GPU-seconds must not read as "0 GPU-h", i.e. free.
        return _("< %(hours)s GPU-h") % {"hours": floatformat(0.01, "2g")}
    if -0.01 < value < 0:
        # A balance a few GPU-seconds overdrawn must not read as a little left.
        return _("> %(hours)s GPU-h") % {"hours": floatformat(-0.01, "2g")}
    return _("%(hours)s GPU-h") % {"hours": floatformat(value, digits)}


@register.filter
def gpu_seconds_as_hours(value: int | None, digits: str = "-2g") -> str:
    return gpu_hours(None if value is None else value / 3600, digits)


@register.filter
def when(value: dt.datetime | None) -> SafeString | str:
    """ "3 minutes ago", with the exact local time on hover and for machines."""
    if value is None:
        return "—"
    try:
        local = timezone.localtime(value)
    except OverflowError:  # within hours of year 1 or 9999, where no local date is
        local = value
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        value.isoformat(),
        formats.date_format(local, "DATETIME_FORMAT"),
        naturaltime(value),
    )


@register.filter
def duration(seconds: float | int | None) -> str:
    """A time used, in seconds, readable: "4.2 s", "12 min", "4 h 3 min"."""
    if seconds is None:
        return "—"
    if seconds < 60:
        return _("%(n)s s") % {"n": floatformat(seconds, "-1g")}
    return minutes(round(seconds / 60))


@register.filter
def minutes(value: int | None) -> str:
    """A time limit in minutes, readable: "90 min", "4 h", "2 d 3 h"."""
    if value is None:
        return "—"
    days, rest = divmod(int(value), 24 * 60)
    hours, mins = divmod(rest, 60)
    parts = []
    if days:
        parts.append(_("%(n)s d") % {"n": days})
    if hours:
        parts.append(_("%(n)s h") % {"n": hours})
    if mins or not parts:
        parts.append(_("%(n)s min") % {"n": mins})
    return " ".join(parts)


@register.inclusion_tag("includes/state_badge.html")
def state_badge(job) -> dict:
    return {"state": job.state, "label": job.get_state_display(), "reason": job.reason}


@register.inclusion_tag("includes/pending_reason.html")
def pending_reason(job, compact: bool = False) -> dict:
    """Why a pending job waits, in words: one line in a list (``compact``); on the job
    page with what to do and Slurm's own reason. Nothing for a job in another state."""
    explanation = explain_job_wait(
        state=job.state, reason=job.reason, nodes=job.nodes, gpus_per_node=job.gpus_per_node
    )
    return {
        "job": job,
        "explanation": explanation,
        "compact": compact,
        "reason": job.reason or "None",
    }


@register.filter
def price(value: Decimal | float | None) -> str:
    """A billing weight or CPU-hour rate with the digits it has: 0.01, 2.5, 1 (a rate
    stored as 0.0100 reads as what the manager typed)."""
    if value is None:
        return "—"
    text = format(Decimal(value), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return formats.number_format(Decimal(text))


@register.filter
def percent(part: float | int, whole: float | int) -> float:
    """part as a share of whole, 0-100, for bar widths."""
    if not whole or whole <= 0:
        return 0.0
    return round(max(0.0, min(100.0, 100 * part / whole)), 1)
