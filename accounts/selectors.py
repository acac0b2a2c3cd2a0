"""Reads of projects and allocations shared by pages and the API."""

import datetime as dt
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from django.conf import settings
from django.db.models import Prefetch, Q, QuerySet, Sum
from django.db.models.functions import Coalesce, TruncDate, TruncMonth
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.translation import gettext as _

from accounts.errors import NoActiveAllocation
from accounts.models import (
    BALANCE_FIELDS,
    LEDGER_TOTALS,
    AdoptedAccount,
    Allocation,
    AllocationRequest,
    LedgerEntry,
    Membership,
    Project,
    ReconcileReport,
    SlurmAccountListing,
    User,
    available_gpu_seconds,
)
from accounts.permissions import is_allocation_manager, led_project_ids
from audit.models import AuditEvent
from clusters.models import Cluster
from clusters.selectors import clusters_enabled
from clusters.slurm.types import PORTAL_ORGANIZATION


def projects_of(user: User) -> QuerySet[Project]:
    """The projects ``user`` is a member of, by name."""
    return Project.objects.filter(memberships__user=user).order_by("name")


def memberships_of_user(user: User) -> QuerySet[Membership]:
    """The user's memberships with their projects and allocations, by project name."""
    return (
        Membership.objects.filter(user=user)
        .select_related("project")
        .prefetch_related(
            Prefetch(
                "project__allocations",
                queryset=Allocation.objects.select_related("cluster").order_by("-starts_on"),
            )
        )
        .order_by("project__name")
    )


@dataclass(frozen=True)
class Balance:
    """GPU-seconds of one allocation or a sum of them; hours for display."""

    granted_gpu_seconds: int = 0
    used_gpu_seconds: int = 0
    held_gpu_seconds: int = 0
    expired_gpu_seconds: int = 0

    @property
    def available_gpu_seconds(self) -> int:
        return available_gpu_seconds(self)

    def as_gpu_hours(self) -> dict[str, float]:
        """The API's balance shape (DESIGN: granted, used, held, available)."""
        return {
            "granted_gpu_hours": self.granted_gpu_seconds / 3600,
            "used_gpu_hours": self.used_gpu_seconds / 3600,
            "held_gpu_hours": self.held_gpu_seconds / 3600,
            "available_gpu_hours": self.available_gpu_seconds / 3600,
        }


def in_force(*, on: dt.date | None = None, prefix: str = "") -> Q:
    """The allocations that pay for work on a day (today unless given): active, begun and
    not ended. The one definition of when a grant counts: in every "available" figure,
    for new jobs and in Slurm's limits (the reconciler raises them on the first day). An
    active allocation that has not begun is granted, not available: pages say when it
    starts. ``prefix`` reaches allocations through a relation (``"allocations__"``)."""
    day = on or timezone.localdate()
    return Q(
        **{
            f"{prefix}state": Allocation.State.ACTIVE,
            f"{prefix}starts_on__lte": day,
            f"{prefix}ends_on__gt": day,
        }
    )


def is_in_force(allocation: Allocation, *, on: dt.date | None = None) -> bool:
    """``in_force`` of one allocation already loaded."""
    day = on or timezone.localdate()
    return (
        allocation.state == Allocation.State.ACTIVE
        and allocation.starts_on <= day < allocation.ends_on
    )


def is_upcoming(allocation: Allocation, *, on: dt.date | None = None) -> bool:
    """Granted and active, but its period begins after the day (today unless given)."""
    day = on or timezone.localdate()
    return allocation.state == Allocation.State.ACTIVE and allocation.starts_on > day


def allocation_status(allocation: Allocation, *, on: dt.date | None = None) -> str:
    """The allocation's state in words, as pages and the console show it: an active one
    "starts on …" until its first day and has "ended on …" after its last (until the
    hourly expiry lapses it), so nobody takes a grant for next year as spendable now."""
    day = on or timezone.localdate()
    if allocation.state == Allocation.State.ACTIVE:
        if allocation.starts_on > day:
            return _("Starts on %(day)s") % {"day": date_format(allocation.starts_on)}
        if allocation.ends_on <= day:
            return _("Ended on %(day)s") % {"day": date_format(allocation.ends_on)}
    return str(allocation.get_state_display())


def allocation_balance(allocation: Allocation) -> Balance:
    return Balance(**{field: getattr(allocation, field) for field in BALANCE_FIELDS})


def project_balance(project: Project, *, cluster: Cluster | None = None) -> Balance:
    """The sum over the project's allocations in force today (on one cluster if given):
    a grant that has not begun is not in it."""
    allocations = Allocation.objects.filter(in_force(), project=project)
    if cluster is not None:
        allocations = allocations.filter(cluster=cluster)
    totals = allocations.aggregate(**{field: Sum(field) for field in BALANCE_FIELDS})
    return Balance(**{field: totals[field] or 0 for field in BALANCE_FIELDS})


