"""Reads of clusters and partitions shared by pages, the API and health checks."""

from django.db.models import QuerySet

from clusters.models import Cluster


def clusters_enabled() -> QuerySet[Cluster]:
    return Cluster.objects.filter(is_enabled=True).order_by("name")
