"""The client is installable without the portal: importing it loads nothing of Django,
DRF or the portal's apps; it is installed as the `sgp` console script."""

import os
import subprocess
import sys
from importlib.metadata import entry_points

from tests.conftest import REPO

PORTAL_PACKAGES = {"django", "rest_framework", "drf_spectacular", "portal", "accounts", "jobs",
                   "clusters", "celery"}  # fmt: skip
PROBE = "import sys, client.cli\nprint(' '.join(sorted({m.split('.')[0] for m in sys.modules})))\n"


def test_importing_the_client_loads_no_django():
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    loaded = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", PROBE],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    top_level = set(loaded.stdout.split())
    assert {"client", "httpx", "yaml"} <= top_level  # the probe sees what was imported
    assert not top_level & PORTAL_PACKAGES
    # -X importtime lists every module as it is imported, even ones removed since.
    imported = {line.split("|")[-1].strip().split(".")[0] for line in loaded.stderr.splitlines()}
    assert "httpx" in imported
    assert not imported & PORTAL_PACKAGES


def test_it_is_installed_as_the_sgp_console_script():
    (script,) = entry_points(group="console_scripts", name="sgp")
    assert script.value == "client.cli:main"


def test_python_dash_m_client_runs_it():
    result = subprocess.run(
        [sys.executable, "-m", "client", "--version"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0
    assert result.stdout.startswith("sgp ")
