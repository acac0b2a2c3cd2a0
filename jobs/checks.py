"""System checks for the job settings (ids ``jobs.E…``)."""

from django.conf import settings
from django.core.checks import Error, register


@register()
def check_job_settings(app_configs, **kwargs):
    errors = []
    # A claim must outlast one attempt (a token look-up and an sbatch, each up to the
    # command timeout), or a second worker could take the job while the first submits.
    needed = 2 * settings.SLURM_COMMAND_TIMEOUT_S + 10
    claim_s = settings.JOB_SUBMIT_CLAIM_S
    if claim_s < needed:
        errors.append(
            Error(
                f"PORTAL_JOB_SUBMIT_CLAIM_S={claim_s} is shorter than one "
                f"submission attempt may take ({needed} s with "
                f"PORTAL_SLURM_COMMAND_TIMEOUT_S={settings.SLURM_COMMAND_TIMEOUT_S}).",
                hint=f"Set PORTAL_JOB_SUBMIT_CLAIM_S to at least {needed}.",
                id="jobs.E001",
            )
        )
    for root in settings.JOB_ROOTS:
        if not root.startswith("/") and not root.startswith("{home}"):
            errors.append(
                Error(
                    f"PORTAL_JOB_ROOTS has {root!r}, which is not an absolute path.",
                    hint="Use absolute paths; {user} and {home} are replaced per job owner.",
                    id="jobs.E002",
                )
            )
    return errors
