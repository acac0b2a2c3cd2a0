"""The one protocol every Slurm backend implements.

Every method raises only the errors of ``clusters.slurm.errors``:
``SlurmUnavailable`` when Slurm cannot be reached or does not answer in time
(for a change, the outcome is then unknown, never "failed"), ``SlurmRejected``
with Slurm's own message when it refuses, ``NotFound`` when a job or account
does not exist.
"""

import datetime as dt
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Protocol

from clusters.slurm.types import (
    AccountingEntry,
    AccountLimits,
    Listing,
    ListingStream,
    MinutesUsed,
    NodeInfo,
    PartitionInfo,
    QueueEntry,
    SlurmAccount,
    StartEstimate,
    SubmitRequest,
)


class SlurmClient(Protocol):
    cluster_name: str

    def ping(self) -> None:
        """Return when the controller answers."""

    def submit(self, request: SubmitRequest) -> int:
        """Queue the batch job as ``request.user``; return its Slurm job id."""

    def find_by_comment(
        self, comment: str, *, user: str, account: str, since: dt.datetime
    ) -> list[int]:
        """Ids, lowest first, of the jobs ``user`` submitted under ``account`` since
        ``since`` whose comment is exactly ``comment``.

        The queue is asked first, then accounting (for a job that already ended). A
        comment is anyone's to write, so the user and account must match too; and
        accounting is read for that user and account since ``since`` only, so the
        look-up costs the same however long the cluster's history is.
        """

    def queue(self) -> Listing[QueueEntry]:
        """Every job in the cluster's queue, in one call. Records that cannot be read, and
        every record of a job id listed twice, are in ``refused``, not among the entries
        (``clusters.slurm.types.Refused``)."""

    def queue_stream(self) -> AbstractContextManager[ListingStream[QueueEntry]]:
        """The listing ``queue`` reads, its entries yielded as they are read: a backend
        that reads Slurm's answer as it comes (cli) lets the caller work on the first
        jobs while Slurm still sends the last. The listing is asked for on entering the
        block. Read to its end, the iterator raises like ``queue`` if the listing failed
        at any point, so only a listing read to its end without an error is whole;
        leaving the block early stops the read. The records it could not read are in its
        ``refused`` once it has been read; a job id listed twice is the caller's to find
        (``clusters.slurm.types.queue_checked``). Its entries' ``name`` and ``comment``
        may be "" (the cli backend leaves the users' texts out: the queue sync reads
        neither)."""

    def accounting_since(self, since: dt.datetime) -> Listing[AccountingEntry]:
        """Accounting's record of every run of every job that was submitted, eligible,
        running or ended since ``since``: a requeued job once per run (each with its own
        submit time, ``types.run_key``). Records that cannot be read, a run listed twice
        and every run of a job id listed for two users are in ``refused``
        (``types.accounting_checked``)."""

    def cancel(self, job_id: int, *, user: str) -> None:
        """Cancel a job as its owner; a job that already ended is not an error."""

    def hold(self, job_id: int, *, user: str) -> None:
        """Keep a pending job from starting."""

    def release(self, job_id: int, *, user: str) -> None:
        """Let a held job start again."""

    def list_partitions(self) -> list[PartitionInfo]:
        """Every partition with its time limit and GPU counts."""

    def nodes(self) -> list[NodeInfo]:
        """Every node with its partitions, state, reason, GPUs and CPUs, in one call."""

    def devices_constrained(self) -> bool | None:
        """Whether a job reaches only the GPUs Slurm gave it (task/cgroup with
        ``ConstrainDevices=yes``); None when the adapter cannot tell."""

    def estimate_start(self, request: SubmitRequest) -> StartEstimate:
        """When the job would start if submitted now (``--test-only``); submits nothing."""

    def ensure_account(self, account: str, *, description: str, parent: str = "root") -> bool:
        """Create the Slurm account on this cluster under ``parent`` (which must exist) if
        absent; True when it was created. An account that exists stays where it is."""

    def account_organization(self, account: str) -> str:
        """The account's organization (``PORTAL_ORGANIZATION`` when the portal created it);
        NotFound if Slurm has no such account."""

    def ensure_user_association(self, *, user: str, account: str) -> bool:
        """Give a user an association with an account if absent; True when it was created."""

    def account_limits(self, account: str) -> AccountLimits:
        """Who has an association under the account, the limits of the account's own
        association and each user's own GPU- and CPU-minutes limits, in one read; NotFound if Slurm
        has no such account on this cluster."""

    def minutes_used(self, account: str) -> MinutesUsed:
        """The account's raw GPU and CPU usage in minutes, as Slurm counts it against its
        limits, with each of its users' raw GPU- and CPU-minutes; NotFound if there is no such
        account."""

    def remove_user_association(self, *, user: str, account: str) -> bool:
        """Remove a user's association with an account; True when there was one.

        When it is the user's default account and they have another, the other
        becomes their default first (Slurm refuses otherwise).
        """

    def set_account_limits(
        self,
        account: str,
        *,
        minutes: Mapping[str, int | None] | None = None,
        jobs: Mapping[str, int | None] | None = None,
    ) -> None:
        """Set limits of the account's own association in one change, the others kept:
        ``minutes`` by TRES name (``gres/gpu``, ``cpu``: its ``GrpTRESMins``), ``jobs``
        by the names of ``AccountLimits`` (``MaxSubmitJobs`` and the ``job_counts``,
        ``GrpSubmitJobs`` and ``GrpJobs``). None removes a limit."""

    def set_user_limits(
        self, *, user: str, account: str, minutes: Mapping[str, int | None]
    ) -> None:
        """Set the ``GrpTRESMins`` of the user's own association under the account (a
        member's cap) by TRES name (``gres/gpu``, ``cpu``; None removes one), in one
        change, the TRES not named and the other limits kept; NotFound if the user has no
        association there."""

    def list_accounts(self) -> list[SlurmAccount]:
        """Every account with an association on this cluster but ``root``, by name, with
        its users and its own limits: what a site's cluster already has."""
