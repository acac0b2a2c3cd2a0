"""Partitions are read from the live dev cluster; the billing weight stays the portal's."""

from decimal import Decimal

import pytest

from clusters.models import Partition
from clusters.services import cluster_register, partitions_sync

pytestmark = pytest.mark.slurm


def test_it_lists_the_dev_clusters_eight_h200_gpus(db, slurm_stack):
    cluster = cluster_register(name="portal-dev")
    partitions_sync(cluster=cluster)
    partitions = {p.name: p for p in Partition.objects.filter(cluster=cluster)}
    assert {"gpu", "debug"} <= set(partitions)
    gpu, debug = partitions["gpu"], partitions["debug"]
    assert gpu.is_default and gpu.is_up
    assert gpu.max_time_minutes == 7 * 24 * 60
    assert debug.max_time_minutes == 60
    assert gpu.gpu_type == "h200"
    assert max(p.total_gpus for p in partitions.values()) == 8


def test_a_resync_keeps_the_billing_weight_and_marks_vanished_partitions_down(db, slurm_stack):
    cluster = cluster_register(name="portal-dev")
    partitions_sync(cluster=cluster)
    Partition.objects.filter(cluster=cluster, name="gpu").update(billing_weight=Decimal("2.5"))
    Partition.objects.create(cluster=cluster, name="retired", is_up=True)
    partitions_sync(cluster=cluster)
    assert Partition.objects.get(cluster=cluster, name="gpu").billing_weight == Decimal("2.5")
    assert Partition.objects.get(cluster=cluster, name="retired").is_up is False
    assert Partition.objects.filter(cluster=cluster, name="gpu").count() == 1
