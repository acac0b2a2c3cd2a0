"""The Celery app runs tasks on a real worker through the Redis broker."""

import time

from django.core.cache import cache

from portal import testenv
from portal.celery import app
from portal.health import HEARTBEAT_KEY, worker_status
from portal.tasks import heartbeat_task


def test_the_app_speaks_json_only_and_bounds_task_time():
    assert app.conf.task_serializer == "json"
    assert app.conf.accept_content == ["json"]
    assert app.conf.task_time_limit > app.conf.task_soft_time_limit > 0
    assert app.conf.task_acks_late is True
    assert "heartbeat" in app.conf.beat_schedule


def test_a_worker_runs_the_heartbeat_and_health_reports_it(celery_worker):
    queue, hostname = celery_worker
    heartbeat_task.apply_async(queue=queue)
    deadline = time.monotonic() + 20
    while (cache.get(HEARTBEAT_KEY) or {}).get("worker") != hostname:
        assert time.monotonic() < deadline, "the worker did not run the heartbeat task"
        time.sleep(0.1)
    status = worker_status()
    assert status["ok"] is True
    assert status["worker"] == hostname


def test_tests_use_redis_databases_of_their_own(settings):
    broker, cache_url = settings.BROKER_URL, settings.CACHE_URL
    assert broker == f"redis://127.0.0.1:6379/{testenv.BROKER_DB}"
    assert cache_url == f"redis://127.0.0.1:6379/{testenv.CACHE_DB}"
    assert testenv.BROKER_DB >= 2 and testenv.CACHE_DB == testenv.BROKER_DB + 1
    # …reached with the stack's Redis password, which the settings add.
    for url in (settings.CELERY_BROKER_URL, settings.CACHES["default"]["LOCATION"]):
        assert settings.REDIS_PASSWORD and f":{settings.REDIS_PASSWORD}@127.0.0.1" in url
