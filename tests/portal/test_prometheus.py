"""A real Prometheus server (Debian's ``prometheus``) scrapes the portal's /metrics with
the scrape token, and what its query API answers is what the database holds."""

import json
import shutil
import socket
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from django.db import transaction
from django.db.models import Count

from accounts.models import Allocation
from jobs.models import UNFINISHED_STATES, Job
from jobs.states import JobState
from portal.tasks import heartbeat_task
from tests.conftest import process_stop
from tests.factories import bulk_jobs, project_with_allocation, recorded_cluster, wait_for
from tests.jobs.test_accounting_ingest import portal_job
from tests.portal.test_metrics import TOKEN

pytestmark = pytest.mark.usefixtures("transactional_db")

CONFIG = """
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: {rule_files}
scrape_configs:
  - job_name: portal
    authorization:
      type: Bearer
      credentials_file: {token_file}
    static_configs:
      - targets: ["{target}"]
  # The same target without the token: refused, so never up.
  - job_name: portal-without-token
    static_configs:
      - targets: ["{target}"]
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def prometheus_rule_files() -> list[str]:
    """The rule files the server evaluates (every second); a module overrides it."""
    return []


@pytest.fixture
def prometheus(live_server, settings, tmp_path: Path, prometheus_rule_files):
    """A Prometheus server scraping the live server every second; yields a query
    function: PromQL → {labels as a frozenset: value}."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is missing: dev/stack install installs it", pytrace=False)
    settings.METRICS_TOKEN = TOKEN
    settings.METRICS_ALLOWED_NETWORKS = ["127.0.0.0/8"]  # both, as a site may set them
    token_file = tmp_path / "scrape-token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    config = tmp_path / "prometheus.yml"
    target = f"127.0.0.1:{urlsplit(live_server.url).port}"
    config.write_text(
        CONFIG.format(
            token_file=token_file, target=target, rule_files=json.dumps(prometheus_rule_files)
        )
    )
    address = f"127.0.0.1:{free_port()}"
    log = tmp_path / "prometheus.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address={address}", "--log.level=warn"],
            stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip
    base = f"http://{address}"

    def ready() -> bool:
        if process.poll() is not None:
            pytest.fail(f"prometheus exited: {log.read_text()}", pytrace=False)
        try:
            return httpx.get(f"{base}/-/ready", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def query(promql: str) -> dict[frozenset, float]:
        answer = httpx.get(f"{base}/api/v1/query", params={"query": promql}, timeout=5).json()
        assert answer["status"] == "success", answer
        return {
            frozenset(result["metric"].items()): float(result["value"][1])
            for result in answer["data"]["result"]
        }

    try:
        wait_for(ready, timeout_s=30, interval_s=0.2, what="prometheus to be ready")
        yield query
    finally:
        process_stop(process, within_s=10)


def test_prometheus_scrapes_with_the_token_and_answers_the_database_s_figures(alice, prometheus):
    heartbeat_task.apply()  # an outcome counted by this process, in its metrics folder
    # One commit: a scrape sees all of it or none of it (nor the heartbeat counted before).
    with transaction.atomic():
        cluster = recorded_cluster()
        project = project_with_allocation(cluster, pi=alice, gpu_hours=10)
        portal_job(project, cluster, alice, slurm_job_id=950)  # running, holding 0.5 GPU-hours
        gpu = cluster.partitions.get()
        for state, count in ((JobState.NEW, 1), (JobState.PENDING, 4), (JobState.FAILED, 2)):
            bulk_jobs(owner=alice, project=project, count=count, state=state, partition=gpu)

    # Prometheus's first scrapes come some seconds after it starts (it hands new targets
    # to its scrapers at most every 5 s).
    wait_for(
        lambda: len(prometheus("up")) == 2 and prometheus('portal_jobs{cluster="recorded"}'),
        timeout_s=30,
        interval_s=0.2,
        what="a scrape of both jobs",
    )
    (heartbeats,) = prometheus(
        'portal_celery_tasks_total{task="portal.tasks.heartbeat_task",outcome="success"}'
    ).values()
    assert heartbeats >= 1
    assert list(prometheus('up{job="portal"}').values()) == [1.0]
    assert list(prometheus('up{job="portal-without-token"}').values()) == [0.0]

    by_state = {
        row["state"]: row["count"]
        for row in Job.objects.filter(cluster=cluster, state__in=UNFINISHED_STATES)
        .values("state")
        .annotate(count=Count("id"))
    }
    assert by_state == {"new": 1, "pending": 4, "running": 1}
    jobs = prometheus('portal_jobs{job="portal",cluster="recorded"}')
    assert {dict(labels)["state"]: count for labels, count in jobs.items()} == {
        state: by_state.get(state, 0) for state in UNFINISHED_STATES
    }
    assert prometheus('sum(portal_jobs{cluster="recorded"})') == {frozenset(): 6.0}

    allocation = Allocation.objects.get(project=project)
    held = prometheus('portal_allocation_held_gpu_hours{project="vision"}')
    assert list(held.values()) == [allocation.held_gpu_seconds / 3600] == [0.5]
    granted = prometheus(f'portal_allocation_granted_gpu_hours{{allocation="{allocation.pk}"}}')
    assert list(granted.values()) == [allocation.granted_gpu_seconds / 3600]
