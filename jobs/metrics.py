"""The jobs' metrics: how long submissions and pending take, observed by the workers
where they happen, and the queue, the syncs, the records of Slurm's listings the portal
refused and the last invariant check, read from the database when Prometheus scrapes
(portal/metrics.py).

A few aggregate queries per scrape, however many jobs there are; finished jobs are not
counted (their number only grows, and counting them would read the whole table).
"""

import datetime as dt

from django.db.models import Count, Min
from django.utils import timezone
from prometheus_client import Histogram
from prometheus_client.core import GaugeMetricFamily
from redis.exceptions import RedisError

from clusters.models import Cluster, RefusedRecord
from clusters.selectors import refused_records_recent
from jobs.models import UNFINISHED_STATES, Job
from jobs.states import JobState

SUBMISSION_SECONDS = Histogram(
    "portal_job_submission_seconds",
    "From a job's creation to its Slurm id recorded: the submission's latency, waits "
    "for a worker and retries included.",
    ["cluster"],
    buckets=(0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600),
)
PENDING_SECONDS = Histogram(
    "portal_job_pending_seconds",
    "From a job's submission to Slurm to its start, observed when it starts.",
    ["cluster"],
    buckets=(10, 30, 60, 300, 900, 1800, 3600, 7200, 14400, 43200, 86400, 259200, 604800),
)
WAITING_SUBMISSION = (JobState.NEW, JobState.SUBMITTING)


def submission_observed(*, cluster: str, created_at: dt.datetime, at: dt.datetime) -> None:
    SUBMISSION_SECONDS.labels(cluster=cluster).observe(max((at - created_at).total_seconds(), 0))


def start_observed(
    *, cluster: str, submitted_at: dt.datetime | None, started_at: dt.datetime | None
) -> None:
    """A job started: how long it pended (nothing when a time is unknown)."""
    if submitted_at is None or started_at is None:
        return
    PENDING_SECONDS.labels(cluster=cluster).observe(
        max((started_at - submitted_at).total_seconds(), 0)
    )


def job_metric_families() -> list[GaugeMetricFamily]:
    now = timezone.now()
    jobs = GaugeMetricFamily(
        "portal_jobs",
        "Unfinished portal jobs by cluster and state (new, submitting, pending, running, "
        "suspended).",
        labels=["cluster", "state"],
    )
    waiting = GaugeMetricFamily(
        "portal_job_submission_oldest_waiting_seconds",
        "How long the oldest job still waiting to reach Slurm (new or submitting) has "
        "waited since it was made; 0 when none waits.",
        labels=["cluster"],
    )
    queue_lag = GaugeMetricFamily(
        "portal_queue_sync_lag_seconds",
        "Seconds since the cluster's queue was last read and applied (since the cluster "
        "was added, before the first time).",
        labels=["cluster"],
    )
    accounting_lag = GaugeMetricFamily(
        "portal_accounting_lag_seconds",
        "Seconds since the cluster's accounting was last ingested (since the cluster was "
        "added, before the first time).",
        labels=["cluster"],
    )
    refused = GaugeMetricFamily(
        "portal_invariant_refused_records",
        "Records of the cluster's queue or accounting listing that the portal refused "
        "(unreadable, or a job or run listed twice) and Slurm listed within the last day: "
        "check_invariants's refused-record warnings, by cluster and listing.",
        labels=["cluster", "listing"],
    )
    clusters = Cluster.objects.order_by("name").values_list(
        "pk", "name", "is_enabled", "created_at", "sync__queue_synced_at",
        "sync__accounting_synced_at",
    )  # fmt: skip
    names = {}
    counts: dict[tuple[str, str], int] = {}
    oldest: dict[str, dt.datetime] = {}
    refused_counts: dict[tuple[str, str], int] = {}
    for pk, name, enabled, created_at, queue_synced_at, accounting_synced_at in clusters:
        names[pk] = name
        if not enabled:
            continue
        counts.update({(name, state): 0 for state in UNFINISHED_STATES})
        refused_counts.update({(name, listing): 0 for listing in RefusedRecord.Listing.values})
        queue_lag.add_metric([name], _seconds_since(queue_synced_at or created_at, now))
        accounting_lag.add_metric([name], _seconds_since(accounting_synced_at or created_at, now))
    unfinished = (
        Job.objects.filter(state__in=UNFINISHED_STATES)
        .values("cluster_id", "state")
        .annotate(count=Count("id"), oldest=Min("created_at"))
        .order_by()
    )
    for row in unfinished:
        name = names[row["cluster_id"]]
        counts[(name, row["state"])] = row["count"]
        if row["state"] in WAITING_SUBMISSION:
            oldest[name] = min(oldest.get(name, row["oldest"]), row["oldest"])
    for (name, state), count in sorted(counts.items()):
        jobs.add_metric([name, state], count)
    for name in sorted({name for name, _ in counts}):
        waiting.add_metric([name], _seconds_since(oldest[name], now) if name in oldest else 0)
    recent = (
        refused_records_recent(now=now)
        .values("cluster_id", "listing")
        .annotate(count=Count("id"))
        .order_by()
    )
    for seen in recent:
        key = (names[seen["cluster_id"]], seen["listing"])
        if key in refused_counts:  # a disabled cluster's are not read again
            refused_counts[key] = seen["count"]
    for (name, listing), count in sorted(refused_counts.items()):
        refused.add_metric([name, listing], count)
    return [jobs, waiting, queue_lag, accounting_lag, refused, *_invariant_families()]


def _seconds_since(at: dt.datetime, now: dt.datetime) -> float:
    return max((now - at).total_seconds(), 0)


def _invariant_families() -> list[GaugeMetricFamily]:
    """The last check of every cluster (``manage.py check_invariants``); none before it,
    or while the cache does not answer."""
    # Here, not at the top: the check reads accounting's rules, and accounting observes
    # through this module.
    from jobs.invariants import invariants_last

    try:
        last = invariants_last()
    except RedisError:
        return []
    if last is None:
        return []
    return [
        GaugeMetricFamily(
            "portal_invariant_violations",
            "Violations the last check_invariants of every cluster found (the portal is "
            "unsound while above 0).",
            value=last["violations"],
        ),
        GaugeMetricFamily(
            "portal_invariant_warnings",
            "Warnings the last check_invariants of every cluster found (someone else's "
            "doing, e.g. a copied token).",
            value=last["warnings"],
        ),
        GaugeMetricFamily(
            "portal_invariants_checked_timestamp_seconds",
            "When the last check_invariants of every cluster ran (Unix time).",
            value=last["at"],
        ),
    ]
