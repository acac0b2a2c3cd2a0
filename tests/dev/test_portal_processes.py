"""dev/portal runs the web server, a Celery worker and beat, and stops them again."""

import datetime as dt
import json
import os
import signal
import stat
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

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


def status_pids(env: dict) -> dict[str, int]:
    """What `dev/portal status` reports up, with its pid."""
    rows = (line.split() for line in portal("status", env).stdout.splitlines())
    return {row[0]: int(row[3]) for row in rows if row[1:3] == ["up", "pid"]}


def heartbeat_after(moment: float) -> dict:
    """/healthz's worker report once it tells of a heartbeat later than ``moment``."""
    deadline = time.monotonic() + 60
    while True:
        _, body = get("/healthz")
        worker = json.loads(body)["worker"]
        at = worker.get("last_heartbeat")
        if at and dt.datetime.fromisoformat(at).timestamp() > moment:
            return worker
        assert time.monotonic() < deadline, f"no heartbeat after the kill: {worker}"
        time.sleep(0.5)


def test_a_killed_worker_is_started_again_by_its_supervisor(portal_env, tmp_path):
    started = portal("start", portal_env)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        killed = status_pids(portal_env)["worker"]
        heartbeat_after(0)
        # As the issue did it: the worker's whole process group, its pool included.
        os.killpg(killed, signal.SIGKILL)
        moment = time.time()
        deadline = time.monotonic() + 30
        while (again := status_pids(portal_env).get("worker")) in (None, killed):
            assert time.monotonic() < deadline, portal("status", portal_env).stdout
            time.sleep(0.2)
        assert not Path(f"/proc/{killed}").exists()  # reaped by its supervisor, no zombie
        assert heartbeat_after(moment)["ok"]
        repeated = portal("start", portal_env)
        assert "portal worker: already running" in repeated.stdout, repeated.stdout
        assert status_pids(portal_env)["worker"] == again
        log = tmp_path / "log" / "portal-worker.log"
        assert f"portal worker (pid {killed}) exited" in log.read_text()
    finally:
        stopped = portal("stop", portal_env)
    assert stopped.returncode == 0
    assert portal("status", portal_env).returncode == 1
    # Stopped for good: no supervisor starts it again.
    time.sleep(2)
    assert status_pids(portal_env) == {}


def test_a_pid_file_naming_a_dead_or_another_process_is_not_a_running_worker(portal_env, tmp_path):
    run = tmp_path / "portal"
    run.mkdir()
    zombie = subprocess.Popen(["true"])  # never waited for: a zombie while this test runs
    time.sleep(0.5)
    other = subprocess.Popen(["sleep", "60"])
    try:
        assert Path(f"/proc/{zombie.pid}/stat").read_text().split(") ")[1][0] == "Z"
        for pid in (zombie.pid, other.pid):
            (run / "portal-worker.pid").write_text(f"{pid}\n")
            os.kill(pid, 0)  # what the old liveness check asked: both answer it
            status = portal("status", portal_env)
            assert "worker   down" in status.stdout, status.stdout
    finally:
        zombie.wait()
        other.kill()
        other.wait()


def test_its_run_state_is_root_s_and_its_logs_no_one_else_s_to_read(portal_env, tmp_path):
    started = portal("start", portal_env)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        run = tmp_path / "portal"
        assert (run.stat().st_uid, stat.S_IMODE(run.stat().st_mode)) == (0, 0o755)
        names = {path.name for path in run.iterdir()}
        assert {
            "portal-worker.pid", "portal-worker.supervisor.pid", "portal-beat.pid",
            f"portal-web-{PORT}.pid", f"portal-web-{PORT}.supervisor.pid",
        } <= names  # fmt: skip
        assert any(name.startswith("celerybeat-schedule") for name in names), names
        for path in run.iterdir():
            assert path.stat().st_uid == 0, path
            assert not path.stat().st_mode & 0o022, path
        logs = {path.name: path.stat() for path in (tmp_path / "log").glob("portal-*.log")}
        assert {"portal-web.log", "portal-web-access.log", "portal-worker.log"} <= set(logs)
        for name, info in logs.items():
            assert stat.S_IMODE(info.st_mode) == 0o640, name
        status, _ = get("/login/")
        assert status == 200
        access = (tmp_path / "log" / "portal-web-access.log").stat()
        assert stat.S_IMODE(access.st_mode) == 0o640
    finally:
        portal("stop", portal_env)
