"""The batch script rendered from a validated ``JobSpec``.

Every ``#SBATCH`` directive comes from a validated field; the user's body may
hold none (DESIGN "Safe scripts"). The rendered script is stored and shown
exactly as submitted, so rendering is deterministic: the same spec always
gives the same bytes.
"""

import re

from jobs.specs import SHELL_SHEBANG, JobSpec, body_lines
from jobs.tokens import comment_for

# What an #SBATCH value may hold once validated; render_script checks again so
# an unvalidated spec can never smuggle in a second directive or a space.
_DIRECTIVE_VALUE = re.compile(r"[A-Za-z0-9/._+@=,:%-]+")


def _slurm_time(minutes: int) -> str:
    days, rest = divmod(minutes, 24 * 60)
    return f"{days}-{rest // 60:02d}:{rest % 60:02d}:00"


def _single_quoted(value: str) -> str:
    # Inside '…' bash expands nothing; a ' itself is closed, escaped, reopened.
    return "'" + value.replace("'", "'\\''") + "'"


def render_script(spec: JobSpec) -> str:
    """The full batch script for a spec that passed validate_spec; deterministic."""
    # (option, value); a value of None is a flag that takes none.
    options: list[tuple[str, str | None]] = [
        ("job-name", spec.name),
        ("account", spec.account),
        ("partition", spec.partition),
        ("nodes", str(spec.nodes)),
    ]
    if spec.gpus_per_node > 0:
        options.append(("gpus-per-node", str(spec.gpus_per_node)))
    if spec.cpus_per_gpu is not None:
        options.append(("cpus-per-gpu", str(spec.cpus_per_gpu)))
    if spec.mem_per_gpu_gb is not None:
        options.append(("mem-per-gpu", f"{spec.mem_per_gpu_gb}G"))
    options += [
        ("time", _slurm_time(spec.time_limit_minutes)),
        ("chdir", spec.working_directory),
        ("output", spec.output_path),
        ("error", spec.error_path),
    ]
    if spec.array:
        options.append(("array", spec.array))
    if spec.after_ok:
        options.append(("dependency", "afterok:" + ":".join(str(i) for i in spec.after_ok)))
    # Said either way: Slurm's default is the site's JobRequeue.
    options.append(("requeue" if spec.requeue else "no-requeue", None))
    options += [("export", "NONE"), ("comment", comment_for(spec.submit_token))]
    for option, value in options:
        if value is not None and not _DIRECTIVE_VALUE.fullmatch(value):
            raise ValueError(f"render_script: --{option} value {value!r} was not validated")

    lines = ["#!/bin/bash"]
    lines += [
        f"#SBATCH --{option}" if value is None else f"#SBATCH --{option}={value}"
        for option, value in options
    ]
    lines += [
        "",
        "# Written by the Slurm GPU Portal: the #SBATCH lines above come from the job's",
        "# fields, and the job's own script follows the environment it was given.",
    ]
    # Sorted, so two equal specs render the same bytes whatever the dict's order.
    lines += [
        f"export {key}={_single_quoted(spec.environment[key])}" for key in sorted(spec.environment)
    ]
    lines.append("")
    body = body_lines(spec.script)
    if SHELL_SHEBANG.fullmatch(body[0]):
        body = body[1:]
    # Line endings become "\n" (a browser's textarea sends "\r\n", which bash
    # would read as part of each command), and the script ends with one.
    return "\n".join(lines + body).rstrip("\n") + "\n"
