"""Reads of clusters and partitions shared by pages, the API and health checks."""

import datetime as dt

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from clusters.models import Cluster


def clusters_enabled() -> QuerySet[Cluster]:
    return Cluster.objects.filter(is_enabled=True).order_by("name")


def cluster_health() -> dict[str, dict]:
    """Each enabled cluster as the workers last found it: ``ok``, ``error``,
    ``latency_ms``, ``probed_at``. A probe older than three intervals (beat or the
    workers are not running) is not believed: the cluster reads as not ok."""
    stale_after = dt.timedelta(seconds=3 * settings.CLUSTER_PROBE_INTERVAL_S)
    now = timezone.now()
    health = {}
    for cluster in clusters_enabled().select_related("probe"):
        probe = getattr(cluster, "probe", None)
        if probe is None:
            health[cluster.name] = {"ok": False, "error": "not probed yet", "probed_at": None}
            continue
        age = now - probe.probed_at
        status = {
            "ok": probe.ok,
            "error": probe.error,
            "latency_ms": probe.latency_ms,
            "probed_at": probe.probed_at.isoformat(),
        }
        if age > stale_after:
            status["ok"] = False
            status["error"] = (
                f"no probe for {age.total_seconds():.0f} s (are beat and a worker running?)"
            )
        health[cluster.name] = status
    return health
