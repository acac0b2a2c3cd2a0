"""A job request as typed fields (``JobSpec``) and its validation.

``validate_spec`` runs a list of small checks, each looking at one part of the
request, and raises one ``JobInvalid`` with every field's problems. Each check
says what to fix in the user's language. Paths are checked here as text only;
``jobs/paths.py`` checks them against the owner's allowed roots.

Shebang: the portal's ``#!/bin/bash`` is always the rendered script's first
line. A body may start with its own ``#!/bin/bash``, ``#!/bin/sh`` or
``#!/usr/bin/env bash`` (or ``sh``) line, which is dropped when rendering; any
other ``#!`` line (another interpreter, or options such as ``-l``) is refused,
because it would silently not apply.
"""

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from jobs.errors import JobInvalid
from jobs.paths import describe_character, lexical_path_error

MAX_TIME_MINUTES = 365 * 24 * 60  # even a partition without a limit gets no more than a year
MAX_ARRAY_TASKS = 10_000
MAX_ARRAY_INDEX = 4_000_000  # Slurm's own ceiling for MaxArraySize is 4_000_001
MAX_ENVIRONMENT = 100
MAX_ENV_VALUE = 4096
MAX_DEPENDENCIES = 100
MAX_JOB_ID = 2**32 - 3  # Slurm job ids are uint32; the top values mean NO_VAL/INFINITE

_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,64}")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# Slurm reads these prefixes as its own input options or job state; the
# worker's values must not reach a job and a user's must not steer Slurm.
_RESERVED_ENV_PREFIXES = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_")
# Variables that change how bash reads the rendered script (BASH_ENV, ENV,
# IFS, …), inject code into every program including srun (LD_PRELOAD,
# LD_AUDIT), or are read-only in bash so the export itself fails.
# LD_LIBRARY_PATH and PATH stay allowed: CUDA jobs set them, and the job runs
# with its owner's rights, so they grant nothing.
_RESERVED_ENV = frozenset(
    {"LD_PRELOAD", "LD_AUDIT", "BASH_ENV", "ENV", "IFS", "PS4", "PROMPT_COMMAND"}
    | {"SHELLOPTS", "BASHOPTS", "BASH_VERSINFO", "EUID", "UID", "PPID"}
)
_ARRAY_ITEM = re.compile(r"([0-9]{1,7})(?:-([0-9]{1,7})(?::([0-9]{1,7}))?)?")
_ARRAY_LIMIT = re.compile(r"%([0-9]{1,7})")
# Invisible characters an editor may put before a word (a byte-order mark, zero-width
# spaces): a line that looks like "#SBATCH" to the user is refused like one.
_BLANK = r"[\s\u200b-\u200f\u2060\ufeff]*"
_SBATCH_LINE = re.compile(_BLANK + "#" + _BLANK + "sbatch", re.IGNORECASE)
# sbatch also reads "#SLURM", "#PBS" and "#BSUB" lines at the start of a line as
# directives (22.05 translates the last two), as long as no command came before:
# with no environment to export, the body's first lines are still in that block.
# Only "#" directly followed by the word counts, so "# Slurm sets …" comments pass.
_OTHER_DIRECTIVE_LINE = re.compile(_BLANK + "#(?:slurm|pbs|bsub)", re.IGNORECASE)
SHELL_SHEBANG = re.compile(r"#!\s*(?:(?:/usr)?/bin/(?:ba)?sh|/usr/bin/env\s+(?:ba)?sh)\s*")


@dataclass(frozen=True)
class JobSpec:
    name: str
    account: str
    partition: str
    nodes: int
    gpus_per_node: int
    cpus_per_gpu: int | None
    mem_per_gpu_gb: int | None
    time_limit_minutes: int
    working_directory: str
    output_path: str
    error_path: str
    environment: dict[str, str]
    array: str  # a Slurm array spec such as "0-9%2", or "" for a single job
    after_ok: tuple[int, ...]  # Slurm job ids this job waits for
    script: str  # the user's body
    submit_token: str
    requeue: bool = False  # whether Slurm may run it again (--requeue); else --no-requeue


def _duration(minutes: int) -> str:
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    parts = [
        ngettext("%(n)s day", "%(n)s days", days) % {"n": days} if days else "",
        ngettext("%(n)s hour", "%(n)s hours", hours) % {"n": hours} if hours else "",
        ngettext("%(n)s minute", "%(n)s minutes", mins) % {"n": mins} if mins else "",
    ]
    return " ".join(part for part in parts if part) or _("0 minutes")


def _shown(text: str, limit: int = 40) -> str:
    return repr(text[:limit] + ("…" if len(text) > limit else ""))


