"""Make Slurm's accounts, associations and limits match the portal (portal → Slurm only).

For each project with an active allocation on a cluster: its Slurm account
exists, every member with a POSIX user has an association and nobody else
does, and the account's ``GrpTRESMins=gres/gpu=G,cpu=C`` lets Slurm run what
the portal accepted but stops work submitted outside the portal once the
balance is spent. Each limit is Slurm's own raw usage (which decays) plus what
the portal still covers, recomputed every run; it is never read back into the
ledger. ``reconcile(..., dry_run=True)`` only reports.

A member capped on the project's allocation (``accounts.caps``) gets the same kind of
limits on their own association under the account: their raw GPU-minutes plus what the
cap still covers at the cheapest GPU weight, and their raw CPU-minutes plus what it
covers at the cheapest CPU-hour rate (as the account's ``cpu=``), so plain ``sbatch`` by
that member stops at the cap, a CPU-only job too, while teammates' work goes on;
lifting the cap removes both.

Only allocations in force count (``accounts.selectors.in_force``): a grant for
next year raises no limit this year; the first run on its first day does. A project
with no allocation in force on a cluster (it expired, was revoked, or the next one has
not started) has its account's new work blocked
(``plan_new_work``): Slurm refuses new submissions and starts none of the
queued jobs, while running jobs go on to the end (lowering ``GrpTRESMins``
instead would have Slurm kill them). An active allocation lifts the block.

The portal charges a job its GPUs at the partition's billing weight plus its
CPUs at the partition's CPU-hour rate; Slurm counts GPU and CPU minutes apart,
so the balance becomes a ceiling on each: ``G`` as many GPU-minutes as it
buys, ``C`` as many CPU-minutes. Neither can block a job the portal priced
(its GPUs and its CPUs each cost at most the whole price), and work from
outside the portal is bounded by the balance once on GPUs and once on CPUs,
not free. The account's ``MaxSubmitJobs`` (inherited by each member's
association; Slurm counts every array task) keeps a script from flooding
slurmctld; the portal refuses an array over it before it is saved.

The portal changes only accounts it created (organization ``portal``) and those an
allocation manager adopted on that cluster (``AdoptedAccount``, see
``accounts.adoption``). A project bound to an account that a site made by hand and
nobody adopted — someone else's budget — gets no users, associations or limits: the
run reports it as an error and leaves the account alone, and the workers estimate and
submit no job under it (``account_check``, used by ``jobs.submission``). An adopted account is
managed as the portal's own, except that the users the site had associated with it
when it was adopted who are not the project's members are kept (and reported),
unless the adoption said to remove them.

The portal creates its accounts under the cluster's ``parent_account``; when the
cluster has no such account the run reports it for each account it would have
created, and creates neither: the parent is a branch of the site's tree, with the
site's shares and limits, and not the portal's to invent.

Every run stores its report (``ReconcileReport``, one per cluster): the admin
console's drift page shows the last one, as of when it ran, and asks Slurm
nothing itself.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from functools import partial

from django.db.models import Min
from django.utils import timezone

from accounts.caps import member_caps_covering
from accounts.errors import NoActiveAllocation
from accounts.models import AdoptedAccount, Project, ReconcileReport
from accounts.selectors import (
    active_allocation,
    in_force,
    max_submit_jobs_for,
    project_balance,
)
from clusters.locks import LockTimeout, association_changes
from clusters.models import DEFAULT_CPU_HOUR_RATE, Cluster
from clusters.slurm import NotFound, SlurmClient, SlurmError, client_for
from clusters.slurm.types import PORTAL_ORGANIZATION, AccountLimits, MinutesUsed

# How long a run waits for another writer of the cluster's associations.
LOCK_WAIT_S = 300.0


class NotThePortalsAccount(Exception):
    """The project's Slurm account exists but the portal neither created nor adopted it."""


class ParentMissing(Exception):
    """The cluster has no account of its ``parent_account`` name to create accounts under."""


