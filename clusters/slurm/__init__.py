"""The only code in the portal that talks to Slurm.

``client_for(cluster)`` returns the client of the cluster's backend; every
client implements ``SlurmClient`` and raises only the errors in ``errors``.
"""

from django.conf import settings

from clusters.models import Cluster
from clusters.slurm.cli import CliClient
from clusters.slurm.errors import NotFound, SlurmError, SlurmRejected, SlurmUnavailable
from clusters.slurm.protocol import SlurmClient
from clusters.slurm.types import PartitionInfo

__all__ = [
    "NotFound",
    "PartitionInfo",
    "SlurmClient",
    "SlurmError",
    "SlurmRejected",
    "SlurmUnavailable",
    "client_for",
]


def client_for(cluster: Cluster, *, timeout_s: float | None = None) -> SlurmClient:
    if cluster.backend == Cluster.Backend.CLI:
        return CliClient(
            cluster_name=cluster.name,
            run_as_prefix=settings.SLURM_RUN_AS_PREFIX,
            timeout_s=timeout_s or settings.SLURM_COMMAND_TIMEOUT_S,
            bin_dir=settings.SLURM_BIN_DIR,
        )
    raise ValueError(f"cluster {cluster.name} has an unknown backend {cluster.backend!r}")
