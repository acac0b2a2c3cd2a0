"""Loaded by pytest (``-p portal.testenv``) before Django reads its settings.

Tests run in dev mode, on the local stack (the portal's defaults are production's).
They get Redis databases of their own, so a worker started by ``make up`` never
takes a test's task (and runs it against the dev database) and test heartbeats
never show up in the dev portal's health report. Under pytest-xdist each process has
its own pair (gw0: 2 and 3, gw1: 4 and 5, …; ``PORTAL_TEST_REDIS_DB`` moves the
first), as pytest-django gives each its own test database.

Each test process also counts its metrics in a folder of its own (portal/metric_files.py),
inside a metrics folder the Celery workers it starts write beside it
(``tests.conftest.running_worker``), so ``/metrics`` adds them up as on a host. It is
set before anything imports prometheus_client, which reads it once.
"""

import atexit
import os
import shutil
import tempfile

# "gw1" in the second of pytest-xdist's processes; unset without xdist.
WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
FIRST_DB = int(os.environ.get("PORTAL_TEST_REDIS_DB", "2"))
BROKER_DB, CACHE_DB = FIRST_DB + 2 * WORKER, FIRST_DB + 1 + 2 * WORKER

os.environ.setdefault("PORTAL_ENV", "dev")
# Submissions Slurm could not take are tried again at most 8 s apart (30 s by default):
# the fault tests wait for a backlog to go in once Slurm is back.
os.environ.setdefault("PORTAL_SUBMIT_RETRY_MAX_S", "8")
# pytest-xdist's processes inherit the URLs set here in the process that starts them
# (marked so): each sets its own. URLs given from outside are kept.
if os.environ.get("PORTAL_TEST_REDIS_SET_HERE") or "PORTAL_BROKER_URL" not in os.environ:
    os.environ["PORTAL_TEST_REDIS_SET_HERE"] = "1"
    os.environ["PORTAL_BROKER_URL"] = f"redis://127.0.0.1:6379/{BROKER_DB}"
    os.environ["PORTAL_CACHE_URL"] = f"redis://127.0.0.1:6379/{CACHE_DB}"

if os.environ.get("PORTAL_TEST_METRICS_SET_HERE") or "PORTAL_METRICS_DIR" not in os.environ:
    os.environ["PORTAL_TEST_METRICS_SET_HERE"] = "1"
    METRICS_DIR = tempfile.mkdtemp(prefix="portal-test-metrics-")
    os.chmod(METRICS_DIR, 0o755)  # noqa: S103 - the web tier's user reads it (dev/portal)
    atexit.register(shutil.rmtree, METRICS_DIR, ignore_errors=True)
    os.environ["PORTAL_METRICS_DIR"] = METRICS_DIR
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = os.path.join(METRICS_DIR, "tests")
    os.mkdir(os.environ["PROMETHEUS_MULTIPROC_DIR"])
