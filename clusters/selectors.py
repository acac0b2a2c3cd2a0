"""Reads of clusters and partitions shared by pages, the API and health checks."""

import datetime as dt
from collections.abc import Collection

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db.models import CharField, F, Func, JSONField, QuerySet, Value
from django.utils import timezone
from django.utils.translation import gettext as _

from clusters.errors import NoSuchCluster
from clusters.models import Cluster, ClusterProbe, ClusterStatus, Partition, RefusedRecord


def clusters_enabled() -> QuerySet[Cluster]:
    return Cluster.objects.filter(is_enabled=True).order_by("name")


def partitions_enabled() -> QuerySet[Partition]:
    """The partitions of the enabled clusters, each cluster's default first."""
    return (
        Partition.objects.filter(cluster__is_enabled=True)
        .select_related("cluster")
        .order_by("-is_default", "name")
    )


def cluster_named(name: str | None) -> Cluster:
    """The enabled cluster ``name``; left out, the only one. NoSuchCluster says which
    to choose otherwise."""
    if name:
        try:
            return clusters_enabled().get(name=name)
        except Cluster.DoesNotExist:
            raise NoSuchCluster(_("There is no cluster %(name)s.") % {"name": repr(name)}) from None
    found = list(clusters_enabled()[:2])
    if len(found) != 1:
        raise NoSuchCluster(_("Choose a cluster: the portal has more than one (or none yet)."))
    return found[0]


def cluster_health() -> dict[str, dict]:
    """Each enabled cluster as the workers last found it (see ``cluster_status``)."""
    return {cluster.name: status for cluster, status in clusters_probed()}


def clusters_probed() -> list[tuple[Cluster, dict]]:
    """Each enabled cluster with its status as the workers last found it (one query)."""
    now = timezone.now()
    return [
        (cluster, _status(getattr(cluster, "probe", None), now))
        for cluster in clusters_enabled().select_related("probe")
    ]


def cluster_status(cluster: Cluster) -> dict:
    """The cluster as the workers' last probe found it: ``ok``, ``error``,
    ``latency_ms``, ``probed_at``. A probe older than three intervals (beat or the
    workers are not running) is not believed: the cluster reads as not ok."""
    probe = ClusterProbe.objects.filter(cluster=cluster).first()
    return _status(probe, timezone.now())


def _status(probe: ClusterProbe | None, now: dt.datetime) -> dict:
    if probe is None:
        return {"ok": False, "error": "not probed yet", "probed_at": None}
    status = {
        "ok": probe.ok,
        "error": probe.error,
        "latency_ms": probe.latency_ms,
        "probed_at": probe.probed_at.isoformat(),
    }
    age_s = (now - probe.probed_at).total_seconds()
    if age_s > 3 * settings.CLUSTER_PROBE_INTERVAL_S:
        status["ok"] = False
        status["error"] = f"no probe for {age_s:.0f} s (are beat and a worker running?)"
    return status


def cluster_status_due(cluster: Cluster) -> bool:
    """Whether the cluster's status is older than ``PORTAL_CLUSTER_STATUS_INTERVAL_S``
    (or missing): the queue sync then reads the nodes too."""
    since = timezone.now() - dt.timedelta(seconds=settings.CLUSTER_STATUS_INTERVAL_S)
    return not ClusterStatus.objects.filter(cluster=cluster, taken_at__gt=since).exists()


class _WithoutKeys(Func):
    """A JSON object without the keys of a text array (PostgreSQL's ``jsonb - text[]``)."""

    template = "(%(expressions)s)"
    arg_joiner = " - "
    output_field = JSONField()


def cluster_statuses(*, leaving_out: Collection[str] = ()) -> list[ClusterStatus]:
    """The last status of each enabled cluster that has one, by cluster name; the
    snapshots without the keys ``leaving_out``, which the database leaves out (the
    nodes are most of a snapshot: a reader who may not see them does not fetch them)."""
    statuses = (
        ClusterStatus.objects.filter(cluster__is_enabled=True)
        .select_related("cluster")
        .order_by("cluster__name")
    )
    if not leaving_out:
        return list(statuses)
    keys = Value(sorted(leaving_out), output_field=ArrayField(CharField()))
    found: list[ClusterStatus] = []
    for status in statuses.defer("snapshot").annotate(shown=_WithoutKeys(F("snapshot"), keys)):
        status.snapshot = status.shown
        found.append(status)
    return found


def partition_pending_jobs(cluster_id: int, partition: str) -> int | None:
    """How many jobs pend in ``partition`` by the cluster's last status (an array's tasks
    one each); None when there is none. Only that part of the snapshot is read."""
    partitions = (
        ClusterStatus.objects.filter(cluster_id=cluster_id)
        .values_list("snapshot__partitions", flat=True)
        .first()
    )
    for one in partitions or []:
        if isinstance(one, dict) and one.get("name") == partition:
            pending = one.get("pending_jobs")
            return pending if isinstance(pending, int) else None
    return None


# How long a refused record counts as current: seen again within this, it is still listed.
REFUSED_RECENT = dt.timedelta(days=1)


def refused_records_recent(
    *, clusters: Collection[Cluster] | None = None, now: dt.datetime | None = None
) -> QuerySet[RefusedRecord]:
    """The records Slurm's listings gave that the portal refused, seen within
    ``REFUSED_RECENT``, most recently seen first."""
    since = (now or timezone.now()) - REFUSED_RECENT
    found = RefusedRecord.objects.filter(last_seen_at__gte=since).select_related("cluster")
    if clusters is not None:
        found = found.filter(cluster__in=clusters)
    return found.order_by("-last_seen_at")
