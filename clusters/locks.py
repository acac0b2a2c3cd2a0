"""One at a time, per cluster: runs of the periodic work, and writers of Slurm's associations.

``one_run_per_cluster``: a queue sync, an accounting ingest or a reconcile run of a
cluster runs once at a time across every worker on every host (a PostgreSQL advisory
lock: the database is the one thing all of them share); a run that finds another under
way leaves the work to it.

``association_changes``: slurmdbd keeps associations as a nested set and does not
serialise changes from two clients: an account added while another client deleted one
was seen to keep its association and lose its account row, after which no user could
be added to it and it could not be deleted. The portal's own writer (the reconciler)
holds this lock while it changes a cluster; a lock file under ``LOCK_DIR`` covers every
process on a workers' host (and the tests' own ``sacctmgr`` changes, whose processes
each have a database of their own). Across hosts, the reconcile task's
``one_run_per_cluster`` keeps a second run of a cluster from starting anywhere.
"""

import fcntl
import time
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import DatabaseError, connection

# Keys of the advisory locks (the second half of each key is the cluster's id).
_RUNS = {"queue-sync": 0x5147_0001, "accounting": 0x5147_0002, "reconcile": 0x5147_0003}


@contextmanager
def one_run_per_cluster(name: str, cluster_id: int) -> Iterator[bool]:
    """Whether this is the one ``name`` run of the cluster under way (False: another
    worker, on this host or another, has one): a slow Slurm must not pile runs up.

    A session advisory lock, not a cache key with a timeout: it goes with the worker's
    connection, so a worker killed mid-run (SIGKILL, OOM) does not stop every later run
    until the key expires."""
    key = [_RUNS[name], cluster_id]
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", key)
        acquired = cursor.fetchone()[0]
    try:
        yield acquired
    finally:
        if acquired:
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s, %s)", key)
            except DatabaseError:
                # The connection broke (PostgreSQL restarted): the lock went with it.
                connection.close()


class LockTimeout(Exception):
    """Another writer held the cluster's lock for longer than the wait allowed."""


@contextmanager
def association_changes(cluster_name: str, *, wait_s: float = 300.0) -> Iterator[None]:
    """Hold the cluster's association lock; raise ``LockTimeout`` after ``wait_s``."""
    settings.LOCK_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = settings.LOCK_DIR / f"slurm-associations-{cluster_name}.lock"
    deadline = time.monotonic() + wait_s
    with open(path, "a") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LockTimeout(
                        f"another process has been changing {cluster_name}'s Slurm "
                        f"associations for over {wait_s:.0f} s ({path})"
                    ) from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
