"""Changes a test makes to the dev cluster's Slurm accounts by hand, under the same lock
as the reconciler's: two test processes changing associations at once lose rows in
slurmdbd (see ``clusters/locks.py``)."""

import subprocess

from clusters.locks import association_changes

DEV_CLUSTER = "portal-dev"  # the dev stack's cluster


def sacctmgr_change(*args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    """``sacctmgr --immediate <args>`` while holding the dev cluster's association lock."""
    with association_changes(DEV_CLUSTER):
        return subprocess.run(
            ["sacctmgr", "--immediate", *args], capture_output=True, text=True, check=check
        )


def account_remove(account: str) -> None:
    """Cancel the account's jobs and delete it from Slurm, if it is there (a test that
    never put it there waits for no lock)."""
    shown = subprocess.run(
        ["sacctmgr", "--noheader", "--parsable2", "show", "account", account, "format=Account"],
        capture_output=True,
        text=True,
    )
    if shown.stdout.strip():
        subprocess.run(["scancel", f"--account={account}"], capture_output=True)
        sacctmgr_change("delete", "account", account)