class Run:
    """What one run knows of a cluster besides Slurm: its adoptions, and (asked once)
    whether the parent of the portal's new accounts is there."""

    def __init__(self, client: SlurmClient, cluster: Cluster) -> None:
        self.client = client
        self.cluster = cluster
        self.adoptions = {
            adoption.account: adoption
            for adoption in AdoptedAccount.objects.filter(cluster=cluster)
        }
        self._parent_present: bool | None = None
        # Each account's fair-share standing as Slurm gave it with its usage (the
        # project page shows it in words: accounts.fair_share).
        self.standings: dict[str, dict[str, float | None]] = {}

    def check_parent(self) -> None:
        parent = self.cluster.parent_account
        if self._parent_present is None:
            try:
                self.client.account_limits(parent)
                self._parent_present = True
            except NotFound:
                self._parent_present = False
        if not self._parent_present:
            raise ParentMissing(
                f"the cluster's parent account {parent!r} does not exist on "
                f"{self.cluster.name}, so the portal cannot create this account under it; "
                f"add it (sacctmgr add account {parent} cluster={self.cluster.name}) or "
                "set the cluster's parent account in the console"
            )


@dataclass(frozen=True)
class Action:
    account: str
    # "add account", "add user", "remove user", "set limit" (GPU minutes),
    # "set cpu limit", "set max submit jobs", "set user limit" and "set user cpu limit"
    # (a member's cap, in GPU and CPU minutes on their own association), "block new
    # work", "unblock new work"
    kind: str
    user: str = ""
    minutes: int | None = None  # the new value of a limit ("set …"): minutes, or jobs
    was: int | None = None
    # "block/unblock new work": the GrpSubmitJobs and GrpJobs to set (None clears).
    job_limits: tuple[tuple[str, int | None], ...] = ()

    def __str__(self) -> str:
        if self.kind == "set limit":
            return f"{self.account}: GrpTRESMins gres/gpu {self.was} → {self.minutes}"
        if self.kind == "set cpu limit":
            return f"{self.account}: GrpTRESMins cpu {self.was} → {self.minutes}"
        if self.kind == "set max submit jobs":
            return f"{self.account}: MaxSubmitJobs {self.was} → {self.minutes}"
        if self.kind in _USER_MINUTES_LIMITS:
            tres = _USER_MINUTES_LIMITS[self.kind]
            return f"{self.account}: GrpTRESMins {tres} of {self.user} {self.was} → {self.minutes}"
        return f"{self.account}: {self.kind} {self.user}".rstrip()


@dataclass
class Report:
    cluster: str
    dry_run: bool
    actions: list[Action] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    standings: dict[str, dict[str, float | None]] = field(default_factory=dict)


def gpu_minutes_limit_for(
    *, raw_used_minutes: int, covered_gpu_seconds: int, billing_weight: Decimal
) -> int:
    """Slurm's usage so far plus what the portal still covers, in raw GPU-minutes.

    The portal charges weighted GPU-hours and Slurm counts raw ones, so the
    cheapest partition's weight converts (never blocking a job the portal took);
    rounding up for the same reason.
    """
    covered = max(covered_gpu_seconds, 0)
    # In decimals, as the CPU limit: a float's rounding gave a minute too many, or at
    # large balances too few (found by tests/accounts/test_limit_properties.py).
    return raw_used_minutes + math.ceil(Decimal(covered) / 60 / billing_weight)


def cpu_minutes_limit_for(
    *, raw_used_minutes: int, covered_gpu_seconds: int, cpu_hour_rate: Decimal
) -> int:
    """Slurm's CPU usage so far plus as many CPU-minutes as the portal still covers.

    The cheapest partition's rate converts and the result is rounded up, so the limit
    never blocks a job the portal took (its CPUs cost at most its whole price).
    """
    covered = max(covered_gpu_seconds, 0)
    return raw_used_minutes + math.ceil(Decimal(covered) / 60 / cpu_hour_rate)


def projects_to_reconcile(cluster: Cluster) -> list[Project]:
    """The projects with an allocation in force on the cluster today: a grant counts from
    its first day, so every run (beat's, every few minutes) raises a limit on that day."""
    return list(
        Project.objects.filter(in_force(prefix="allocations__"), allocations__cluster=cluster)
        .distinct()
        .order_by("slug")
    )


# What an account the portal is about to create has: nobody, no limits.
_ABSENT = AccountLimits(
    users=(), gpu_minutes=None, cpu_minutes=None, max_submit_jobs=None, job_counts={}
)


