"""dev/portal runs the web server, a Celery worker and beat, and stops them again."""

import json
import os
import subprocess
import time
import urllib.error
import urllib.request

import pytest
from django.conf import settings
from django.db import connection

from tests.conftest import REPO

PORT = 8765


HEALTH_TOKEN = "processes-test-token"


def get(path: str) -> tuple[int, bytes]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{PORT}{path}", headers={"Authorization": f"Bearer {HEALTH_TOKEN}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@pytest.fixture
def portal_env(transactional_db, tmp_path):
    db = connection.settings_dict
    return {
        **os.environ,
        "PORTAL_STACK_DIR": str(tmp_path),
        "PORTAL_HTTP_PORT": str(PORT),
        "PORTAL_DATABASE_URL": f"postgresql://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        # A broker and cache of their own, so a `make up` worker cannot take the tasks.
        "PORTAL_BROKER_URL": "redis://127.0.0.1:6379/5",
        "PORTAL_CACHE_URL": "redis://127.0.0.1:6379/6",
        "PORTAL_HEARTBEAT_INTERVAL_S": "1",
        "PORTAL_HEALTH_TOKEN": HEALTH_TOKEN,  # /healthz's detail: the worker's heartbeat
        # The stack's passwords: its secrets are not under this test's PORTAL_STACK_DIR.
        "PORTAL_DATABASE_PASSWORD": settings.DATABASE_PASSWORD,
        "PORTAL_REDIS_PASSWORD": settings.REDIS_PASSWORD,
    }


def portal(command: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(REPO / "dev" / "portal"), command],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_it_starts_serves_and_stops_idempotently(portal_env):
    started = portal("start", portal_env)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        again = portal("start", portal_env)
        assert again.returncode == 0
        assert again.stdout.count("already running") == 3
        assert portal("status", portal_env).returncode == 0

        status, body = get("/login/")
        assert status == 200 and b"Log in" in body
        status, css = get("/static/css/portal.css")
        assert status == 200 and b"--accent" in css

        deadline = time.monotonic() + 30
        while True:
            status, body = get("/healthz")
            report = json.loads(body)
            if report["worker"]["ok"]:
                break
            assert time.monotonic() < deadline, f"beat → worker heartbeat never arrived: {report}"
            time.sleep(0.5)
        assert status == 200
        assert report["worker"]["worker"].startswith("worker@")
    finally:
        stopped = portal("stop", portal_env)
    assert stopped.returncode == 0
    assert portal("status", portal_env).returncode == 1
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{PORT}/healthz", timeout=2)
