"""The association lock: one writer of a cluster's Slurm associations at a time, across
processes."""

import subprocess
import sys
import textwrap

import pytest
from django.test import override_settings

from clusters.locks import LockTimeout, association_changes


def hold_in_another_process(lock_dir, cluster: str) -> subprocess.Popen[str]:
    """A process that takes the cluster's lock file, says so on stdout and holds it until
    its stdin closes."""
    code = textwrap.dedent(f"""
        import fcntl, sys
        handle = open({str(lock_dir / f"slurm-associations-{cluster}.lock")!r}, "a")
        fcntl.flock(handle, fcntl.LOCK_EX)
        print("held", flush=True)
        sys.stdin.read()
    """)
    holder = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def test_a_second_writer_waits_and_gives_up_with_a_message_naming_the_cluster(tmp_path):
    with override_settings(LOCK_DIR=tmp_path / "locks"):
        with association_changes("alpha"):
            pass
        holder = hold_in_another_process(tmp_path / "locks", "alpha")
        try:
            with (
                pytest.raises(LockTimeout, match="changing alpha's Slurm associations"),
                association_changes("alpha", wait_s=0.3),
            ):
                pass
            with association_changes("beta", wait_s=0.3):
                pass  # another cluster's lock is free
        finally:
            holder.communicate("")
        with association_changes("alpha", wait_s=0.3):
            pass  # free again once the holder ended
    assert oct((tmp_path / "locks").stat().st_mode & 0o777) == "0o700"