def member_posix_names(project: Project) -> set[str]:
    """The Slurm users the project's account should have: its members' POSIX names."""
    return {
        name
        for name in project.memberships.values_list("user__posix_username", flat=True)
        if name is not None
    }


def account_check(*, client: SlurmClient, cluster: Cluster, account: str, adopted: bool) -> bool:
    """Whether ``account`` exists on ``cluster`` and is the portal's to use: True when it
    is its own (organization ``portal``) or ``adopted`` there, False when Slurm has no
    such account (the portal will create it); NotThePortalsAccount when someone else made
    it and nobody adopted it. The reconciler changes nothing in such an account and the
    workers submit and estimate nothing under it: it is someone else's budget."""
    try:
        organization = client.account_organization(account)
    except NotFound:
        return False
    if organization == PORTAL_ORGANIZATION or adopted:
        return True
    raise NotThePortalsAccount(
        f"the Slurm account exists but the portal did not create it (organization "
        f"{organization!r}, not {PORTAL_ORGANIZATION!r}) and nobody adopted it on "
        f"{cluster.name}; the portal adds no users, associations or limits to it. Adopt "
        "it (Slurm import in the console, or manage.py import_accounts) or bind the project "
        "to a new account name."
    )


def _managed(run: Run, account: str) -> AdoptedAccount | None:
    """Whether the portal may change the account on this run's cluster: None when it is
    the portal's own (or absent, to be created), its adoption when it was adopted here;
    NotThePortalsAccount otherwise."""
    adoption = run.adoptions.get(account)
    exists = account_check(
        client=run.client, cluster=run.cluster, account=account, adopted=adoption is not None
    )
    return adoption if exists else None


def _plan_project(run: Run, project: Project, warnings: list[str]) -> list[Action]:
    client, cluster, account = run.client, run.cluster, project.slurm_account
    wanted = member_posix_names(project)
    actions = []
    adoption = _managed(run, account)
    try:
        state = client.account_limits(account)
        used = client.minutes_used(account)
    except NotFound:
        run.check_parent()
        actions.append(Action(account, "add account"))
        state, used = _ABSENT, MinutesUsed(gpu=0, cpu=0)
    run.standings[account] = {"share": used.share, "usage": used.usage}
    present = set(state.users)
    kept = set(adoption.kept_users) if adoption is not None else set()
    actions += [Action(account, "add user", user) for user in sorted(wanted - present)]
    actions += [Action(account, "remove user", user) for user in sorted(present - wanted - kept)]
    warnings += [
        f"{account}: {user} is associated with it but is not a project member; kept, as "
        "the site had given it the account when it was adopted"
        for user in sorted(present & kept - wanted)
    ]
    balance = project_balance(project, cluster=cluster)
    covered = balance.available_gpu_seconds + balance.held_gpu_seconds
    prices = cluster.partitions.aggregate(weight=Min("billing_weight"), rate=Min("cpu_hour_rate"))
    limit = gpu_minutes_limit_for(
        raw_used_minutes=used.gpu,
        covered_gpu_seconds=covered,
        billing_weight=prices["weight"] or Decimal(1),
    )
    if limit != state.gpu_minutes:
        actions.append(Action(account, "set limit", minutes=limit, was=state.gpu_minutes))
    cpu_limit = cpu_minutes_limit_for(
        raw_used_minutes=used.cpu,
        covered_gpu_seconds=covered,
        cpu_hour_rate=prices["rate"] or DEFAULT_CPU_HOUR_RATE,
    )
    if cpu_limit != state.cpu_minutes:
        actions.append(Action(account, "set cpu limit", minutes=cpu_limit, was=state.cpu_minutes))
    jobs = max_submit_jobs_for(project=project, cluster=cluster)
    if jobs != state.max_submit_jobs:
        actions.append(
            Action(account, "set max submit jobs", minutes=jobs, was=state.max_submit_jobs)
        )
    actions += _plan_member_caps(project, cluster, account, state, used, wanted, prices)
    actions += plan_new_work(account, state.job_counts, allowed=True)
    return actions


