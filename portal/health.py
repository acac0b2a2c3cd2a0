"""Reachability of the services the portal depends on, for /healthz and checks.

The database and the broker are asked directly (cheap, no Slurm); each cluster's
reachability is what the workers' last probe found (``clusters.tasks``): the web
tier runs no Slurm command to answer, however often it is asked.
"""

import datetime as dt
import time

import redis
from django.conf import settings
from django.core.cache import cache
from django.db import DatabaseError, connection
from django.utils import timezone

from clusters.selectors import cluster_health

HEARTBEAT_KEY = "portal:worker-heartbeat"


def _timed(probe) -> dict:
    started = time.monotonic()
    try:
        probe()
    except Exception as exc:  # noqa: BLE001 - health reports any failure as "down"
        status = {"ok": False, "error": str(exc) or type(exc).__name__}
    else:
        status = {"ok": True}
    status["latency_ms"] = round((time.monotonic() - started) * 1000, 1)
    return status


def database_status() -> dict:
    def probe() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
        except DatabaseError:
            connection.close()  # let the next request reconnect cleanly
            raise

    return _timed(probe)


def broker_status() -> dict:
    def probe() -> None:
        client = redis.Redis.from_url(
            settings.CELERY_BROKER_URL, socket_connect_timeout=2, socket_timeout=2
        )
        try:
            client.ping()
        finally:
            client.close()

    return _timed(probe)


def heartbeat_record(*, worker: str) -> None:
    cache.set(HEARTBEAT_KEY, {"at": timezone.now().isoformat(), "worker": worker}, timeout=None)


def heartbeat_last() -> dict | None:
    """The last heartbeat (``at``, an ISO time, and ``worker``), or None before any;
    the cache's error when it does not answer."""
    return cache.get(HEARTBEAT_KEY)


def worker_status() -> dict:
    """When a worker last ran the beat's heartbeat task; informational only."""
    try:
        last = heartbeat_last()
    except Exception as exc:  # noqa: BLE001 - the broker status already says why
        return {"ok": False, "error": str(exc)}
    if last is None:
        return {"ok": False, "error": "no heartbeat yet", "last_heartbeat": None}
    age_s = (timezone.now() - dt.datetime.fromisoformat(last["at"])).total_seconds()
    return {
        "ok": age_s <= 3 * settings.PORTAL_HEARTBEAT_INTERVAL_S,
        "last_heartbeat": last["at"],
        "worker": last["worker"],
        "age_s": round(age_s, 1),
    }


def health_report() -> tuple[bool, dict]:
    """Whether the portal can serve, and the per-service report behind that verdict.

    Database and broker decide: without them nothing works. A cluster that is down
    is named (``unhealthy_clusters``) but does not fail the portal, whose other
    clusters, pages and books still work (a load balancer would otherwise take every
    web node out). The worker heartbeat is reported; it lags a fresh start.
    """
    database = database_status()
    clusters: dict[str, dict] = {}
    if database["ok"]:
        try:
            clusters = cluster_health()
        except DatabaseError as error:
            database = {"ok": False, "error": str(error)}
    checks = {"database": database, "broker": broker_status(), "clusters": clusters}
    healthy = checks["database"]["ok"] and checks["broker"]["ok"]
    unhealthy = sorted(name for name, status in clusters.items() if not status["ok"])
    return healthy, {**checks, "unhealthy_clusters": unhealthy, "worker": worker_status()}
