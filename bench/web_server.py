"""The portal's web tier for a benchmark: gunicorn on a free loopback port, on the
benchmark's own database (the environment that ``own_database.use`` set)."""

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def serving(
    *, workers: int, log: Path, options: tuple[str, ...] = (), **env: str
) -> Iterator[tuple[str, subprocess.Popen]]:
    """gunicorn with ``workers`` sync workers, more command-line ``options`` and ``env``
    added to its environment; yields (its URL, its process) once it answers, and stops
    it afterwards."""
    port = free_port()
    gunicorn = Path(sys.executable).parent / "gunicorn"
    log.parent.mkdir(exist_ok=True)
    with log.open("w") as log_file:
        process = subprocess.Popen(
            [str(gunicorn), "portal.wsgi:application", "--chdir", str(REPO),
             "--bind", f"127.0.0.1:{port}", "--workers", str(workers), "--timeout", "60",
             *options],
            env={**os.environ, "PORTAL_LOG_LEVEL": "WARNING", **env},
            stdout=log_file, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while not _answers(url):
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"gunicorn did not start; see {log}")
            time.sleep(0.2)
        yield url, process
    finally:
        stop_process(process)


def stop_process(process: subprocess.Popen) -> None:
    """Terminate a process, killing it if it does not end; again is harmless (a benchmark
    may stop the server before it leaves ``serving``)."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/api/v1/me/", timeout=2).status_code == 401
    except httpx.TransportError:
        return False
