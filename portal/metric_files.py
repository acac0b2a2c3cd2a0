"""The files in which the portal's processes keep their metrics (prometheus_client's
multiprocess mode), and their upkeep over a service's life.

Gunicorn's web workers and Celery's pool processes each count in a file of their own
(``<kind>_<pid>.db``), so counts from every process add up. A process writes into the
folder named by ``PROMETHEUS_MULTIPROC_DIR``, which prometheus_client reads when it is
first imported: the launcher sets it (a systemd unit, ``dev/portal``, the tests), and
nothing imported before Django's apps are ready imports prometheus_client.

Each service instance (the web server, each Celery worker) has a folder of its own
inside ``PORTAL_METRICS_DIR``, emptied when that service starts: the files of its
processes that have ended keep their counts until then, and emptying a folder other
processes still write to would lose theirs. ``/metrics`` adds up every folder's files
(``metric_files``). Nothing here needs Django, so a gunicorn configuration can call it:

    from portal.metric_files import metric_files_reset, metric_files_process_dead

    def on_starting(server):
        metric_files_reset()

    def child_exit(server, worker):
        metric_files_process_dead(worker.pid)

The Celery worker empties its folder itself when it starts (``portal/celery.py``).
"""

import os
from pathlib import Path

ENV = "PROMETHEUS_MULTIPROC_DIR"


def own_folder() -> Path | None:
    """The folder this process writes its metrics into; None when it counts in memory."""
    folder = os.environ.get(ENV, "")
    return Path(folder) if folder else None


def metric_files_reset() -> None:
    """Empty this process's folder (made if missing): call it when a service starts,
    before any of its processes counts anything."""
    folder = own_folder()
    if folder is None:
        return
    folder.mkdir(parents=True, exist_ok=True)
    for file in folder.glob("*.db"):
        file.unlink(missing_ok=True)


def metric_files_process_dead(pid: int) -> None:
    """Drop what an ended process reported as its live value (gauges counted only while
    their process lives); its counters and histograms stay in the sums."""
    if own_folder() is None:
        return
    # Imported here: prometheus_client picks its mode once, when first imported, and
    # this module comes with the package (portal/celery.py), before a test run sets the
    # folder.
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid)


def metric_files(root: Path) -> list[str]:
    """Every metric file of the host: in ``root`` and in its folders one level down."""
    return sorted(str(path) for pattern in ("*.db", "*/*.db") for path in root.glob(pattern))