def _plan_member_caps(
    project: Project,
    cluster: Cluster,
    account: str,
    state: AccountLimits,
    used: MinutesUsed,
    members: set[str],
    prices: dict,
) -> list[Action]:
    """Each member's own association limits: for a capped member their raw GPU-minutes
    and CPU-minutes so far plus what the cap still covers in each (decay-safe, at the
    cheapest weight and rate, as the account's), removed when the cap is lifted. Only
    members' associations: users an adoption kept are left alone."""
    try:
        allocation = active_allocation(project=project, cluster=cluster)
    except NoActiveAllocation:
        return []
    covering = member_caps_covering(allocation)
    actions = []
    for user in sorted(members):
        gpu_limit = cpu_limit = None
        if user in covering:
            gpu_limit = gpu_minutes_limit_for(
                raw_used_minutes=used.users_gpu.get(user, 0),
                covered_gpu_seconds=covering[user],
                billing_weight=prices["weight"] or Decimal(1),
            )
            cpu_limit = cpu_minutes_limit_for(
                raw_used_minutes=used.users_cpu.get(user, 0),
                covered_gpu_seconds=covering[user],
                cpu_hour_rate=prices["rate"] or DEFAULT_CPU_HOUR_RATE,
            )
        for kind, limit, was in (
            ("set user limit", gpu_limit, state.user_gpu_minutes.get(user)),
            ("set user cpu limit", cpu_limit, state.user_cpu_minutes.get(user)),
        ):
            if limit != was:
                actions.append(Action(account, kind, user, minutes=limit, was=was))
    return actions


# --- new work of projects without an active allocation -----------------------------
#
# Blocked with GrpSubmitJobs=0 (sbatch refused: AssocGrpSubmitJobsLimit) and GrpJobs=0
# (queued jobs wait: AssocGrpJobsLimit) on the account's association; running jobs are
# not touched by either. Not MaxSubmitJobs=0: on 22.05 an account's own MaxSubmitJobs
# did not stop its users' submissions (checked with sbatch on the dev cluster), and a
# user association's own MaxSubmitJobs would override it anyway; Grp limits hold for
# everything under the account. The portal owns the zeros of these two limits on its
# own accounts: a lift clears only a limit that is 0, so another value a site set by
# hand stays (one set before a block is not remembered through it).

NEW_WORK_BLOCKED = {"GrpSubmitJobs": 0, "GrpJobs": 0}


def projects_to_block(cluster: Cluster) -> list[Project]:
    """Projects that have had an allocation on the cluster but have no active one today."""
    active = {project.pk for project in projects_to_reconcile(cluster)}
    return [
        project
        for project in Project.objects.filter(allocations__cluster=cluster)
        .distinct()
        .order_by("slug")
        if project.pk not in active
    ]


def plan_new_work(account: str, current: dict[str, int | None], *, allowed: bool) -> list[Action]:
    """Block new work under an account that may not have it, lift the block of one that
    may, given the account's ``job_counts`` now."""
    if allowed:
        wanted = {name: None if value == 0 else value for name, value in current.items()}
    else:
        wanted = {**current, **NEW_WORK_BLOCKED}
    if wanted == current:
        return []
    kind = "unblock new work" if allowed else "block new work"
    return [Action(account, kind, job_limits=tuple(wanted.items()))]


def _plan_blocked_project(run: Run, project: Project) -> list[Action]:
    account = project.slurm_account
    try:
        _managed(run, account)
    except NotThePortalsAccount:
        # Someone else's account: the portal never limited it, so it does not block it.
        return []
    try:
        current = run.client.account_limits(account).job_counts
    except NotFound:
        return []  # nothing runs under an account that is absent
    return plan_new_work(account, current, allowed=False)


# The limit each "set …" action changes, by the name ``set_account_limits`` (and for a
# member's own association ``set_user_limits``) takes.
_MINUTES_LIMITS = {"set limit": "gres/gpu", "set cpu limit": "cpu"}
_USER_MINUTES_LIMITS = {"set user limit": "gres/gpu", "set user cpu limit": "cpu"}


