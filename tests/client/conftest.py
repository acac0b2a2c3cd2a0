"""The client's unit tests call ``client.cli.main`` against a fake portal (httpx's
MockTransport): pure logic — what is sent, what is printed, which exit code.
The one test on the real stack is test_on_the_dev_cluster.py."""

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from client.cli import main

URL = "http://portal.test"
TOKEN = "sgp_" + "t" * 43

Reply = httpx.Response | Callable[[httpx.Request], httpx.Response]


def error(status: int, code: str, message: str, **extra: Any) -> httpx.Response:
    fields = extra.pop("fields", {})
    body = {"error": {"code": code, "message": message, "fields": fields, **extra}}
    return httpx.Response(status, json=body)


@dataclass
class FakePortal:
    """Answers by (method, path under /api/v1/); a list of replies is used in turn,
    the last one again and again. Every request is kept."""

    routes: dict[tuple[str, str], list[Reply]] = field(default_factory=dict)
    requests: list[httpx.Request] = field(default_factory=list)

    def on(self, method: str, path: str, *replies: Reply) -> None:
        self.routes[(method, path)] = list(replies)

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path = request.url.path.removeprefix("/api/v1/")
        replies = self.routes.get((request.method, path))
        if not replies:
            return error(404, "not_found", f"There is no API endpoint at {request.url.path}.")
        reply = replies.pop(0) if len(replies) > 1 else replies[0]
        return reply(request) if callable(reply) else reply

    def sent(self, method: str, path: str) -> list[httpx.Request]:
        return [
            r
            for r in self.requests
            if r.method == method and r.url.path.removeprefix("/api/v1/") == path
        ]


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    """No test reads or writes the real ~/.config/sgp, or waits for real."""
    monkeypatch.setenv("SGP_CONFIG", str(tmp_path / "sgp" / "config.json"))
    monkeypatch.delenv("SGP_URL", raising=False)
    monkeypatch.delenv("SGP_TOKEN", raising=False)
    monkeypatch.setattr(time, "sleep", lambda seconds: None)


@pytest.fixture
def portal(monkeypatch) -> FakePortal:
    """A fake portal the client is logged in to (through SGP_URL and SGP_TOKEN)."""
    monkeypatch.setenv("SGP_URL", URL)
    monkeypatch.setenv("SGP_TOKEN", TOKEN)
    return FakePortal()


@pytest.fixture
def sgp(capsys) -> Callable[..., Result]:
    """sgp(*argv, portal=…): run one command; its exit code and what it printed."""

    def run(*argv: str, portal: FakePortal | None = None) -> Result:
        transport = httpx.MockTransport(portal.handle) if portal else None
        code = main(list(argv), transport=transport)
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def job_json(**fields: Any) -> dict[str, Any]:
    """A job as GET jobs/{id}/ shows it."""
    return {
        "id": 12,
        "state": "pending",
        "slurm_job_id": 4242,
        "slurm_state": "PENDING",
        "reason": "Priority",
        "exit_code": None,
        "submit_error": "",
        "requested_gpu_hours": 0.5,
        "used_gpu_hours": None,
        "billing_weight": 1.0,
        "created_at": "2026-01-02T03:04:05Z",
        "submitted_at": "2026-01-02T03:04:06Z",
        "started_at": None,
        "ended_at": None,
        "owner": "alice",
        "project": "vision",
        "cluster": "portal-dev",
        "partition": "debug",
        "template": None,
        "name": "train",
        "nodes": 1,
        "gpus_per_node": 1,
        "cpus_per_gpu": None,
        "mem_per_gpu_gb": None,
        "time_limit_minutes": 30,
        "working_directory": "/home/alice",
        "output_path": "/home/alice/slurm-%j.out",
        "error_path": "/home/alice/slurm-%j.out",
        "environment": {},
        "array": "",
        "array_tasks": 1,
        "depends_on": [],
        "script": "echo hi\n",
        "rendered_script": "#!/bin/bash\n#SBATCH --job-name=train\necho hi\n",
        "events": [
            {"at": "2026-01-02T03:04:05Z", "state": "new", "detail": "held 0.50 GPU-hours"},
            {"at": "2026-01-02T03:04:06Z", "state": "pending", "detail": "submitted"},
        ],
        **fields,
    }
