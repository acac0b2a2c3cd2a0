"""Every write to clusters and partitions."""

from django.db import transaction
from django.utils import timezone

from clusters.models import Cluster, Partition
from clusters.slurm import client_for


def cluster_register(*, name: str, backend: str = Cluster.Backend.CLI) -> Cluster:
    """Register a cluster by its Slurm ClusterName; an existing one is returned unchanged."""
    cluster, _ = Cluster.objects.get_or_create(name=name, defaults={"backend": backend})
    return cluster


def partitions_sync(*, cluster: Cluster) -> list[Partition]:
    """Make the cluster's partitions match what Slurm reports.

    Limits and GPU counts come from Slurm; the billing weight stays the
    portal's. A partition Slurm no longer lists is kept (jobs refer to it)
    but marked down.
    """
    reported = client_for(cluster).list_partitions()  # Slurm first, outside the transaction
    now = timezone.now()
    with transaction.atomic():
        synced = []
        for info in reported:
            partition, _ = Partition.objects.update_or_create(
                cluster=cluster,
                name=info.name,
                defaults={
                    "is_default": info.is_default,
                    "is_up": info.is_up,
                    "max_time_minutes": info.max_time_minutes,
                    "nodes": info.nodes,
                    "gpus_per_node": info.gpus_per_node,
                    "gpu_type": info.gpu_type,
                    "total_gpus": info.total_gpus,
                    "synced_at": now,
                },
            )
            synced.append(partition)
        cluster.partitions.exclude(name__in=[info.name for info in reported]).update(
            is_up=False, synced_at=now
        )
    return synced
