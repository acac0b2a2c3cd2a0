"""deploy/prometheus/alerts.yml: valid for promtool, each alert proven to fire by
alerts_test.yml, every series it reads one the portal answers, and a real Prometheus
that evaluates the rules on what it scrapes holds the alerts of a job waiting in
``new`` and of a stale heartbeat pending (their ``for`` is promtool's to prove)."""

import datetime as dt
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from django.core.cache import cache
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from clusters.models import ClusterProbe
from jobs.invariants import LAST_CHECK_KEY, Findings, invariants_record
from jobs.models import Job
from jobs.states import JobState
from portal.health import HEARTBEAT_KEY
from portal.tasks import heartbeat_task
from tests.factories import bulk_jobs, project_with_allocation, recorded_cluster, wait_for
from tests.portal.test_metrics import SCRAPER, TOKEN, parsed
from tests.portal.test_prometheus import prometheus  # noqa: F401 - the fixture

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"


def promtool(*args: str) -> subprocess.CompletedProcess:
    if shutil.which("promtool") is None:
        pytest.fail("promtool is missing: dev/stack install installs prometheus", pytrace=False)
    return subprocess.run(
        ["promtool", *args], cwd=RULES, capture_output=True, text=True, timeout=60, check=False
    )


def alerts() -> list[dict]:
    groups = yaml.safe_load((RULES / "alerts.yml").read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_promtool_finds_the_rules_valid():
    checked = promtool("check", "rules", "alerts.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in checked.stdout


def test_each_alert_fires_on_its_condition_in_promtool_s_unit_tests():
    tested = promtool("test", "rules", "alerts_test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    cases = yaml.safe_load((RULES / "alerts_test.yml").read_text())["tests"]
    fired = {
        check["alertname"]
        for case in cases
        for check in case["alert_rule_test"]
        if check.get("exp_alerts")
    }
    quiet_first = {
        check["alertname"]
        for case in cases
        for check in case["alert_rule_test"]
        if not check.get("exp_alerts")
    }
    names = {rule["alert"] for rule in alerts()}
    assert fired == names  # each fires on its condition…
    assert quiet_first == names  # …and is shown quiet before it (or beside it)


def test_the_rules_read_series_the_portal_answers(client, db):
    cluster = recorded_cluster()
    ClusterProbe.objects.create(cluster=cluster, ok=True, latency_ms=3, probed_at=timezone.now())
    invariants_record(Findings())
    with override_settings(METRICS_TOKEN=TOKEN, METRICS_ALLOWED_NETWORKS=[]):
        answered = {name for name, _ in parsed(client.get("/metrics", **SCRAPER).content.decode())}
    cache.delete(LAST_CHECK_KEY)
    read = {name for rule in alerts() for name in re.findall(r"\bportal_\w+", rule["expr"])}
    assert read, "the rules read no portal series"
    assert read <= answered, read - answered


@pytest.fixture
def prometheus_rule_files() -> list[str]:
    return [str(RULES / "alerts.yml")]


WORKER_DOWN = {"PortalSubmissionsStuck", "PortalWorkerHeartbeatStale"}


@pytest.mark.django_db(transaction=True)
def test_prometheus_holds_the_alerts_of_a_job_left_in_new_and_a_silent_worker(
    alice,
    prometheus,  # noqa: F811 - the fixture imported above
):
    """As after the issue's killed worker: a job made ten minutes ago still new, the
    last heartbeat ten minutes old, the cluster's last probe fine."""
    ten_minutes_ago = timezone.now() - dt.timedelta(minutes=10)
    with transaction.atomic():
        cluster = recorded_cluster()
        ClusterProbe.objects.create(
            cluster=cluster, ok=True, latency_ms=3, probed_at=timezone.now()
        )
        project = project_with_allocation(cluster, pi=alice, gpu_hours=10)
        (job,) = bulk_jobs(
            owner=alice,
            project=project,
            count=1,
            state=JobState.NEW,
            partition=cluster.partitions.get(),
        )
        Job.objects.filter(pk=job.pk).update(created_at=ten_minutes_ago)
    cache.set(HEARTBEAT_KEY, {"at": ten_minutes_ago.isoformat(), "worker": "gone@host"}, None)

    def pending() -> set[str]:
        alerts = prometheus('ALERTS{alertstate="pending"}')
        return {dict(labels)["alertname"] for labels in alerts}

    wait_for(lambda: pending() >= WORKER_DOWN, timeout_s=30, interval_s=0.5, what="both alerts")
    (scraped,) = prometheus('portal_worker_heartbeat_timestamp_seconds{job="portal"}').values()
    assert scraped == pytest.approx(ten_minutes_ago.timestamp(), abs=0.01)

    # A worker again: the heartbeat fresh, the job gone to Slurm. Both fall quiet.
    heartbeat_task.apply()
    Job.objects.filter(pk=job.pk).update(state=JobState.PENDING, slurm_job_id=4242)
    wait_for(lambda: not WORKER_DOWN & pending(), timeout_s=30, interval_s=0.5, what="quiet")