def _apply(run: Run, project: Project, actions: list[Action]) -> None:
    """Make the project's planned changes in order: its account and users first, then
    every limit of the account's association in one change."""
    client = run.client
    minutes: dict[str, int | None] = {}
    jobs: dict[str, int | None] = {}
    user_minutes: dict[str, dict[str, int | None]] = {}
    for action in actions:
        if action.kind == "add account":
            client.ensure_account(
                action.account, description=project.name, parent=run.cluster.parent_account
            )
        elif action.kind == "add user":
            client.ensure_user_association(user=action.user, account=action.account)
        elif action.kind == "remove user":
            client.remove_user_association(user=action.user, account=action.account)
        elif action.kind in _MINUTES_LIMITS:
            minutes[_MINUTES_LIMITS[action.kind]] = action.minutes
        elif action.kind == "set max submit jobs":
            jobs["MaxSubmitJobs"] = action.minutes
        elif action.kind in _USER_MINUTES_LIMITS:
            tres = _USER_MINUTES_LIMITS[action.kind]
            user_minutes.setdefault(action.user, {})[tres] = action.minutes
        elif action.kind in ("block new work", "unblock new work"):
            jobs.update(action.job_limits)
    for user, limits in user_minutes.items():
        # A member's GPU and CPU minutes in one change: never one without the other.
        client.set_user_limits(user=user, account=project.slurm_account, minutes=limits)
    if minutes or jobs:
        client.set_account_limits(project.slurm_account, minutes=minutes, jobs=jobs)


def reconcile(*, cluster: Cluster, dry_run: bool = False) -> Report:
    """One pass over the cluster's projects; Slurm errors are reported, not raised, and a
    project that failed is simply planned again by the next run."""
    report = Report(cluster=cluster.name, dry_run=dry_run)
    run = Run(client_for(cluster), cluster)
    for project in projects_to_reconcile(cluster):
        report.warnings += [
            f"{project.slurm_account}: {username} has no POSIX user name, so no Slurm "
            "association; set it in the admin console"
            for username in project.memberships.filter(user__posix_username=None)
            .order_by("user__username")
            .values_list("user__username", flat=True)
        ]
        _carry_out(report, run, project, partial(_plan_project, run, project, report.warnings))
    for project in projects_to_block(cluster):
        _carry_out(report, run, project, partial(_plan_blocked_project, run, project))
    report.standings = run.standings
    reconcile_report_save(cluster=cluster, report=report)
    return report


def _carry_out(
    report: Report, run: Run, project: Project, plan: Callable[[], list[Action]]
) -> None:
    """Plan one project's changes and, unless this is a dry run, make them while holding
    the cluster's association lock (one writer at a time: slurmdbd loses rows when two
    change associations at once). Changes another writer kept from being made are
    reported as an error, not as actions."""
    try:
        actions = plan()
        if report.dry_run or not actions:
            report.actions += actions
            return
        with association_changes(run.client.cluster_name, wait_s=LOCK_WAIT_S):
            report.actions += actions
            _apply(run, project, actions)
    except (SlurmError, NotThePortalsAccount, ParentMissing, LockTimeout) as exc:
        report.errors.append(f"{project.slurm_account}: {exc}")


def adoption_preview(client: SlurmClient, cluster: Cluster, project: Project) -> list[Action]:
    """What the next run would change in the account of ``project`` on ``cluster`` if it
    were adopted there (keeping the users the site gave it): exactly what a run plans,
    changing nothing."""
    run = Run(client, cluster)
    account = project.slurm_account
    try:
        users = client.account_limits(account).users
    except NotFound:
        users = ()
    run.adoptions[account] = AdoptedAccount(
        cluster=cluster, account=account, project=project, kept_users=list(users)
    )
    if project in projects_to_reconcile(cluster):
        return _plan_project(run, project, [])
    if project in projects_to_block(cluster):
        return _plan_blocked_project(run, project)
    return []


def reconcile_report_save(*, cluster: Cluster, report: Report) -> ReconcileReport:
    """Keep the run's report as the cluster's last one."""
    saved, _ = ReconcileReport.objects.update_or_create(
        cluster=cluster,
        defaults={
            "ran_at": timezone.now(),
            "dry_run": report.dry_run,
            "actions": [
                {"account": action.account, "change": str(action)} for action in report.actions
            ],
            "errors": report.errors,
            "warnings": report.warnings,
            "standings": report.standings,
        },
    )
    return saved