def ledger_drift() -> list[tuple[int, str, int, int]]:
    """Allocations whose cached totals differ from their entries' sums:
    (allocation id, field, cached, summed). Empty when the books are consistent."""
    kinds: dict[str, tuple[list[str], int]] = {}
    for kind, (field, sign) in LEDGER_TOTALS.items():
        kinds.setdefault(field, ([], sign))[0].append(kind)
    sums = Allocation.objects.annotate(
        **{
            f"sum_{field}": Coalesce(
                Sum("entries__gpu_seconds", filter=Q(entries__kind__in=entry_kinds)), 0
            )
            * sign
            for field, (entry_kinds, sign) in kinds.items()
        }
    )
    drift = []
    for allocation in sums:
        for field in kinds:
            cached, summed = getattr(allocation, field), getattr(allocation, f"sum_{field}")
            if cached != summed:
                drift.append((allocation.pk, field, cached, summed))
    return drift


USAGE_GROUPS = {
    "user": "user__username",
    "partition": "partition__name",
    "month": "month",
}


def project_usage(project: Project, *, group_by: str) -> list[tuple[object, float]]:
    """GPU-hours charged to the project, by user, partition or month, largest first
    (months in order). Charges of work outside the portal count under no user."""
    if group_by not in USAGE_GROUPS:
        raise ValueError(f"group_by must be one of {', '.join(USAGE_GROUPS)}")
    key = USAGE_GROUPS[group_by]
    charges = LedgerEntry.objects.filter(
        allocation__project=project, kind=LedgerEntry.Kind.CHARGE
    ).annotate(month=TruncMonth("created_at"))
    rows = (
        charges.values(key)
        .annotate(used=Sum("gpu_seconds"))
        .order_by(key if group_by == "month" else "used")
    )
    return [(row[key], -row["used"] / 3600) for row in rows]


def project_upcoming_allocations(project: Project) -> QuerySet[Allocation]:
    """The project's granted allocations that have not begun, the soonest first."""
    return (
        Allocation.objects.filter(
            project=project, state=Allocation.State.ACTIVE, starts_on__gt=timezone.localdate()
        )
        .select_related("cluster")
        .order_by("starts_on", "cluster__name")
    )


def project_active_allocations(project: Project) -> QuerySet[Allocation]:
    """The project's allocations in force with their clusters, the soonest to end first."""
    return (
        Allocation.objects.filter(in_force(), project=project)
        .select_related("cluster")
        .order_by("ends_on", "cluster__name")
    )


class MonthlyUsage(NamedTuple):
    """GPU-seconds charged to one project for one user's work in one month."""

    project: str  # the project's slug
    month: dt.date  # its first day
    username: str | None  # None: work of no portal user (e.g. submitted outside the portal)
    gpu_seconds: int

    @property
    def gpu_hours(self) -> float:
        return self.gpu_seconds / 3600


def usage_by_month_and_user(projects: QuerySet[Project]) -> Iterator[MonthlyUsage]:
    """Charges per project, month and user, in that order: one aggregate query,
    streamed, so an export of many projects never holds every row in memory."""
    rows = (
        LedgerEntry.objects.filter(allocation__project__in=projects, kind=LedgerEntry.Kind.CHARGE)
        .annotate(month=TruncMonth("created_at"))
        .values_list("allocation__project__slug", "month", "user__username")
        .annotate(used=Sum("gpu_seconds"))
        .order_by("allocation__project__slug", "month", "user__username")
    )
    for slug, month, username, used in rows.iterator():
        # Charges are negative entries; TruncMonth is in the current time zone.
        yield MonthlyUsage(slug, month.date(), username, -used)


def project_usage_by_month_and_user(project: Project) -> list[MonthlyUsage]:
    """GPU-hours charged to the project per month and user (the usage chart)."""
    return list(usage_by_month_and_user(Project.objects.filter(pk=project.pk)))


def charges_of_projects(projects: QuerySet[Project]) -> QuerySet[LedgerEntry]:
    """Every charge entry of the projects, oldest first, with what a report shows of it."""
    return (
        LedgerEntry.objects.filter(allocation__project__in=projects, kind=LedgerEntry.Kind.CHARGE)
        .select_related("allocation__project", "allocation__cluster", "user", "partition")
        .order_by("created_at", "id")
    )


