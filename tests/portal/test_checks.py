"""System checks report a database, broker or Slurm configuration that cannot work."""

import os
import subprocess
import sys

import pytest
from django.conf import settings
from django.core import checks
from django.test import override_settings

from tests.conftest import REPO


def check_ids(**kwargs) -> set[str]:
    return {message.id for message in checks.run_checks(**kwargs)}


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


@pytest.mark.django_db
def test_the_local_stack_passes_every_check(dev_cluster):
    assert check_ids(databases=["default"]) == set()


def test_an_unreachable_database_is_an_error_that_names_it():
    result = manage(
        "check", "--database", "default", PORTAL_DATABASE_URL="postgresql://postgres@127.0.0.1:1/x"
    )
    assert result.returncode != 0
    assert "portal.E002" in result.stderr
    assert "Cannot connect to PostgreSQL database 'x' at 127.0.0.1:1" in result.stderr


def test_connecting_as_a_superuser_is_an_error():
    """The stack's own superuser, with its real password: the check asks the server."""
    result = manage(
        "check",
        "--database",
        "default",
        PORTAL_DATABASE_URL="postgresql://postgres@127.0.0.1:5432/postgres",
        PORTAL_DATABASE_PASSWORD_FILE=str(settings.STACK_DIR / "secrets" / "postgres"),
    )
    assert result.returncode != 0
    assert "portal.E005" in result.stderr, result.stderr
    assert "connects to PostgreSQL as the superuser 'postgres'" in result.stderr


def test_an_unreachable_broker_is_a_warning_that_names_it():
    with override_settings(CELERY_BROKER_URL="redis://127.0.0.1:1/0"):
        assert "portal.W011" in check_ids()


def test_a_broker_url_with_a_bad_database_number_is_an_error():
    with override_settings(CELERY_BROKER_URL="redis://127.0.0.1:6379/zero"):
        assert "portal.E010" in check_ids()


def test_a_run_as_prefix_without_the_user_is_an_error():
    with override_settings(SLURM_RUN_AS_PREFIX="sudo -n"):
        assert "clusters.E001" in check_ids()


def test_a_missing_slurm_bin_dir_is_an_error(tmp_path):
    with override_settings(SLURM_BIN_DIR=str(tmp_path / "nowhere")):
        assert "clusters.E002" in check_ids()


@pytest.mark.django_db
def test_no_registered_cluster_is_a_warning():
    assert "clusters.W001" in check_ids(databases=["default"])


@pytest.mark.django_db
def test_a_cli_cluster_without_the_slurm_tools_is_an_error(dev_cluster, tmp_path):
    with override_settings(SLURM_BIN_DIR=str(tmp_path)):
        assert "clusters.E003" in check_ids(databases=["default"])


@pytest.mark.django_db
def test_a_rest_cluster_without_url_or_readable_key_is_an_error(tmp_path):
    from clusters.models import Cluster

    Cluster.objects.create(name="remote", backend="rest", jwt_key_file=str(tmp_path / "missing"))
    assert {"clusters.E004", "clusters.E005"} <= check_ids(databases=["default"])


@pytest.mark.django_db
def test_a_cluster_behind_a_command_prefix_needs_its_prefixs_program_not_the_workers_tools(
    tmp_path,
):
    from clusters.models import Cluster

    Cluster.objects.create(name="b", command_prefix="/usr/bin/env", run_as_prefix="x {user}")
    with override_settings(SLURM_BIN_DIR=str(tmp_path)):  # no Slurm tools in it
        assert not {"clusters.E003", "clusters.E006"} & check_ids(databases=["default"])
        Cluster.objects.filter(name="b").update(command_prefix=str(tmp_path / "gone"))
        assert "clusters.E006" in check_ids(databases=["default"])


@pytest.mark.django_db
def test_a_cluster_row_with_a_prefix_that_cannot_be_split_is_an_error():
    from clusters.models import Cluster

    Cluster.objects.create(name="b", command_prefix="/usr/bin/env", run_as_prefix="x '{user}")
    assert "clusters.E006" in check_ids(databases=["default"])


def test_a_process_counting_outside_the_metrics_folder_is_warned(monkeypatch, tmp_path):
    # Nothing is counted meanwhile: prometheus_client would open its files there.
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "elsewhere"))
    assert "portal.W020" in check_ids()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", os.path.join(settings.METRICS_DIR, "web"))
    assert "portal.W020" not in check_ids()


@override_settings(IS_PRODUCTION=True, METRICS_ALLOWED_NETWORKS=["127.0.0.1/32"], PROXY_COUNT=0)
def test_letting_loopback_scrape_without_a_proxy_count_is_warned_in_production():
    """Behind nginx on the same host every client would come from 127.0.0.1."""
    assert "portal.W021" in check_ids()
    with override_settings(PROXY_COUNT=1):
        assert "portal.W021" not in check_ids()
    with override_settings(METRICS_ALLOWED_NETWORKS=["10.0.0.0/8", "2001:db8::/32"]):
        assert "portal.W021" not in check_ids()


@pytest.mark.django_db
def test_a_cluster_that_does_not_confine_jobs_to_their_gpus_is_a_deploy_warning(
    dev_cluster, next_cluster
):
    """The dev clusters run task/none (no cgroup delegation in the sandbox: see
    dev/slurm/cgroup.conf.in), so a job without GPUs could open every GPU of its node:
    ``check --deploy`` says so of each, through its own client tools."""
    messages = [
        m for m in checks.run_checks(databases=["default"], include_deployment_checks=True)
        if m.id == "clusters.W002"
    ]  # fmt: skip
    assert sorted(m.msg.split("'")[1] for m in messages) == ["portal-dev", "portal-next"]
    assert "ConstrainDevices=yes" in messages[0].hint
    # Not a check of every run: without --deploy it asks no cluster.
    assert "clusters.W002" not in check_ids(databases=["default"])


CONFINED = """\
TaskPlugin              = task/affinity,task/cgroup
Cgroup Support Configuration:
ConstrainCores          = yes
ConstrainDevices        = yes
"""


@pytest.mark.parametrize(
    ("config", "confined"),
    [
        (CONFINED, True),
        (CONFINED.replace("ConstrainDevices        = yes", "ConstrainDevices        = no"), False),
        (CONFINED.replace("task/affinity,task/cgroup", "task/affinity"), False),
        ("TaskPlugin              = task/none\n", False),
        ("", False),
    ],
)
def test_devices_are_confined_only_with_task_cgroup_and_constrain_devices(config, confined):
    from clusters.slurm.parsing import parse_devices_constrained

    assert parse_devices_constrained(config) is confined
