from celery import shared_task

from clusters.models import Cluster
from clusters.selectors import clusters_enabled
from clusters.services import cluster_probe, partitions_sync
from clusters.slurm import SlurmUnavailable


@shared_task(autoretry_for=(SlurmUnavailable,), retry_backoff=True, max_retries=5)
def partitions_sync_task(cluster_id: int) -> None:
    partitions_sync(cluster=Cluster.objects.get(id=cluster_id))


@shared_task
def partitions_sync_all_task() -> None:
    for cluster_id in clusters_enabled().values_list("id", flat=True):
        partitions_sync_task.delay(cluster_id)


# Expires: a probe that waited behind others in the queue says nothing about now.
@shared_task(expires=30)
def clusters_probe_task() -> None:
    for cluster in clusters_enabled():
        cluster_probe(cluster=cluster)
