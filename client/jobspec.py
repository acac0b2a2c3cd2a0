"""A job request from flags and a small YAML job file.

The file's keys are the API's job request field names (DESIGN "API shapes"),
plus ``script_file`` (a path, relative to the job file) instead of an inline
``script``::

    project: vision-lab
    partition: debug
    gpus_per_node: 1
    time_limit_minutes: "1:30"   # minutes, or H:MM
    environment: {EPOCHS: "3"}
    script_file: train.sh

Flags given on the command line win over the file's values.
"""

import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

STRING_FIELDS = frozenset(
    {
        "project",
        "cluster",
        "partition",
        "name",
        "working_directory",
        "output_path",
        "error_path",
        "array",
        "script",
    }
)
INTEGER_FIELDS = frozenset(
    {"nodes", "gpus_per_node", "cpus_per_gpu", "mem_per_gpu_gb", "time_limit_minutes", "template"}
)
BOOLEAN_FIELDS = frozenset({"requeue"})
REQUEST_FIELDS = STRING_FIELDS | INTEGER_FIELDS | BOOLEAN_FIELDS | {"environment", "depends_on"}
FILE_KEYS = REQUEST_FIELDS | {"script_file"}
_TIME = re.compile(r"(?:(\d+):)?(\d+)")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class JobSpecError(ValueError):
    """A job file or a flag that cannot make a job request (a usage error, exit 2)."""


def parse_minutes(text: str) -> int:
    """``90`` or ``1:30`` (H:MM) as minutes."""
    match = _TIME.fullmatch(text.strip())
    if not match or (match[1] is not None and int(match[2]) >= 60):
        raise JobSpecError(f"{text!r} is not a time: give minutes (90) or H:MM (1:30)")
    hours, minutes = int(match[1] or 0), int(match[2])
    return hours * 60 + minutes


def parse_assignment(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` (the value may hold '=' and be empty)."""
    name, equals, value = text.partition("=")
    if not equals or not _ENV_NAME.fullmatch(name):
        raise JobSpecError(f"{text!r} is not KEY=VALUE with a variable name as KEY")
    return name, value


def read_script(source: str) -> str:
    """A script body from a file, or from stdin for ``-``."""
    if source == "-":
        return sys.stdin.read()
    try:
        return Path(source).read_text()
    except OSError as error:
        raise JobSpecError(f"cannot read the script {source}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise JobSpecError(f"the script {source} is not UTF-8 text") from None


def _scalar_text(key: str, value: Any) -> str:
    # YAML reads `yes` as true and `~` as null: a job wants the text, so ask for quotes.
    if isinstance(value, bool) or value is None or not isinstance(value, str | int | float):
        raise JobSpecError(f"{key}: give text (quote it if YAML reads it otherwise: {value!r})")
    return str(value)


def _integer(key: str, value: Any) -> int:
    if key == "time_limit_minutes" and isinstance(value, str):
        return parse_minutes(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise JobSpecError(f"{key}: give a whole number, not {value!r}")
    return value


def _boolean(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise JobSpecError(f"{key}: give true or false, not {value!r}")
    return value


def _environment(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise JobSpecError("environment: give a mapping of names to values, e.g. {EPOCHS: '3'}")
    return {str(name): _scalar_text(f"environment.{name}", v) for name, v in value.items()}


def _job_ids(value: Any) -> list[int]:
    items = value if isinstance(value, list) else [value]
    return [_integer("depends_on", item) for item in items]


def request_from_mapping(data: Mapping[str, Any], *, folder: Path) -> dict[str, Any]:
    """The job request a job file's mapping means; ``script_file`` is read from ``folder``."""
    unknown = sorted(set(map(str, data)) - FILE_KEYS)
    if unknown:
        raise JobSpecError(
            f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
            f"a job file has {', '.join(sorted(FILE_KEYS))}"
        )
    if "script" in data and "script_file" in data:
        raise JobSpecError("give script or script_file, not both")
    request: dict[str, Any] = {}
    for key, value in data.items():
        if value is None:
            continue  # left out: the template's value or the portal's default
        if key in STRING_FIELDS:
            request[key] = _scalar_text(key, value)
        elif key in INTEGER_FIELDS:
            request[key] = _integer(key, value)
        elif key in BOOLEAN_FIELDS:
            request[key] = _boolean(key, value)
        elif key == "environment":
            request[key] = _environment(value)
        elif key == "depends_on":
            request[key] = _job_ids(value)
        elif key == "script_file":
            request["script"] = read_script(str(folder / _scalar_text(key, value)))
    return request


def load_job_file(path: str) -> dict[str, Any]:
    """The job request of a YAML job file (``-``: stdin, script_file relative to here)."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as error:
        raise JobSpecError(f"cannot read the job file {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise JobSpecError(f"the job file {path} is not UTF-8 text") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise JobSpecError(f"{path} is not valid YAML: {error}") from None
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise JobSpecError(f"{path} must be a mapping of job fields, e.g. `partition: debug`")
    return request_from_mapping(data, folder=Path.cwd() if path == "-" else Path(path).parent)


def merge(
    base: Mapping[str, Any],
    flags: Mapping[str, Any],
    *,
    environment: Iterable[tuple[str, str]] = (),
) -> dict[str, Any]:
    """The file's request with the flags given (not None) on top; ``--env`` adds to its
    environment."""
    request = dict(base)
    request.update({key: value for key, value in flags.items() if value is not None})
    extra = dict(environment)
    if extra:
        request["environment"] = {**request.get("environment", {}), **extra}
    return request
