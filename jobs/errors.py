"""Domain errors of the job pipeline; the API and pages turn them into messages."""


class JobInvalid(ValueError):
    """A job request that cannot be accepted; ``fields`` names what to fix.

    ``fields`` maps a request field (``"script"``, ``"working_directory"``, …) to
    one or more messages that say what is wrong and how to fix it; ``"__all__"``
    holds the ones that concern no single field.
    """

    def __init__(self, fields: dict[str, list[str]]) -> None:
        self.fields = fields
        super().__init__(
            "; ".join(f"{name}: {' '.join(messages)}" for name, messages in fields.items())
        )

    @classmethod
    def one(cls, field: str, message: str) -> "JobInvalid":
        return cls({field: [message]})


class OutputUnavailable(Exception):
    """The job's output cannot be shown (not written yet, or not the owner's to read)."""