def _name_error(value: str, what: str) -> str | None:
    """``what`` is the field's translated name ("job name", "account", "partition")."""
    if not value:
        return _("Give a %(what)s.") % {"what": what}
    if len(value) > 64:
        return _("The %(what)s is %(length)s characters long; use at most 64.") % {
            "what": what,
            "length": len(value),
        }
    for index, char in enumerate(value):
        if not _NAME.fullmatch(char):
            return _(
                "The %(what)s contains %(character)s at position %(position)s; "
                "use only letters, digits, '.', '_' and '-'."
            ) % {"what": what, "character": describe_character(char), "position": index + 1}
    if not value.strip("."):
        # %x in an output path would turn such a name into "." or "..".
        return _("A %(what)s of only dots is not allowed; add a letter or digit.") % {"what": what}
    return None


def array_indices(array: str) -> frozenset[int]:
    """The task indices of a Slurm array spec ("0-9", "1,3,5", "0-15:4", "0-9%2"); JobInvalid."""

    def invalid(message: str) -> JobInvalid:
        return JobInvalid.one("array", message)

    body, _percent, limit = array.partition("%")
    if limit and not _ARRAY_LIMIT.fullmatch("%" + limit):
        raise invalid(
            _("After '%%' give how many tasks may run at once, e.g. 0-9%%2 (not %(given)s).")
            % {"given": "%" + limit}
        )
    if limit and int(limit) < 1:
        raise invalid(
            _("At least one task must be allowed to run at once; use %(example)s or more.")
            % {"example": "%1"}
        )
    total = 0
    ranges: list[range] = []
    for item in body.split(","):
        match = _ARRAY_ITEM.fullmatch(item)
        if not match:
            raise invalid(
                _(
                    "'%(item)s' is not an array index or range; "
                    "write e.g. 0-9, 1,3,5, 0-15:4 or 0-9%%2."
                )
                % {"item": item}
            )
        first = int(match[1])
        last = int(match[2]) if match[2] else first
        step = int(match[3]) if match[3] else 1
        if last < first:
            raise invalid(
                _("'%(item)s' counts down; write the lower index first.") % {"item": item}
            )
        if step < 1:
            raise invalid(
                _("'%(item)s' has a step of 0; use a step of 1 or more.") % {"item": item}
            )
        if last > MAX_ARRAY_INDEX:
            raise invalid(
                _("Array indices go up to %(max)s; '%(item)s' goes beyond.")
                % {"max": MAX_ARRAY_INDEX, "item": item}
            )
        # Count before building the set, so "0-4000000" costs nothing to refuse.
        total += len(range(first, last + 1, step))
        if total > MAX_ARRAY_TASKS:
            raise invalid(
                _("An array may have at most %(max)s tasks; ask for fewer.")
                % {"max": MAX_ARRAY_TASKS}
            )
        ranges.append(range(first, last + 1, step))
    return frozenset(index for r in ranges for index in r)


def array_task_count(array: str) -> int:
    """How many tasks an array spec makes: 1 for "" (a single job). JobInvalid if invalid."""
    return len(array_indices(array)) if array else 1


def decode_script(data: bytes) -> str:
    """An uploaded script as text; JobInvalid on ``script`` if it is not UTF-8.

    A leading byte-order mark (as some editors write) is dropped: bash would
    otherwise take it as part of the first command.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise JobInvalid.one(
            "script",
            _(
                "The script is not valid UTF-8 text (invalid byte at offset %(offset)s); "
                "save it as UTF-8 and upload it again."
            )
            % {"offset": error.start},
        ) from None
    return text.removeprefix("\ufeff")


def body_lines(script: str) -> list[str]:
    """The script's lines as bash reads them."""
    # bash splits lines on "\n" only; str.splitlines would also split on
    # \x0b, \u2028 … and give line numbers the user cannot find. Every "\r" at a
    # line's end goes: sbatch refuses a script with "\r\n" in it.
    return [line.rstrip("\r") for line in script.split("\n")]


