"""The submit token a portal job carries into Slurm, and what it proves.

Every job the portal submits carries ``portal:<token>`` as its Slurm comment, so
that a retry finds a job an earlier attempt queued (the worker died after sbatch)
and accounting finds a job whose Slurm id was never recorded. But a comment is
anyone's to write (``sbatch --comment``) and, at most sites, everyone's to read
(``squeue --all -o %k``): a token alone proves nothing. A Slurm job is taken for
a portal job's submission only when it ran as the job's owner, under the job's
account, on the job's cluster, and was submitted while the portal was submitting
the job (after it was saved, before its Slurm id was recorded).
"""

import datetime as dt
import uuid
from typing import Protocol

_PREFIX = "portal:"

# Slurm's clock against the database's: the two may disagree by this much.
CLOCK_SLACK = dt.timedelta(minutes=2)


def comment_for(token: uuid.UUID | str) -> str:
    """The Slurm comment a job with this submit token is submitted with."""
    return f"{_PREFIX}{token}"


def token_in(comment: str) -> str | None:
    """The submit token in a portal job's comment; None for any other comment."""
    if not comment.startswith(_PREFIX):
        return None
    try:
        return str(uuid.UUID(comment.removeprefix(_PREFIX)))
    except ValueError:
        return None  # someone else's text that merely looks like ours


class SlurmRecord(Protocol):
    """What a queue or accounting entry says of who submitted it, and when."""

    @property
    def user(self) -> str: ...
    @property
    def account(self) -> str: ...
    @property
    def submitted_at(self) -> dt.datetime | None: ...


def is_submission_of(
    record: SlurmRecord,
    *,
    posix_user: str,
    account: str,
    created_at: dt.datetime,
    recorded_at: dt.datetime | None,
) -> bool:
    """Whether a Slurm job carrying a portal job's token can be that job's submission:
    the job's own user and account, submitted between the job's saving and the
    recording of its Slurm id (``recorded_at``; None while it is not recorded). The
    cluster is the caller's to match: a record is only ever compared with the jobs of
    the cluster it was read from."""
    if record.user != posix_user or record.account != account:
        return False
    submitted = record.submitted_at
    if submitted is None:
        return True  # Slurm always says; nothing to hold against it if it does not
    if submitted < created_at - CLOCK_SLACK:
        return False
    return recorded_at is None or submitted <= recorded_at + CLOCK_SLACK
