"""deploy/prometheus/alerts.yml: valid for promtool, each alert proven to fire by
alerts_test.yml, and every series it reads one the portal answers."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from django.core.cache import cache
from django.test import override_settings
from django.utils import timezone

from clusters.models import ClusterProbe
from jobs.invariants import LAST_CHECK_KEY, Findings, invariants_record
from tests.factories import recorded_cluster
from tests.portal.test_metrics import SCRAPER, TOKEN, parsed

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
