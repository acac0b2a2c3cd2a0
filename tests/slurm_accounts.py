"""Changes a test makes to a dev cluster's Slurm accounts by hand, under the same lock
as the reconciler's: two test processes changing associations at once lose rows in
slurmdbd (see ``clusters/locks.py``). Each cluster is reached as the worker reaches it:
its operator commands go through its command prefix (``clusters/prefixes.py``)."""

import subprocess
from dataclasses import dataclass

from clusters.locks import association_changes
from clusters.prefixes import command_prefix_argv
from portal.devstack import DEV_CLUSTER

__all__ = ["DEV", "DEV_CLUSTER", "SlurmOperator", "account_remove", "sacctmgr_change"]


@dataclass(frozen=True)
class SlurmOperator:
    """A cluster's Slurm tools, run as the worker (an operator) runs them."""

    cluster_name: str
    command_prefix: str = ""  # empty: the host's own tools

    def run(self, *argv: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        command = [*command_prefix_argv(self.command_prefix), *argv]
        return subprocess.run(command, capture_output=True, text=True, check=check)

    def sacctmgr_change(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        """``sacctmgr --immediate <args>`` while holding the cluster's association lock."""
        with association_changes(self.cluster_name):
            return self.run("sacctmgr", "--immediate", *args, check=check)

    def account_remove(self, account: str) -> None:
        """Cancel the account's jobs and delete it from Slurm, if it is there (a test
        that never put it there waits for no lock)."""
        shown = self.run(
            "sacctmgr", "--noheader", "--parsable2", "show", "account", account, "format=Account"
        )
        if shown.stdout.strip():
            self.run("scancel", f"--account={account}")
            delete = ("sacctmgr", "--immediate", "delete", "account", account)
            with association_changes(self.cluster_name):
                # Tried first: the defaults are read and moved only when Slurm refuses.
                if self.run(*delete).returncode != 0:
                    self._move_defaults_off(account)
                    self.run(*delete)

    def _move_defaults_off(self, account: str) -> None:
        """Slurm refuses to delete an account that is the default of a user who has
        others (a user's first association becomes their default): each such user's
        default moves to another of their accounts. (Under the association lock.)"""
        users = self.run(
            "sacctmgr", "--noheader", "--parsable2", "show", "user", "format=User,DefaultAccount"
        ).stdout.splitlines()
        cluster = f"cluster={self.cluster_name}"
        for user in [line.split("|")[0] for line in users if line.endswith(f"|{account}")]:
            others = [
                other
                for other in self.run(
                    "sacctmgr", "--noheader", "--parsable2", "show", "association", "where",
                    f"user={user}", cluster, "format=Account",
                ).stdout.split()
                if other != account
            ]  # fmt: skip
            if others:
                self.run(
                    "sacctmgr", "--immediate", "modify", "user", "where", f"name={user}",
                    cluster, "set", f"DefaultAccount={others[0]}",
                )  # fmt: skip


DEV = SlurmOperator(DEV_CLUSTER)  # the dev stack's cluster, on the host's own tools


def sacctmgr_change(*args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    """``sacctmgr --immediate <args>`` on the dev cluster, under its association lock."""
    return DEV.sacctmgr_change(*args, check=check)


def account_remove(account: str) -> None:
    """``SlurmOperator.account_remove`` on the dev cluster."""
    DEV.account_remove(account)