def _script_errors(script: str, max_bytes: int) -> list[str]:
    if not script.strip():
        return [_("The script is empty; write the commands the job should run.")]
    lines = body_lines(script)
    if "\x00" in script:
        numbers = [str(n) for n, line in enumerate(lines, 1) if "\x00" in line]
        return [
            ngettext(
                "The script contains a NUL character (line %(lines)s); save it as plain text.",
                "The script contains a NUL character (lines %(lines)s); save it as plain text.",
                len(numbers),
            )
            % {"lines": ", ".join(numbers[:10])}
        ]
    try:
        size = len(script.encode("utf-8"))
    except UnicodeEncodeError as error:
        return [
            _("The script has a character that is not valid text at position %(position)s.")
            % {"position": error.start}
        ]
    errors = []
    if size > max_bytes:
        errors.append(
            _(
                "The script is %(size)s bytes; the limit is %(limit)s bytes. Keep large code "
                "in files in your working directory and call them from the script."
            )
            % {"size": size, "limit": max_bytes}
        )
    if lines[0].startswith("#!") and not SHELL_SHEBANG.fullmatch(lines[0]):
        errors.append(
            _(
                "Line 1 (%(line)s): the portal runs every script with #!/bin/bash, so another "
                "interpreter or options there would not apply. Remove the line and call the "
                "program from the script (e.g. python train.py, or set -x for bash -x)."
            )
            % {"line": _shown(lines[0])}
        )
    sbatch = [n for n, line in enumerate(lines, 1) if _SBATCH_LINE.match(line)]
    if sbatch:
        errors.append(
            ngettext(
                "Line %(lines)s: the script may not contain #SBATCH lines (in any spacing or "
                "case). Remove them and use the job's fields instead.",
                "Lines %(lines)s: the script may not contain #SBATCH lines (in any spacing or "
                "case). Remove them and use the job's fields instead.",
                len(sbatch),
            )
            % {"lines": _listed(sbatch)}
        )
    other = [n for n, line in enumerate(lines, 1) if _OTHER_DIRECTIVE_LINE.match(line)]
    if other:
        errors.append(
            ngettext(
                "Line %(lines)s: sbatch reads #SLURM, #PBS and #BSUB lines as directives too, "
                "so the script may not contain them. Remove them and use the job's fields "
                "instead.",
                "Lines %(lines)s: sbatch reads #SLURM, #PBS and #BSUB lines as directives too, "
                "so the script may not contain them. Remove them and use the job's fields "
                "instead.",
                len(other),
            )
            % {"lines": _listed(other)}
        )
    return errors


def _listed(numbers: list[int]) -> str:
    return ", ".join(str(n) for n in numbers[:10]) + (", …" if len(numbers) > 10 else "")


def _environment_errors(environment: dict[str, str]) -> list[str]:
    if len(environment) > MAX_ENVIRONMENT:
        return [
            _("Set at most %(max)s environment variables (%(given)s given).")
            % {"max": MAX_ENVIRONMENT, "given": len(environment)}
        ]
    errors = []
    for key, value in environment.items():
        if not _ENV_KEY.fullmatch(key):
            errors.append(
                _(
                    "%(name)s is not a valid variable name; use letters, digits and _, "
                    "not starting with a digit, at most 128 characters."
                )
                % {"name": _shown(key)}
            )
        elif key.startswith(_RESERVED_ENV_PREFIXES):
            errors.append(
                _(
                    "%(name)s: variables starting with %(prefix)s belong to Slurm; "
                    "set the job's fields instead."
                )
                % {"name": key, "prefix": key.split("_")[0] + "_"}
            )
        elif key in _RESERVED_ENV:
            errors.append(
                _(
                    "%(name)s cannot be set here: it changes how bash or every program "
                    "starts; remove it."
                )
                % {"name": key}
            )
        elif len(value) > MAX_ENV_VALUE:
            errors.append(
                _("%(name)s: the value is %(length)s characters; use at most %(max)s.")
                % {"name": key, "length": len(value), "max": MAX_ENV_VALUE}
            )
        elif bad := next((char for char in value if not char.isprintable()), None):
            errors.append(
                _(
                    "%(name)s: the value contains %(character)s; values must be one line of "
                    "printable text (no newlines, tabs or control characters)."
                )
                % {"name": key, "character": describe_character(bad)}
            )
    return errors


def _whole(value: int, low: int, high: int) -> bool:
    """Whether ``value`` is a whole number (not a bool) from ``low`` to ``high``."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _array_errors(array: str) -> list[str]:
    try:
        array_task_count(array)
    except JobInvalid as error:
        return error.fields["array"]
    return []


@dataclass(frozen=True)
class PartitionLimits:
    """What the chosen partition allows; ``max_time_minutes`` None: no limit of its own."""

    max_time_minutes: int | None
    max_gpus_per_node: int
    max_nodes: int
    max_script_bytes: int


# A check yields (field, message) for each problem it finds.
Problems = Iterator[tuple[str, str]]


def _partition_named(spec: JobSpec) -> str:
    """How messages name the partition (an invalid name is reported on its own field, not
    echoed in others)."""
    if _NAME.fullmatch(spec.partition):
        return _("The %(partition)s partition") % {"partition": spec.partition}
    return _("The partition")


def _size_problems(spec: JobSpec, limits: PartitionLimits) -> Problems:
    """Nodes, GPUs per node and the time limit within the partition's limits (and the
    portal's year)."""
    where = _partition_named(spec)
    nodes, gpus = limits.max_nodes, limits.max_gpus_per_node
    if not _whole(spec.nodes, 1, nodes):
        yield (
            "nodes",
            _("%(where)s allows 1 to %(nodes)s nodes per job; ask for 1 to %(nodes)s.")
            % {
                "where": where,
                "nodes": nodes,
            },
        )
    if not _whole(spec.gpus_per_node, 0, gpus):
        yield (
            "gpus_per_node",
            _("%(where)s has at most %(gpus)s GPUs per node; ask for 0 to %(gpus)s.")
            % {"where": where, "gpus": gpus},
        )
    limit, owner = MAX_TIME_MINUTES, _("The portal")
    if limits.max_time_minutes is not None:
        limit, owner = min(limits.max_time_minutes, MAX_TIME_MINUTES), where
    if not _whole(spec.time_limit_minutes, 1, limit):
        yield (
            "time_limit_minutes",
            _("%(where)s allows at most %(limit)s minutes (%(duration)s); ask for 1 to %(limit)s.")
            % {"where": owner, "limit": limit, "duration": _duration(limit)},
        )


