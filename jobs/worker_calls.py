"""What the web tier asks a worker for and waits on, with a deadline.

The web tier holds no run-as rights (DESIGN, "Trust boundaries"): it runs as a user of
its own that can neither read a researcher's files nor run a command as anyone, and it
never talks to Slurm. What needs those rights — the expected start of a job being
composed (``sbatch --test-only`` as its owner) and the end of a job's output (a file
only its owner may read) — is a short task on the workers. The request waits for the
answer at most a deadline; when it is missed, the page answers without that part.
"""

import dataclasses
import datetime as dt

from django.utils import translation
from django.utils.translation import gettext as _

from clusters.slurm import SlurmUnavailable
from clusters.slurm.types import SubmitRequest
from jobs import dispatch
from jobs.errors import JobInvalid, OutputUnavailable
from jobs.output import OutputText

# A little more than the worker's own deadline: the task's trip through Redis and back.
ROUND_TRIP_S = 0.5


def expected_start(
    *, cluster_id: int, request: SubmitRequest, timeout_s: float
) -> dt.datetime | None:
    """Slurm's expected start of ``request``, asked by a worker; SlurmUnavailable when no
    answer came within ``timeout_s`` (Slurm's or the worker's fault alike), JobInvalid
    when the worker found that the job could never be submitted."""
    answer = dispatch.ask(
        dispatch.START_ESTIMATE,
        deadline_s=timeout_s + ROUND_TRIP_S,
        cluster_id=cluster_id,
        request=dataclasses.asdict(request),
        timeout_s=timeout_s,
        language=translation.get_language(),
    )
    if answer is None:
        raise SlurmUnavailable(f"no start estimate within {timeout_s}s")
    if "refused" in answer:
        raise JobInvalid(answer["refused"])
    starts_at = answer.get("starts_at")
    return dt.datetime.fromisoformat(starts_at) if starts_at else None


def output_of(
    *, posix_user: str, path: str, tail_lines: int | None, timeout_s: float
) -> OutputText:
    """The end of a job's output file, read by a worker (``jobs.output.read_output_of``);
    OutputUnavailable saying why not, or that the workers did not answer in time."""
    answer = dispatch.ask(
        dispatch.OUTPUT,
        deadline_s=timeout_s,
        posix_user=posix_user,
        path=path,
        tail_lines=tail_lines,
        language=translation.get_language(),
    )
    if answer is None:
        raise OutputUnavailable(
            _("The portal's workers did not read the output in time; try again in a moment.")
        )
    if "unavailable" in answer:
        raise OutputUnavailable(answer["unavailable"])
    return OutputText(**answer)
