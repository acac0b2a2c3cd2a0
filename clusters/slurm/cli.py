"""The ``cli`` backend: Slurm's command-line tools, run without a shell.

Commands are argument lists; the environment is built from scratch so the
worker's own ``SLURM_*``/``SBATCH_*`` variables and secrets never reach Slurm.
Administrative commands (``sacctmgr``, ``sinfo``) run as the worker's own
user, which must be a Slurm operator; commands for a user's jobs will run
through the configured run-as prefix (``runuser -u {user} --`` in dev).
"""

import os
import shlex
import subprocess
from dataclasses import dataclass

from clusters.slurm.errors import SlurmRejected, SlurmUnavailable
from clusters.slurm.parsing import SINFO_PARTITION_FORMAT, parse_sinfo_partitions
from clusters.slurm.types import PartitionInfo

# Slurm's messages when the controller or the database daemon is not there.
_UNAVAILABLE_MARKERS = (
    "unable to contact slurm controller",
    "connection refused",
    "socket timed out",
    "zero bytes were transmitted",
    "problem talking to the database",
    "slurmdbd: getting db_conn",
    "is down",
    "transport endpoint is not connected",
)


@dataclass(frozen=True)
class CommandResult:
    stdout: str
    stderr: str


def slurm_environment() -> dict[str, str]:
    """A minimal environment for Slurm commands: nothing of the worker's leaks in."""
    return {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "LC_ALL": "C.UTF-8",
    }


class CliClient:
    def __init__(
        self,
        *,
        cluster_name: str,
        run_as_prefix: str,
        timeout_s: float,
        bin_dir: str = "",
    ) -> None:
        self.cluster_name = cluster_name
        self.run_as_prefix = run_as_prefix
        self.timeout_s = timeout_s
        self.bin_dir = bin_dir

    def _command(self, name: str) -> str:
        return os.path.join(self.bin_dir, name) if self.bin_dir else name

    def run_as_argv(self, user: str) -> list[str]:
        """The run-as prefix for ``user`` as arguments (the user name is one argument)."""
        return [part.replace("{user}", user) for part in shlex.split(self.run_as_prefix)]

    def _run(self, argv: list[str], *, stdin: str | None = None) -> CommandResult:
        argv = [self._command(argv[0]), *argv[1:]]
        try:
            completed = subprocess.run(
                argv,
                input=stdin,
                capture_output=True,
                env=slurm_environment(),
                timeout=self.timeout_s,
                check=False,
                text=True,
                errors="replace",
            )
        except subprocess.TimeoutExpired as exc:
            raise SlurmUnavailable(f"{argv[0]} gave no answer within {self.timeout_s:g} s") from exc
        except FileNotFoundError as exc:
            raise SlurmUnavailable(f"{argv[0]} is not installed on this worker") from exc
        if completed.returncode != 0:
            message = (completed.stderr or completed.stdout).strip() or (
                f"{argv[0]} exited with status {completed.returncode}"
            )
            lowered = message.lower()
            if any(marker in lowered for marker in _UNAVAILABLE_MARKERS):
                raise SlurmUnavailable(message)
            raise SlurmRejected(message)
        return CommandResult(stdout=completed.stdout, stderr=completed.stderr)

    def ping(self) -> None:
        result = self._run(["scontrol", "ping"])
        if " is UP" not in result.stdout:
            raise SlurmUnavailable(result.stdout.strip() or "slurmctld did not answer the ping")

    def list_partitions(self) -> list[PartitionInfo]:
        result = self._run(["sinfo", "--noheader", "--all", f"--format={SINFO_PARTITION_FORMAT}"])
        return parse_sinfo_partitions(result.stdout)

    def _sacctmgr_lines(self, *args: str) -> list[str]:
        result = self._run(["sacctmgr", "--noheader", "--parsable2", *args])
        return [line for line in result.stdout.splitlines() if line.strip()]

    def ensure_account(self, account: str, *, description: str) -> bool:
        cluster = f"cluster={self.cluster_name}"
        if self._sacctmgr_lines(
            "show", "association", "where", cluster, f"account={account}", "format=Account"
        ):
            return False
        self._run(
            [
                "sacctmgr",
                "--immediate",
                "add",
                "account",
                account,
                cluster,
                f"description={description}",
                "organization=portal",
            ]
        )
        return True

    def ensure_user_association(self, *, user: str, account: str) -> bool:
        cluster = f"cluster={self.cluster_name}"
        if self._sacctmgr_lines(
            "show",
            "association",
            "where",
            cluster,
            f"account={account}",
            f"user={user}",
            "format=User",
        ):
            return False
        self._run(["sacctmgr", "--immediate", "add", "user", user, f"account={account}", cluster])
        return True
