"""The errors every Slurm client raises; callers never see a backend's own."""


class SlurmError(Exception):
    """Base of all Slurm client errors."""


class SlurmUnavailable(SlurmError):
    """Slurm could not be reached or did not answer in time: transient, retry later.

    After a timeout the request may still have been carried out, so a caller
    that changed something must treat the outcome as unknown, never as failed.
    """


class SlurmRejected(SlurmError):
    """Slurm answered and refused the request: final. ``message`` is Slurm's own text."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(SlurmError):
    """The job, account or association asked for does not exist in Slurm."""
