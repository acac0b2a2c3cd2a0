"""One writer at a time for a cluster's Slurm accounts and associations.

slurmdbd keeps associations as a nested set and does not serialise changes from
two clients: an account added while another client deleted one was seen to keep
its association and lose its account row, after which no user could be added to
it and it could not be deleted. The portal's own writer (the reconciler) holds
this lock while it changes a cluster; a lock file under ``LOCK_DIR`` covers every
process on the workers' host, which is where the reconciler runs.
"""

import fcntl
import time
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings


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
