"""How a worker reaches a cluster's Slurm client tools: the command prefixes.

A prefix is a command line put before the tool, split as a shell would split it
(``shlex``) but never run by a shell. The command prefix runs the operator's tools
(sacctmgr, squeue, sacct, sinfo, scontrol, scancel…) as the worker itself; the run-as
prefix runs a job owner's (sbatch, scancel, scontrol hold) as that owner, ``{user}``
standing for their login. The checks here are the only ones: the cluster's fields, the
global setting's system check and the cli client all use them.
"""

import shlex

USER_PLACEHOLDER = "{user}"


class PrefixInvalid(ValueError):
    """A prefix that cannot be used; the message says why, for a person."""


def prefix_argv(prefix: str) -> list[str]:
    """The prefix's arguments (none for an empty one)."""
    try:
        return shlex.split(prefix)
    except ValueError as error:  # "No closing quotation", "No escaped character"
        raise PrefixInvalid(
            f"{prefix!r} cannot be split into arguments as a shell would: {error}."
        ) from None


def command_prefix_argv(prefix: str) -> list[str]:
    """A command prefix's arguments: the worker's own commands, so no ``{user}``."""
    argv = prefix_argv(prefix)
    if USER_PLACEHOLDER in prefix:
        raise PrefixInvalid(
            f"{prefix!r} holds {USER_PLACEHOLDER}, but the command prefix runs the worker's "
            "own commands, as no job owner: the run-as prefix is the one with {user}."
        )
    return argv


def run_as_prefix_template(prefix: str) -> list[str]:
    """A run-as prefix's arguments, ``{user}`` still in them."""
    argv = prefix_argv(prefix)
    if not any(USER_PLACEHOLDER in part for part in argv):
        raise PrefixInvalid(
            f"{prefix!r} has no {USER_PLACEHOLDER}, where the job owner's login goes, so "
            "jobs could not run as their owner (e.g. 'sudo -n -u {user}')."
        )
    return argv


def run_as_prefix_argv(template: list[str], user: str) -> list[str]:
    """The run-as arguments for ``user``, who fills each ``{user}`` within its argument:
    a login never becomes two arguments."""
    return [part.replace(USER_PLACEHOLDER, user) for part in template]
