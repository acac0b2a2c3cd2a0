"""Domain errors of the bank; the API and pages turn them into messages."""


class QuotaExceeded(Exception):
    """A hold asked for more GPU-hours than the project has available."""

    def __init__(self, *, requested_gpu_hours: float, available_gpu_hours: float) -> None:
        super().__init__(
            f"This needs {requested_gpu_hours:,.2f} GPU-hours but only "
            f"{max(available_gpu_hours, 0):,.2f} are available."
        )
        self.requested_gpu_hours = requested_gpu_hours
        self.available_gpu_hours = available_gpu_hours


class NoActiveAllocation(Exception):
    """The project has no active allocation on the cluster today."""


class NotAllowed(Exception):
    """The user's role does not allow this (e.g. a member asking for hours)."""


class AllocationOverlap(Exception):
    """The project already has an active allocation on the cluster in that period."""
