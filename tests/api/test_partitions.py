"""GET partitions/: what jobs can ask for, as synced from Slurm, with billing weights."""

import pytest

from clusters.models import Cluster, Partition

pytestmark = pytest.mark.slurm


def test_it_lists_the_partitions_of_enabled_clusters(api, alice, dev_cluster):
    Partition.objects.filter(cluster=dev_cluster, name="gpu").update(billing_weight="2.5")
    off = Cluster.objects.create(name="retired", is_enabled=False)
    Partition.objects.create(cluster=off, name="old")
    response = api(alice).get("/api/v1/partitions/")
    assert response.status_code == 200
    partitions = {p["name"]: p for p in response.json()}
    assert "old" not in partitions
    debug, gpu = partitions["debug"], partitions["gpu"]
    assert debug["cluster"] == "portal-dev"
    assert gpu["is_default"] is True and debug["is_default"] is False
    assert debug["max_time_minutes"] == 60
    assert gpu["billing_weight"] == 2.5 and debug["billing_weight"] == 1.0
    assert debug["gpus_per_node"] == 8 and debug["gpu_type"] == "h200"
    assert set(debug) >= {
        "cluster",
        "name",
        "max_time_minutes",
        "gpus_per_node",
        "gpu_type",
        "billing_weight",
        "is_default",
    }


def test_it_filters_by_cluster(api, alice, dev_cluster):
    assert api(alice).get("/api/v1/partitions/?cluster=elsewhere").json() == []
    assert api(alice).get("/api/v1/partitions/?cluster=portal-dev").json()


@pytest.mark.django_db
def test_anonymous_gets_a_401(anonymous):
    assert anonymous.get("/api/v1/partitions/").status_code == 401