def _per_gpu_problems(spec: JobSpec, limits: PartitionLimits) -> Problems:
    """CPUs and memory per GPU: empty, or a whole number in range on a job with GPUs."""
    for field, high, unit in (("cpus_per_gpu", 256, _("CPUs")), ("mem_per_gpu_gb", 2048, _("GB"))):
        value = getattr(spec, field)
        if value is None:
            continue
        if not _whole(value, 1, high):
            yield (
                field,
                _("Ask for 1 to %(high)s %(unit)s per GPU, or leave it empty for the default.")
                % {"high": high, "unit": unit},
            )
        elif spec.gpus_per_node == 0:  # Slurm refuses it without GPUs
            yield (
                field,
                _("%(unit)s per GPU need a GPU; ask for one or leave this empty.") % {"unit": unit},
            )


def _name_problems(spec: JobSpec, limits: PartitionLimits) -> Problems:
    for field, what in (
        ("name", _("job name")),
        ("account", _("account")),
        ("partition", _("partition")),
    ):
        if message := _name_error(getattr(spec, field), what):
            yield field, message


def _path_problems(spec: JobSpec, limits: PartitionLimits) -> Problems:
    for field in ("working_directory", "output_path", "error_path"):
        patterns = field != "working_directory"  # %j and friends name output files only
        if message := lexical_path_error(getattr(spec, field), patterns=patterns):
            yield field, message


def _environment_problems(spec: JobSpec, limits: PartitionLimits) -> Problems:
    for message in _environment_errors(spec.environment):
        yield "environment", message


def _array_problems(spec: JobSpec, limits: PartitionLimits) -> Problems:
    for message in _array_errors(spec.array):
        yield "array", message


def _dependency_problems(spec: JobSpec, limits: PartitionLimits) -> Problems:
    if len(spec.after_ok) > MAX_DEPENDENCIES:
        yield (
            "after_ok",
            _("A job may wait for at most %(max)s other jobs.") % {"max": MAX_DEPENDENCIES},
        )
    elif not all(_whole(job_id, 1, MAX_JOB_ID) for job_id in spec.after_ok):
        yield (
            "after_ok",
            _("Give the Slurm job ids (positive whole numbers) this job should wait for."),
        )


def _script_problems(spec: JobSpec, limits: PartitionLimits) -> Problems:
    for message in _script_errors(spec.script, limits.max_script_bytes):
        yield "script", message


def _token_problems(spec: JobSpec, limits: PartitionLimits) -> Problems:
    if not _TOKEN.fullmatch(spec.submit_token):
        yield "submit_token", _("The submit token must be 1 to 64 letters, digits, '_' or '-'.")


# In the order the fields' problems are listed.
_CHECKS: tuple[Callable[[JobSpec, PartitionLimits], Problems], ...] = (
    _size_problems,
    _per_gpu_problems,
    _name_problems,
    _path_problems,
    _environment_problems,
    _array_problems,
    _dependency_problems,
    _script_problems,
    _token_problems,
)


def validate_spec(
    spec: JobSpec,
    *,
    max_time_minutes: int | None,
    max_gpus_per_node: int,
    max_nodes: int,
    max_script_bytes: int = 256 * 1024,
) -> None:
    """Run every check on ``spec`` against the chosen partition's limits; raise one
    JobInvalid listing each field's problems."""
    limits = PartitionLimits(max_time_minutes, max_gpus_per_node, max_nodes, max_script_bytes)
    errors: dict[str, list[str]] = {}
    for check in _CHECKS:
        for field, message in check(spec, limits):
            errors.setdefault(field, []).append(message)
    if errors:
        raise JobInvalid(errors)
