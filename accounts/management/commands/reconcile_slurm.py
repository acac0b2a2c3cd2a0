from django.core.management.base import BaseCommand, CommandError

from accounts.reconcile import reconcile
from clusters.locks import one_run_per_cluster
from clusters.selectors import clusters_enabled


class Command(BaseCommand):
    help = (
        "Make Slurm's accounts, associations and GPU-minute limits match the portal. "
        "With --dry-run, print the drift and change nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="Report, change nothing.")
        parser.add_argument("--cluster", help="Only this cluster (its Slurm ClusterName).")

    def handle(self, *args, dry_run=False, cluster=None, **options):
        clusters = clusters_enabled()
        if cluster:
            clusters = clusters.filter(name=cluster)
            if not clusters:
                raise CommandError(f"No enabled cluster is named {cluster!r}.")
        failed = False
        for each in clusters:
            # One run of a cluster at a time, whichever host it is on (beat's task too).
            with one_run_per_cluster("reconcile", each.id) as alone:
                if not (alone or dry_run):
                    failed = True
                    self.stderr.write(f"{each.name}: another reconcile run is under way")
                    continue
                report = reconcile(cluster=each, dry_run=dry_run)
            verb = "would change" if dry_run else "changed"
            self.stdout.write(f"{each.name}: {verb} {len(report.actions)} thing(s)")
            for action in report.actions:
                self.stdout.write(f"  {action}")
            for warning in report.warnings:
                self.stderr.write(f"  warning: {warning}")
            for error in report.errors:
                failed = True
                self.stderr.write(f"  error: {error}")
        if failed:
            raise CommandError("Some changes were not made (see above); the next run makes them.")
