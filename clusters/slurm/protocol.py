"""The one protocol every Slurm backend implements."""

from typing import Protocol

from clusters.slurm.types import PartitionInfo


class SlurmClient(Protocol):
    cluster_name: str

    def ping(self) -> None:
        """Return when the controller answers; raise ``SlurmUnavailable`` otherwise."""

    def list_partitions(self) -> list[PartitionInfo]:
        """Every partition with its time limit and GPU counts."""

    def ensure_account(self, account: str, *, description: str) -> bool:
        """Create the Slurm account on this cluster if absent; True when it was created."""

    def ensure_user_association(self, *, user: str, account: str) -> bool:
        """Give a user an association with an account if absent; True when it was created."""
