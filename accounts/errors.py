"""Domain errors of the bank; the API and pages turn them into messages."""

from django.utils.formats import number_format
from django.utils.translation import gettext as _


class QuotaExceeded(Exception):
    """A hold asked for more GPU-hours than the project has available, or than its
    member has left under their cap (``member_remaining_gpu_hours``, None: no cap)."""

    def __init__(
        self,
        *,
        requested_gpu_hours: float,
        available_gpu_hours: float,
        member_remaining_gpu_hours: float | None = None,
    ) -> None:
        numbers = {
            "requested": _hours(requested_gpu_hours),
            "available": _hours(available_gpu_hours),
        }
        over_cap = (
            member_remaining_gpu_hours is not None
            and member_remaining_gpu_hours < requested_gpu_hours
            and member_remaining_gpu_hours < available_gpu_hours
        )
        if over_cap:
            message = _(
                "This needs %(requested)s GPU-hours but your cap on this allocation leaves "
                "you only %(remaining)s (the project has %(available)s available); ask the "
                "project's PI to raise your cap."
            ) % {**numbers, "remaining": _hours(member_remaining_gpu_hours or 0)}
        else:
            message = (
                _("This needs %(requested)s GPU-hours but only %(available)s are available.")
                % numbers
            )
        super().__init__(message)
        self.requested_gpu_hours = requested_gpu_hours
        self.available_gpu_hours = available_gpu_hours
        self.member_remaining_gpu_hours = member_remaining_gpu_hours
        # What refused it: the project's balance, or the member's cap.
        self.limited_by = "member_cap" if over_cap else "project"


def _hours(value: float) -> str:
    return number_format(max(value, 0), 2, force_grouping=True)


class NoActiveAllocation(Exception):
    """The project has no active allocation on the cluster today."""


class Refused(Exception):
    """A write to the bank that cannot be made as asked (no reason given, a zero or
    too large adjustment, revoking what already lapsed); the message says what to fix.
    Pages show it beside the form; a bug (any other exception) is never shown so."""


class NotAllowed(Exception):
    """The user's role does not allow this (e.g. a member asking for hours)."""


class AlreadyDecided(Exception):
    """The allocation request was approved or denied before (by another manager, perhaps
    a moment ago)."""


class AllocationOverlap(Exception):
    """The project already has an active allocation on the cluster in that period."""


class TooManyTokens(Exception):
    """The user already has as many live access tokens as ``API_MAX_TOKENS_PER_USER`` allows."""

    def __init__(self, *, limit: int) -> None:
        super().__init__(
            _(
                "You already have %(limit)s active access tokens, the most allowed. "
                "Revoke one you no longer use, then create the new one."
            )
            % {"limit": limit}
        )
        self.limit = limit