def allocation_daily_usage(allocation: Allocation) -> dict[dt.date, int]:
    """GPU-seconds charged to the allocation per day (days with none left out)."""
    rows = (
        LedgerEntry.objects.filter(allocation=allocation, kind=LedgerEntry.Kind.CHARGE)
        .annotate(day=TruncDate("created_at"))
        .values("day")
        .annotate(used=Sum("gpu_seconds"))
        .order_by("day")
    )
    return {row["day"]: -row["used"] for row in rows}


def last_reconcile_reports() -> list[tuple[Cluster, ReconcileReport | None]]:
    """Each enabled cluster with the report of its last reconcile run (None before the
    first): what the drift page shows instead of asking Slurm."""
    return [
        (cluster, getattr(cluster, "reconcile_report", None))
        for cluster in clusters_enabled().select_related("reconcile_report")
    ]


@dataclass(frozen=True)
class ListedAccount:
    """One account of a cluster's last listing, with what the portal has made of it since."""

    row: dict
    adoption: AdoptedAccount | None

    @property
    def is_portals(self) -> bool:
        return self.row["organization"] == PORTAL_ORGANIZATION

    @property
    def adoptable(self) -> bool:
        return not (self.is_portals or self.adoption or self.row["problem"])


def account_listings() -> list[tuple[Cluster, SlurmAccountListing | None, list[ListedAccount]]]:
    """Each enabled cluster with its last account listing (None before the first) and its
    accounts, each with its adoption there if any: what the import page shows instead of
    asking Slurm."""
    adoptions = {
        (a.cluster_id, a.account): a for a in AdoptedAccount.objects.select_related("project")
    }
    listed = []
    for cluster in clusters_enabled().select_related("account_listing"):
        listing = getattr(cluster, "account_listing", None)
        rows = listing.accounts if listing is not None else []
        accounts = [ListedAccount(row, adoptions.get((cluster.pk, row["name"]))) for row in rows]
        listed.append((cluster, listing, accounts))
    return listed


def active_allocations(project: Project, *, on: dt.date | None = None) -> QuerySet[Allocation]:
    """The allocations that pay for the project's work on a day, one per cluster at most."""
    return Allocation.objects.filter(in_force(on=on), project=project)


def active_allocation(
    *, project: Project, cluster: Cluster, on: dt.date | None = None
) -> Allocation:
    """The allocation that pays for the project's work on the cluster on a day."""
    day = on or timezone.localdate()
    allocation = (
        Allocation.objects.filter(in_force(on=day), project=project, cluster=cluster)
        .order_by("ends_on")
        .first()
    )
    if allocation is None:
        raise NoActiveAllocation(
            _("%(project)s has no active allocation on %(cluster)s on %(day)s.")
            % {"project": project, "cluster": cluster, "day": date_format(day)}
        )
    return allocation


def allocation_requests_for(user: User) -> QuerySet[AllocationRequest]:
    """Every request for allocation managers; the requests of the projects a user
    leads for anyone else."""
    requests = AllocationRequest.objects.select_related(
        "project", "cluster", "requested_by", "decided_by"
    ).order_by("-created_at", "-id")
    if is_allocation_manager(user):
        return requests
    return requests.filter(project_id__in=led_project_ids(user))


def max_submit_jobs_for(*, project: Project, cluster: Cluster) -> int:
    """The ``MaxSubmitJobs`` the project's account should have on the cluster: each of its
    users may have this many jobs (every array task counts) pending or running in Slurm.
    The portal checks a new job against the same number (jobs.requests)."""
    # One site-wide number for now (PORTAL_SLURM_MAX_SUBMIT_JOBS), the same for every
    # project and cluster; the arguments are where a per-project one would come from.
    return settings.SLURM_MAX_SUBMIT_JOBS


def account_users_since(
    projects: Collection[Project], *, cluster: Cluster, since: dt.datetime
) -> dict[str, set[str]]:
    """By Slurm account, the users who may have run work under it since ``since``: the
    POSIX names of the project's members, of those whose membership was removed since
    (audited), and of the users a site had given an adopted account and that were kept
    (``AdoptedAccount.kept_users``). Only their work is the project's to pay for."""
    accounts = {project.slurm_account: project for project in projects}
    users: dict[str, set[str]] = {account: set() for account in accounts}
    members = Membership.objects.filter(project__in=accounts.values()).values_list(
        "project__slurm_account", "user__posix_username"
    )
    removed = AuditEvent.objects.filter(
        action=AuditEvent.Action.MEMBERSHIP_REMOVE, scope__in=accounts, at__gte=since
    ).values_list("scope", "on_behalf_of__posix_username")
    for account, name in [*members, *removed]:
        if name:
            users[account].add(name)
    for account, kept in AdoptedAccount.objects.filter(
        cluster=cluster, account__in=accounts
    ).values_list("account", "kept_users"):
        users[account].update(name for name in kept or [] if isinstance(name, str))
    return users
