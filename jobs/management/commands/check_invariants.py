import datetime as dt

from django.core.management.base import BaseCommand, CommandError
from redis.exceptions import RedisError

from clusters.selectors import clusters_enabled
from jobs.invariants import STUCK_AFTER, invariants_check, invariants_record


class Command(BaseCommand):
    help = (
        "Check the ledger, the portal's jobs and Slurm against each other; print every "
        "violation and warning, and exit 1 if there is a violation, 0 if there is none "
        "(warnings, such as a token copied onto someone else's job, do not fail it). "
        "A check of every cluster is kept for the metrics (portal_invariant_violations)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--cluster", help="Only this cluster (its Slurm ClusterName).")
        parser.add_argument(
            "--stuck-after-s",
            type=int,
            default=int(STUCK_AFTER.total_seconds()),
            help="Report jobs waiting to be submitted for longer than this (default: %(default)s).",
        )

    def handle(self, *args, cluster=None, stuck_after_s=0, **options):
        selected = None
        if cluster:
            selected = clusters_enabled().filter(name=cluster).first()
            if selected is None:
                raise CommandError(f"No enabled cluster is named {cluster!r}.")
        findings = invariants_check(
            cluster=selected, stuck_after=dt.timedelta(seconds=stuck_after_s)
        )
        if selected is None:
            try:
                invariants_record(findings)
            except RedisError as error:
                self.stderr.write(f"The outcome is not kept for the metrics: {error}")
        for warning in findings.warnings:
            self.stdout.write(f"warning: {warning}")
        for violation in findings.violations:
            self.stdout.write(str(violation))
        if findings.violations:
            raise CommandError(f"{len(findings.violations)} invariant violation(s).")
        self.stdout.write("No invariant violations.")
