"""/healthz: 200 or 503 from the database and the broker; each cluster as the workers'
last probe found it, named to those who may see the detail, never failing the whole."""

import datetime as dt

import pytest
from django.db import connection
from django.test import Client, override_settings
from django.utils import timezone

from clusters.models import ClusterProbe
from clusters.services import cluster_probe, cluster_register
from tests.factories import in_thread
from tests.faults.support import stack

HEALTH_TOKEN = "monitoring-token-for-tests"


@pytest.fixture
def staff_client(client, manny):
    client.force_login(manny)
    return client


@pytest.fixture
def probed(dev_cluster):
    cluster_probe(cluster=dev_cluster)
    return dev_cluster


@pytest.mark.slurm
def test_it_is_healthy_when_everything_answers(staff_client, probed):
    response = staff_client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["database"]["ok"] is True
    assert body["broker"]["ok"] is True
    assert body["clusters"]["portal-dev"]["ok"] is True
    assert body["unhealthy_clusters"] == []


@pytest.mark.slurm
def test_anonymous_callers_get_the_verdict_alone(client, probed):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.slurm
@override_settings(HEALTH_TOKEN=HEALTH_TOKEN)
def test_a_monitoring_token_gets_the_detail_and_a_wrong_one_does_not(client, probed):
    detailed = client.get("/healthz", HTTP_AUTHORIZATION=f"Bearer {HEALTH_TOKEN}").json()
    assert detailed["clusters"]["portal-dev"]["ok"] is True
    assert client.get("/healthz", HTTP_AUTHORIZATION="Bearer guess").json() == {"status": "ok"}


@pytest.mark.slurm
def test_an_unreachable_broker_makes_it_unavailable(staff_client, probed):
    with override_settings(CELERY_BROKER_URL="redis://127.0.0.1:1/0"):
        response = staff_client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["broker"]["ok"] is False
    assert "127.0.0.1:1" in body["broker"]["error"] or "refused" in body["broker"]["error"]
    assert body["database"]["ok"] is True


@pytest.mark.slurm
@override_settings(HEALTH_TOKEN=HEALTH_TOKEN)
def test_an_unreachable_database_makes_it_unavailable(probed):
    answers: dict = {}

    def ask_with_the_database_down() -> None:
        # This thread's own connection, pointed at a port nothing listens on: the database
        # is down for these requests alone, and nothing else on the machine is disturbed.
        connection.settings_dict = {**connection.settings_dict, "HOST": "127.0.0.1", "PORT": "1"}
        answers["anonymous"] = Client().get("/healthz")
        answers["detail"] = Client().get("/healthz", HTTP_AUTHORIZATION=f"Bearer {HEALTH_TOKEN}")

    errors: list = []
    in_thread(ask_with_the_database_down, errors).join(timeout=60)
    assert errors == []
    assert answers["anonymous"].status_code == 503
    assert answers["anonymous"].json() == {"status": "unavailable"}
    detail = answers["detail"]
    assert detail.status_code == 503
    body = detail.json()
    assert body["database"]["ok"] is False
    assert "127.0.0.1" in body["database"]["error"] or "refused" in body["database"]["error"]
    assert body["broker"]["ok"] is True
    assert body["clusters"] == {}  # read from the database, which did not answer


@pytest.mark.slurm
def test_a_cluster_down_is_named_but_does_not_fail_the_portal(staff_client, client, dev_cluster):
    with override_settings(SLURM_BIN_DIR="/nonexistent"):
        cluster_probe(cluster=dev_cluster)
    response = staff_client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["clusters"]["portal-dev"]["ok"] is False
    assert "not installed" in body["clusters"]["portal-dev"]["error"]
    assert body["unhealthy_clusters"] == ["portal-dev"]
    client.logout()
    assert client.get("/healthz").json() == {"status": "ok"}


@pytest.mark.django_db
def test_a_probe_too_old_is_not_believed(staff_client):
    cluster = cluster_register(name="quiet")
    ClusterProbe.objects.create(
        cluster=cluster,
        ok=True,
        latency_ms=1.0,
        probed_at=timezone.now() - dt.timedelta(minutes=10),
    )
    status = staff_client.get("/healthz").json()["clusters"]["quiet"]
    assert status["ok"] is False and "no probe for" in status["error"]


@pytest.mark.django_db
def test_a_cluster_never_probed_is_not_ok(staff_client):
    cluster_register(name="fresh")
    assert staff_client.get("/healthz").json()["clusters"]["fresh"] == {
        "ok": False,
        "error": "not probed yet",
        "probed_at": None,
    }


@pytest.mark.django_db
def test_a_disabled_cluster_is_not_reported(staff_client):
    cluster = cluster_register(name="retired")
    cluster.is_enabled = False
    cluster.save()
    assert "retired" not in staff_client.get("/healthz").json()["clusters"]


@pytest.mark.django_db
def test_it_refuses_a_post(client):
    assert client.post("/healthz").status_code == 405


@pytest.mark.slurm
@pytest.mark.exclusive  # stops slurmctld, which every other test shares
def test_a_stopped_slurmctld_is_probed_down_then_up_again(staff_client, dev_cluster):
    stack("stop", "slurmctld")
    try:
        down = cluster_probe(cluster=dev_cluster)
        # The web tier answers from the probe: no Slurm command runs for /healthz.
        with override_settings(SLURM_BIN_DIR="/nonexistent"):
            response = staff_client.get("/healthz")
    finally:
        stack("start", "slurmctld")
    assert down.ok is False
    assert response.status_code == 200
    assert response.json()["unhealthy_clusters"] == ["portal-dev"]
    assert cluster_probe(cluster=dev_cluster).ok is True
    assert staff_client.get("/healthz").json()["unhealthy_clusters"] == []


def test_the_probe_task_runs_on_beat():
    from django.conf import settings

    entry = settings.CELERY_BEAT_SCHEDULE["clusters-probe"]
    assert entry["task"] == "clusters.tasks.clusters_probe_task"
    assert entry["schedule"] == settings.CLUSTER_PROBE_INTERVAL_S
