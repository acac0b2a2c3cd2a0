"""Reachability of the services the portal depends on, for /healthz and checks."""

import datetime as dt
import time

import redis
from django.conf import settings
from django.core.cache import cache
from django.db import DatabaseError, connection
from django.utils import timezone

from clusters.selectors import clusters_enabled
from clusters.slurm import client_for

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


def cluster_statuses() -> dict[str, dict]:
    statuses: dict[str, dict] = {}
    try:
        clusters = list(clusters_enabled())
    except DatabaseError:
        return statuses
    for cluster in clusters:
        client = client_for(cluster, timeout_s=settings.SLURM_HEALTH_TIMEOUT_S)
        statuses[cluster.name] = {"backend": cluster.backend, **_timed(client.ping)}
    return statuses


def heartbeat_record(*, worker: str) -> None:
    cache.set(HEARTBEAT_KEY, {"at": timezone.now().isoformat(), "worker": worker}, timeout=None)


def worker_status() -> dict:
    """When a worker last ran the beat's heartbeat task; informational only."""
    try:
        last = cache.get(HEARTBEAT_KEY)
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

    Database, broker and every enabled cluster must be reachable; the worker
    heartbeat is reported but does not decide, since it lags a fresh start.
    """
    checks = {
        "database": database_status(),
        "broker": broker_status(),
        "clusters": cluster_statuses(),
    }
    healthy = (
        checks["database"]["ok"]
        and checks["broker"]["ok"]
        and all(status["ok"] for status in checks["clusters"].values())
    )
    return healthy, {**checks, "worker": worker_status()}
