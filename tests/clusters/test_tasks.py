"""The partition sync tasks run on a real worker against the live cluster."""

import time

import pytest

from clusters.models import Partition
from clusters.services import cluster_register
from clusters.tasks import partitions_sync_all_task, partitions_sync_task

pytestmark = pytest.mark.slurm


def test_the_task_syncs_a_clusters_partitions(db, slurm_stack):
    cluster = cluster_register(name="portal-dev")
    partitions_sync_task(cluster.id)  # called directly: the task body is the service
    assert set(Partition.objects.filter(cluster=cluster).values_list("name", flat=True)) >= {
        "gpu",
        "debug",
    }


def test_the_beat_task_fans_out_to_a_worker(transactional_db, celery_worker):
    queue, _ = celery_worker
    cluster = cluster_register(name="portal-dev")
    partitions_sync_all_task.apply_async(queue=queue)
    deadline = time.monotonic() + 30
    while not Partition.objects.filter(cluster=cluster, name="gpu").exists():
        assert time.monotonic() < deadline, "the worker did not sync the partitions"
        time.sleep(0.2)
