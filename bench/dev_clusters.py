"""The dev clusters a benchmark measures: portal-dev (dev/stack, the host's Slurm) and,
when it runs, portal-next (dev/cluster-next, the other Debian release's Slurm in a root
of its own), each with its tools reached as the cli adapter reaches them.

Import after ``django.setup()``."""

import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings

from clusters.locks import association_changes
from clusters.models import Cluster
from clusters.slurm import client_for
from clusters.slurm.cli import CliClient, slurm_environment
from clusters.slurm.protocol import SlurmClient
from clusters.slurm.rest import RestClient
from portal.devstack import CLUSTER_NEXT, STACK, is_running, script_env


class DevCluster:
    """One dev cluster: its registration (prefixes, REST URL and key) and a short partition."""

    def __init__(self, script: Path, partition: str) -> None:
        env = script_env(script)
        self.partition = partition
        self.cluster = Cluster(
            name=env["SLURM_CLUSTER_NAME"],
            rest_url=env["SLURM_REST_URL"],
            jwt_key_file=env["SLURM_JWT_KEY_FILE"],
            admin_user="slurm",
            command_prefix=env.get("SLURM_COMMAND_PREFIX", ""),
            run_as_prefix=env.get("SLURM_RUN_AS_PREFIX", ""),
        )
        self.tools = CliClient(
            cluster_name=self.cluster.name,
            command_prefix=self.cluster.command_prefix,
            run_as_prefix=self.cluster.run_as_prefix or settings.SLURM_RUN_AS_PREFIX,
            timeout_s=60,
        )

    @property
    def name(self) -> str:
        return self.cluster.name

    def argv(self, argv: list[str], *, as_user: str | None = None) -> list[str]:
        """A tool's command line as the cli adapter runs it: through the cluster's prefix."""
        return self.tools.command(argv, as_user=as_user)

    def run(
        self, argv: list[str], stdin: str | None = None, *, as_user: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(argv, as_user=as_user),
            input=stdin,
            capture_output=True,
            text=True,
            # A user's job name or comment may hold any byte but NUL: never decoded strictly.
            errors="replace",
            check=False,
            env=slurm_environment(),
        )

    def account_remove(self, account: str, *, wait_s: float = 120) -> None:
        """Remove a bench's account (its jobs cancelled before) once none of them is
        pending or running: Slurm refuses to remove an account with active jobs, and
        slurmdbd learns that they ended a while after squeue stops listing them. Said, not
        raised, when it cannot (the run's figures still print)."""
        deadline = time.monotonic() + wait_s
        active = ["squeue", "--noheader", f"--account={account}", "--states=PD,R,CG,S",
                  "--format=%i"]  # fmt: skip
        while self.run(active).stdout.split() and time.monotonic() < deadline:
            time.sleep(1)
        while True:
            with association_changes(self.name):
                removed = self.run(["sacctmgr", "-i", "delete", "account", account])
            said = removed.stdout + removed.stderr
            if "Job(s) active" not in said or time.monotonic() > deadline:
                break
            time.sleep(1)
        if removed.returncode != 0 and "Nothing deleted" not in said:
            message = (removed.stderr or removed.stdout).strip()
            print(f"{self.name}: sacctmgr delete account {account}: {message}", file=sys.stderr)

    def output(
        self, argv: list[str], stdin: str | None = None, *, as_user: str | None = None
    ) -> str:
        """The tool's output; a failure stops the benchmark with the tool's message."""
        result = self.run(argv, stdin, as_user=as_user)
        if result.returncode != 0:
            raise SystemExit(f"{self.name}: {' '.join(argv[:2])} failed: {result.stderr.strip()}")
        return result.stdout

    def raw_output(self, argv: list[str]) -> bytes:
        """The tool's output as it printed it (the portal's listings read bytes); a failure
        stops the benchmark with the tool's message."""
        result = subprocess.run(
            self.argv(argv), capture_output=True, check=False, env=slurm_environment()
        )
        if result.returncode != 0:
            message = result.stderr.decode(errors="replace").strip()
            raise SystemExit(f"{self.name}: {' '.join(argv[:2])} failed: {message}")
        return result.stdout

    def version(self) -> str:
        return self.output(["sinfo", "--version"]).strip()

    def adapters(self, *, timeout_s: float = 60) -> dict[str, SlurmClient]:
        """The portal's client for this cluster through each backend that can reach it."""
        found: dict[str, SlurmClient] = {}
        for backend in Cluster.Backend.values:
            cluster = Cluster(
                name=self.cluster.name,
                backend=backend,
                rest_url=self.cluster.rest_url,
                jwt_key_file=self.cluster.jwt_key_file,
                admin_user="slurm",
                command_prefix=self.cluster.command_prefix,
                run_as_prefix=self.cluster.run_as_prefix,
            )
            try:
                client = client_for(cluster, timeout_s=timeout_s)
                if isinstance(client, RestClient):
                    client.ping()  # a version this client does not speak is said here
            except Exception as exc:  # noqa: BLE001 - an adapter that cannot be built is skipped
                print(f"{self.name} {backend}: not measured ({exc})", file=sys.stderr)
                continue
            found[backend] = client
        return found


def dev_clusters(wanted: str | None = None) -> list[DevCluster]:
    """Each dev cluster that runs (``wanted`` alone when named)."""
    found = [DevCluster(STACK, "debug")]
    if is_running(CLUSTER_NEXT):
        found.append(DevCluster(CLUSTER_NEXT, "short"))
    else:
        print("portal-next: not running (dev/stack start starts it), not measured", file=sys.stderr)
    chosen = [each for each in found if wanted in (None, each.name)]
    if not chosen:
        raise SystemExit(f"no running dev cluster is named {wanted!r}")
    return chosen
