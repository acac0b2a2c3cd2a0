"""/healthz reports database, broker and each Slurm cluster, with 200 or 503."""

import subprocess

import pytest
from django.test import override_settings

from clusters.services import cluster_register
from tests.conftest import REPO


@pytest.mark.slurm
def test_it_is_healthy_when_everything_answers(client, dev_cluster):
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["database"]["ok"] is True
    assert body["broker"]["ok"] is True
    assert body["clusters"]["portal-dev"]["ok"] is True


@pytest.mark.slurm
def test_an_unreachable_broker_makes_it_unavailable(client, dev_cluster):
    with override_settings(CELERY_BROKER_URL="redis://127.0.0.1:1/0"):
        response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["broker"]["ok"] is False
    assert "127.0.0.1:1" in body["broker"]["error"] or "refused" in body["broker"]["error"]
    assert body["database"]["ok"] is True


@pytest.mark.slurm
def test_a_cluster_whose_tools_are_missing_makes_it_unavailable(client, dev_cluster):
    with override_settings(SLURM_BIN_DIR="/nonexistent"):
        response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["clusters"]["portal-dev"]["ok"] is False
    assert "not installed" in response.json()["clusters"]["portal-dev"]["error"]


@pytest.mark.django_db
def test_a_disabled_cluster_is_not_reported(client):
    cluster = cluster_register(name="retired")
    cluster.is_enabled = False
    cluster.save()
    assert "retired" not in client.get("/healthz").json()["clusters"]


@pytest.mark.django_db
def test_it_refuses_a_post(client):
    assert client.post("/healthz").status_code == 405


@pytest.mark.slurm
def test_a_stopped_slurmctld_makes_it_unavailable_then_healthy_again(client, dev_cluster):
    stack = str(REPO / "dev" / "stack")
    subprocess.run([stack, "stop", "slurmctld"], check=True, capture_output=True)
    try:
        response = client.get("/healthz")
    finally:
        subprocess.run([stack, "start", "slurmctld"], check=True, capture_output=True)
    assert response.status_code == 503
    assert response.json()["clusters"]["portal-dev"]["ok"] is False
    assert client.get("/healthz").status_code == 200
