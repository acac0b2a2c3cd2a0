"""System checks for the Slurm configuration (ids ``clusters.E…``/``clusters.W…``)."""

import os
import shutil

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register
from django.db import DatabaseError

from clusters.prefixes import PrefixInvalid, command_prefix_argv, run_as_prefix_template


@register()
def check_slurm_settings(app_configs, **kwargs):
    errors = []
    try:
        run_as_prefix_template(settings.SLURM_RUN_AS_PREFIX)
    except PrefixInvalid as error:
        errors.append(
            Error(
                f"PORTAL_SLURM_RUN_AS_PREFIX: {error}",
                hint="Use e.g. 'sudo -n -u {user}' or 'runuser -u {user} --'.",
                id="clusters.E001",
            )
        )
    if settings.SLURM_BIN_DIR and not os.path.isdir(settings.SLURM_BIN_DIR):
        errors.append(
            Error(
                f"PORTAL_SLURM_BIN_DIR={settings.SLURM_BIN_DIR!r} is not a directory.",
                hint="Point it at the folder holding sbatch, squeue and sacct, or unset it.",
                id="clusters.E002",
            )
        )
    return errors


def _enabled_clusters(databases) -> list | None:
    """The enabled clusters when the check may read the database (``--database
    default``); None when it may not or cannot (the database check reports why;
    migrations may not have run yet)."""
    if not databases or "default" not in databases:
        return None
    from clusters.models import Cluster

    try:
        return list(Cluster.objects.filter(is_enabled=True))
    except DatabaseError:
        return None


@register(Tags.database)
def check_clusters(app_configs, databases=None, **kwargs):
    """Runs with ``manage.py check --database default``: it reads the cluster table."""
    from clusters.models import Cluster

    clusters = _enabled_clusters(databases)
    if clusters is None:
        return []
    if not clusters:
        return [
            Warning(
                "No Slurm cluster is registered, so no job can be submitted.",
                hint="Run 'manage.py seed_demo' on a dev machine or add one in the admin console.",
                id="clusters.W001",
            )
        ]
    errors = []
    for cluster in clusters:
        if cluster.backend != Cluster.Backend.REST:
            continue
        if not cluster.rest_url:
            errors.append(
                Error(
                    f"Cluster {cluster.name!r} uses the rest backend but has no slurmrestd URL.",
                    hint="Set its REST URL in the admin console, e.g. http://slurm-head:6820.",
                    id="clusters.E004",
                )
            )
        if not os.access(cluster.jwt_key_file or "", os.R_OK):
            errors.append(
                Error(
                    f"Cluster {cluster.name!r}: the JWT key {cluster.jwt_key_file!r} is not "
                    "readable, so the portal cannot mint tokens for slurmrestd.",
                    hint="Point 'JWT key file' at the cluster's jwt_hs256.key and let the "
                    "workers' user read it (never the web tier's: docs/DEPLOYMENT.md).",
                    id="clusters.E005",
                )
            )
    cli_clusters = [c for c in clusters if c.backend == Cluster.Backend.CLI]
    for cluster in cli_clusters:
        errors.extend(_client_tools_errors(cluster))
    search_path = settings.SLURM_BIN_DIR or None
    if any(not c.command_prefix for c in cli_clusters):
        for tool in ("sbatch", "squeue", "sacct", "sinfo", "scontrol", "sacctmgr"):
            if shutil.which(tool, path=search_path) is None:
                errors.append(
                    Error(
                        f"A cluster uses the worker's own Slurm tools but {tool!r} is not on "
                        "the worker's PATH.",
                        hint="Install the Slurm client tools, set PORTAL_SLURM_BIN_DIR, or give "
                        "the cluster a command prefix that reaches its own.",
                        id="clusters.E003",
                    )
                )
    return errors


def _client_tools_errors(cluster) -> list[Error]:
    """A cli cluster's prefixes, as its fields' validators say (a row written by code
    skips them), and the command its prefix starts."""
    try:
        command = command_prefix_argv(cluster.command_prefix)
        if cluster.run_as_prefix:
            run_as_prefix_template(cluster.run_as_prefix)
    except PrefixInvalid as error:
        message = f"Cluster {cluster.name!r}: {error}"
    else:
        if command and shutil.which(command[0]) is None:
            message = (
                f"Cluster {cluster.name!r}: its command prefix starts {command[0]!r}, "
                "which the worker cannot find."
            )
        else:
            return []
    return [
        Error(
            message,
            hint="Correct the cluster's client tools in the admin console (superusers).",
            id="clusters.E006",
        )
    ]


@register(Tags.security, Tags.database, deploy=True)
def check_devices_constrained(app_configs, databases=None, **kwargs):
    """Runs with ``manage.py check --deploy --database default``: asks each enabled
    cluster's slurmctld (``scontrol show config``) whether jobs are confined to the GPUs
    they were given; a cluster the adapter cannot ask (slurmrestd) is not judged."""
    from clusters.slurm import client_for
    from clusters.slurm.errors import SlurmError

    warnings = []
    for cluster in _enabled_clusters(databases) or []:
        try:
            constrained = client_for(cluster, timeout_s=10).devices_constrained()
        except SlurmError as error:
            warnings.append(
                Warning(
                    f"Cluster {cluster.name!r}: could not read its configuration ({error}), "
                    "so whether its jobs are confined to their GPUs is unknown.",
                    hint="Run the check again once slurmctld answers.",
                    id="clusters.W003",
                )
            )
            continue
        if constrained is False:
            warnings.append(
                Warning(
                    f"Cluster {cluster.name!r} does not confine jobs to their devices: a job "
                    "that asked for no GPU, billed at the CPU rate, can use every GPU of "
                    "its node.",
                    hint="Set TaskPlugin=task/cgroup (with ProctrackType=proctrack/cgroup) "
                    "in slurm.conf and ConstrainDevices=yes in cgroup.conf "
                    "(docs/DEPLOYMENT.md, 'GPUs a job may touch').",
                    id="clusters.W002",
                )
            )
    return warnings
