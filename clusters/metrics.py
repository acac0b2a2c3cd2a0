"""The clusters' metrics, read from the database when Prometheus scrapes (portal/metrics.py).

Reachability is what the workers' last probe found (``clusters.selectors``): a scrape,
like a page view, runs no Slurm command.
"""

from prometheus_client.core import GaugeMetricFamily

from clusters.selectors import clusters_probed


def cluster_metric_families() -> list[GaugeMetricFamily]:
    up = GaugeMetricFamily(
        "portal_slurm_up",
        "1 when the cluster's controller answered the workers' last probe, which is recent "
        "(three probe intervals); 0 otherwise.",
        labels=["cluster", "backend"],
    )
    latency = GaugeMetricFamily(
        "portal_slurm_probe_seconds",
        "How long the workers' last probe of the cluster's controller took.",
        labels=["cluster", "backend"],
    )
    for cluster, status in clusters_probed():
        labels = [cluster.name, cluster.backend]
        up.add_metric(labels, 1.0 if status["ok"] else 0.0)
        if status.get("latency_ms") is not None:
            latency.add_metric(labels, status["latency_ms"] / 1000)
    return [up, latency]
