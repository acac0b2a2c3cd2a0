from django.core.management.base import BaseCommand, CommandError

from clusters.selectors import clusters_enabled
from clusters.services import partitions_sync
from clusters.slurm import SlurmError


class Command(BaseCommand):
    help = "Read every enabled cluster's partitions from Slurm into the portal."

    def add_arguments(self, parser):
        parser.add_argument("--cluster", help="Only this cluster (its Slurm ClusterName).")

    def handle(self, *args, cluster=None, **options):
        clusters = clusters_enabled()
        if cluster:
            clusters = clusters.filter(name=cluster)
            if not clusters:
                raise CommandError(f"No enabled cluster is named {cluster!r}.")
        for each in clusters:
            try:
                partitions = partitions_sync(cluster=each)
            except SlurmError as exc:
                raise CommandError(f"{each.name}: {exc}") from exc
            names = ", ".join(p.name for p in partitions) or "none"
            self.stdout.write(f"{each.name}: {len(partitions)} partitions ({names})")
