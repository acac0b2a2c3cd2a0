"""Prometheus metrics at ``/metrics``: who may scrape, and what a scrape answers.

A scrape answers two kinds of series (README "Metrics" lists them):

- what happened, counted by the processes where it happened (web workers, Celery's
  pool processes): log-in failures, mails, webhook deliveries (``accounts.metrics``),
  the submission and pending histograms (``jobs.metrics``) and Celery's task outcomes
  (here). Their files are added up over every process of the host
  (``portal.metric_files``);
- what is, read from the database at scrape time by a few aggregate queries: jobs by
  state, the sync lags, the last invariant check (``jobs.metrics``), the ledger
  (``accounts.metrics``) and Slurm's reachability (``clusters.metrics``); and the
  workers' last heartbeat, read from the cache.

The endpoint is off (404) until a scrape token (``PORTAL_METRICS_TOKEN``) or an address
allow-list (``PORTAL_METRICS_ALLOWED_NETWORKS``) is set; with both, a scrape needs
both. The address is the client's as ``PORTAL_PROXY_COUNT`` says, the one a login
throttle counts: behind a proxy, the address the proxy saw.
"""

import datetime as dt
import ipaddress
import logging
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from celery.signals import task_failure, task_retry, task_success
from django.conf import settings
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from prometheus_client import REGISTRY, CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.multiprocess import MultiProcessCollector

from accounts.login_throttle import client_ip
from accounts.metrics import ledger_metric_families
from clusters.metrics import cluster_metric_families
from jobs.metrics import job_metric_families
from portal.health import heartbeat_last
from portal.metric_files import metric_files, own_folder
from portal.security import bearer_token_matches

logger = logging.getLogger(__name__)

CELERY_TASKS = Counter(
    "portal_celery_tasks",
    "Runs of Celery tasks by task name and how they ended: success, failure, or retry "
    "(the task is tried again later).",
    ["task", "outcome"],
)


def _task_name(sender: Any) -> str:
    return str(getattr(sender, "name", None) or "unknown")


@task_success.connect
def _count_success(sender: Any = None, **kwargs: Any) -> None:
    CELERY_TASKS.labels(task=_task_name(sender), outcome="success").inc()


@task_failure.connect
def _count_failure(sender: Any = None, **kwargs: Any) -> None:
    CELERY_TASKS.labels(task=_task_name(sender), outcome="failure").inc()


@task_retry.connect
def _count_retry(sender: Any = None, **kwargs: Any) -> None:
    CELERY_TASKS.labels(task=_task_name(sender), outcome="retry").inc()


class DatabaseCollector:
    """The series read from the database at scrape time. While the database does not
    answer, only ``portal_database_up`` 0: the counts of the processes still serve."""

    def collect(self) -> Iterable[Metric]:
        families: list[Metric] = []
        try:
            families += job_metric_families()
            families += ledger_metric_families()
            families += cluster_metric_families()
        except DatabaseError as error:
            logger.warning("metrics: the database does not answer: %s", error)
            families, read = [], False
        else:
            read = True
        yield GaugeMetricFamily(
            "portal_database_up",
            "1 when this scrape read the database; 0 when it could not (the series read "
            "from it are missing then).",
            value=1 if read else 0,
        )
        yield from families


class HeartbeatCollector:
    """When a worker last ran beat's heartbeat task, from the cache where it is kept
    (``portal.health``): a worker or beat that is down stops it. 0 before any worker has
    run it; absent while the cache does not answer (the broker is down with it)."""

    def collect(self) -> Iterable[Metric]:
        try:
            last = heartbeat_last()
        except Exception as error:  # noqa: BLE001 - any cache failure: no figure
            logger.warning("metrics: the cache does not answer: %s", error)
            return
        at = dt.datetime.fromisoformat(last["at"]).timestamp() if last else 0.0
        yield GaugeMetricFamily(
            "portal_worker_heartbeat_timestamp_seconds",
            "When a worker last ran beat's heartbeat task (Unix time); 0 before any has.",
            value=at,
        )


class FilesCollector:
    """The counts of every process of the host, from their files (portal.metric_files)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def collect(self) -> Iterable[Metric]:
        return MultiProcessCollector.merge(metric_files(self.root), accumulate=True)


class OwnCountsCollector:
    """This process's own counts, kept in its memory (no metrics folder: one process)."""

    def collect(self) -> Iterable[Metric]:
        return REGISTRY.collect()


def metrics_folder() -> Path | None:
    """Where the host's processes keep their counts: ``PORTAL_METRICS_DIR``, or this
    process's own folder alone; None when counts live in this process's memory."""
    if settings.METRICS_DIR:
        return Path(settings.METRICS_DIR)
    return own_folder()


def exposition() -> bytes:
    """Every series, in Prometheus's text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector())
    registry.register(HeartbeatCollector())
    folder = metrics_folder()
    registry.register(FilesCollector(folder) if folder else OwnCountsCollector())
    return generate_latest(registry)


def scrape_refusal(request: HttpRequest) -> int | None:
    """None when the request may scrape; else the status it is refused with: 404 while
    the endpoint is off, 403 from an address outside the allow-list, 401 without the
    right token."""
    token, networks = settings.METRICS_TOKEN, settings.METRICS_ALLOWED_NETWORKS
    if not token and not networks:
        return 404
    if networks and not _address_allowed(request, networks):
        return 403
    if token and not bearer_token_matches(request, token):
        return 401
    return None


def _address_allowed(request: HttpRequest, networks: list[str]) -> bool:
    address = client_ip(request)
    if address is None:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return any(address in ipaddress.ip_network(network) for network in networks)


@require_safe
@never_cache
def metrics_view(request: HttpRequest) -> HttpResponse:
    refused = scrape_refusal(request)
    if refused is not None:
        response = HttpResponse(status=refused, content_type="text/plain")
        if refused == 401:
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    try:
        body = exposition()
    except (OSError, ValueError, struct.error) as error:
        # A metric file that cannot be read (cut short when its disk filled up): say so
        # rather than answer half the series.
        logger.error("metrics: cannot read the metric files: %s", error)
        return HttpResponse(
            "The metric files cannot be read.\n", status=503, content_type="text/plain"
        )
    return HttpResponse(body, content_type=CONTENT_TYPE_PLAIN_0_0_4)
