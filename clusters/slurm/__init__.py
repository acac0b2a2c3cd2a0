"""The only code in the portal that talks to Slurm.

``client_for(cluster)`` returns the client of the cluster's backend; every
client implements ``SlurmClient`` and raises only the errors in ``errors``.
"""

from django.conf import settings

from clusters.models import Cluster
from clusters.slurm.cli import CliClient
from clusters.slurm.errors import (
    NotFound,
    SlurmError,
    SlurmOutputInvalid,
    SlurmRejected,
    SlurmUnavailable,
)
from clusters.slurm.protocol import SlurmClient
from clusters.slurm.rest import RestClient
from clusters.slurm.types import PartitionInfo

__all__ = [
    "NotFound",
    "PartitionInfo",
    "SlurmClient",
    "SlurmError",
    "SlurmOutputInvalid",
    "SlurmRejected",
    "SlurmUnavailable",
    "client_for",
    "shared_client_for",
]


def client_for(cluster: Cluster, *, timeout_s: float | None = None) -> SlurmClient:
    timeout_s = timeout_s or settings.SLURM_COMMAND_TIMEOUT_S
    if cluster.backend == Cluster.Backend.REST:
        return RestClient(
            cluster_name=cluster.name,
            base_url=cluster.rest_url,
            jwt_key_file=cluster.jwt_key_file,
            admin_user=cluster.admin_user,
            timeout_s=timeout_s,
            api_version=cluster.rest_api_version or None,
        )
    if cluster.backend == Cluster.Backend.CLI:
        return CliClient(
            cluster_name=cluster.name,
            command_prefix=cluster.command_prefix,
            run_as_prefix=cluster.run_as_prefix or settings.SLURM_RUN_AS_PREFIX,
            timeout_s=timeout_s,
            # The global folder is the worker's; a cluster behind a prefix finds its tools
            # by the prefix (see Cluster.command_prefix).
            bin_dir="" if cluster.command_prefix else settings.SLURM_BIN_DIR,
        )
    raise ValueError(f"cluster {cluster.name} has an unknown backend {cluster.backend!r}")


_shared: dict[tuple, SlurmClient] = {}


def shared_client_for(cluster: Cluster) -> SlurmClient:
    """One long-lived client per cluster and process, for the periodic queue listing and
    the submissions: the rest client then remembers its last answer (slurmrestd says 304
    when nothing changed), keeps its connection, its users' tokens and the API version it
    found, instead of asking for /openapi/v3 again for each job."""
    key = (
        settings.SLURM_COMMAND_TIMEOUT_S,
        cluster.pk,
        cluster.backend,
        cluster.rest_url,
        cluster.rest_api_version,
        cluster.jwt_key_file,
        cluster.admin_user,
        cluster.command_prefix,
        cluster.run_as_prefix,
    )
    client = _shared.get(key)
    if client is None:
        client = _shared[key] = client_for(cluster)
    return client
