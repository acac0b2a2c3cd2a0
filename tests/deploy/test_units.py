"""The systemd units of deploy/systemd: valid for systemd, and sandboxed as the README says.

No systemd runs on these machines; `systemd-analyze verify` and `security --offline` read
the units as systemd would (the README's paths replaced by this checkout's, so the
commands they start exist)."""

import re
import subprocess
from pathlib import Path

import pytest

from tests.deploy.installed import APP_DIR, ENV_FILE, UNITS, installed_unit, unit_settings

# The settings that turn no_new_privs on for a service of a user other than root
# (systemd.exec(5), NoNewPrivileges=): with it the kernel ignores sudo's set-uid bit, and
# the worker could run nothing as a researcher.
IMPLY_NO_NEW_PRIVILEGES = {
    "NoNewPrivileges",
    "DynamicUser",
    "LockPersonality",
    "MemoryDenyWriteExecute",
    "PrivateDevices",
    "ProtectClock",
    "ProtectHostname",
    "ProtectKernelLogs",
    "ProtectKernelModules",
    "ProtectKernelTunables",
    "RestrictAddressFamilies",
    "RestrictNamespaces",
    "RestrictRealtime",
    "RestrictSUIDSGID",
    "SystemCallArchitectures",
    "SystemCallFilter",
    "SystemCallLog",
}


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("units")
    paths = {}
    for component, unit in UNITS.items():
        paths[component] = folder / unit.name
        paths[component].write_text(installed_unit(component))
    return paths


def settings_of(component: str) -> dict[str, list[str]]:
    return unit_settings(UNITS[component].read_text())


def test_systemd_finds_nothing_wrong_in_the_units(installed):
    verified = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *map(str, installed.values())],
        capture_output=True,
        text=True,
        check=False,
    )
    # verify exits 0 on an unknown or misspelt setting too, which it only reports.
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout + verified.stderr == ""


@pytest.mark.parametrize(("component", "most"), [("web", 2.0), ("beat", 2.0), ("worker", 7.0)])
def test_systemd_rates_each_unit_exposed_no_more_than_it_must_be(installed, component, most):
    """The web tier and beat hold no rights and get every restriction ("OK"); the worker,
    which must become researchers through sudo, the ones that leave sudo working."""
    rated = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", f"--threshold={most * 10:.0f}",
         str(installed[component])],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    exposure = re.search(r"Overall exposure level for \S+: ([0-9.]+)", rated.stdout)
    assert exposure, rated.stdout + rated.stderr
    assert float(exposure[1]) <= most, rated.stdout
    assert rated.returncode == 0, rated.stdout + rated.stderr


def test_the_web_tier_and_beat_run_as_a_user_without_rights_and_gain_none():
    for component in ("web", "beat"):
        settings = settings_of(component)
        assert settings["User"] == ["portal-web"]
        assert settings["NoNewPrivileges"] == ["yes"]
        assert settings["CapabilityBoundingSet"] == [""]
        assert settings["AmbientCapabilities"] == [""]
        assert settings["ProtectSystem"] == ["strict"] and settings["ProtectHome"] == ["yes"]


def test_the_worker_keeps_sudo_working_and_no_more():
    settings = settings_of("worker")
    assert settings["User"] == ["portal-worker"]
    assert not IMPLY_NO_NEW_PRIVILEGES & settings.keys()
    # sudo becomes the researcher (SETUID/SETGID) and writes its audit record; the worker
    # itself may only read what its users' jobs wrote.
    (bounding,) = settings["CapabilityBoundingSet"]
    assert set(bounding.split()) == {
        "CAP_DAC_READ_SEARCH", "CAP_SETUID", "CAP_SETGID", "CAP_AUDIT_WRITE",
        "CAP_SYS_RESOURCE", "CAP_KILL",
    }  # fmt: skip
    assert settings["AmbientCapabilities"] == ["CAP_DAC_READ_SEARCH"]
    assert settings["ProtectSystem"] == ["strict"] and settings["ProtectHome"] == ["read-only"]
    # Its writable folders: the association locks (clusters/locks.py), its own; the
    # metrics its processes count, readable by the web tier's group, which serves them.
    assert settings["StateDirectory"] == ["slurm-gpu-portal/locks"]
    assert settings["StateDirectoryMode"] == ["0700"]
    assert settings["RuntimeDirectory"] == ["slurm-gpu-portal/metrics/worker"]
    assert settings["RuntimeDirectoryMode"] == ["0750"]
    assert settings["Group"] == ["slurm-gpu-portal"]
    assert settings["Environment"] == [
        "PORTAL_LOCK_DIR=/var/lib/slurm-gpu-portal/locks",
        "PORTAL_METRICS_DIR=/run/slurm-gpu-portal/metrics",
        "PROMETHEUS_MULTIPROC_DIR=/run/slurm-gpu-portal/metrics/worker",
    ]


@pytest.mark.parametrize("component", sorted(UNITS))
def test_each_unit_runs_the_installed_portal_with_the_environment_file(component):
    settings = settings_of(component)
    assert settings["EnvironmentFile"] == [ENV_FILE]
    assert settings["WorkingDirectory"] == [APP_DIR]
    assert settings["Restart"] == ["on-failure"]
    assert settings["PrivateTmp"] == ["yes"]
