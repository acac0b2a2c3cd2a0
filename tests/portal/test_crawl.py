"""The crawl: every named route opened as every persona over a dataset of edge cases,
then again with hostile query strings, path parameters and form values. No answer is
a 5xx, each persona gets what it should, and no page asks Slurm during the request
(issue 17: "tests that hunt").

The dataset has what broke pages before or might: a project without an allocation,
an expired and a revoked one, zero, tiny (0.001 GPU-h) and over-the-top usage (more
charged than granted), a negative adjustment, a 10,000-task array, failed, cancelled,
timed-out and submit_failed jobs, a thousand jobs, a user in no project. It is built
once for the module. Nothing here reaches Slurm: the only cluster is offline, and the
backends' I/O is refused and recorded.

A new named route without an entry in ``PAGES`` (or, in the console, a page of our
own without one) fails ``test_every_route_has_a_crawl_entry``, as the authorisation
matrix does.
"""

import datetime as dt
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from unittest import mock
from urllib.parse import quote

import pytest
from django.contrib import admin
from django.contrib.auth.models import Group
from django.contrib.contenttypes.models import ContentType
from django.test import Client, RequestFactory
from django.urls import NoReverseMatch, URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone

from accounts.caps import member_cap_set
from accounts.groups import ALLOCATION_MANAGERS
from accounts.identity import identity_link
from accounts.ledger import (
    allocation_adjust,
    allocation_expire,
    allocation_grant,
    allocation_revoke,
    ledger_charge,
)
from accounts.models import (
    AdoptedAccount,
    Allocation,
    AllocationRequest,
    Notification,
    Project,
    SlurmAccountListing,
    User,
    Webhook,
    WebhookDelivery,
)
from accounts.requests import allocation_request_create
from accounts.services import membership_set, project_create
from accounts.tokens import token_create
from clusters.models import Cluster, ClusterStatus, Partition, RefusedRecord
from clusters.services import refused_records_report
from clusters.slurm.cli import CliClient
from clusters.slurm.errors import SlurmUnavailable
from clusters.slurm.rest import RestClient
from clusters.slurm.states import SlurmJobState
from clusters.slurm.types import NodeInfo, QueueEntry, Refused
from clusters.status import status_snapshot
from jobs.models import AccountingRecord, Job, JobEvent, JobTemplate
from jobs.states import JobState
from tests.factories import listed_account_row
from tests.security.conftest import kept_for_the_module, offline_cluster_create, person

pytestmark = pytest.mark.django_db

ANONYMOUS, RESEARCHER, PI, MANAGER, NOBODY, SUPERUSER = (
    "anonymous",
    "researcher",
    "pi",
    "manager",
    "nobody",
    "superuser",
)
SIGNED_IN = (RESEARCHER, PI, MANAGER, NOBODY, SUPERUSER)
PERSONAS = (ANONYMOUS, *SIGNED_IN)
STAFF = (MANAGER, SUPERUSER)

TODAY = dt.date.today()
HOUR = 3600


@pytest.fixture(autouse=True)
def _no_throttling(settings):
    settings.API_RATE = None
    settings.API_ANON_RATE = None


# --- the dataset ---------------------------------------------------------------------


@dataclass
class World:
    users: dict[str, User]
    cluster: Cluster
    partition: Partition
    projects: dict[str, Project]  # by slug
    members: dict[str, dict[str, str]]  # slug -> {persona: role}
    jobs: dict[str, Job]  # the researcher's edge-case jobs, by label
    pi_job: Job  # the PI's own job in a project the researcher is not in
    allocations: dict[str, Allocation]
    request: AllocationRequest
    token_id: int  # one of the researcher's tokens
    template: JobTemplate  # the researcher's own
    hook_id: int  # the researcher's webhook, failing and disabled


def _project(slug: str, members: dict[User, str]) -> Project:
    project = project_create(slug=slug, name=f"Crawl {slug}", slurm_account=slug)
    for user, role in members.items():
        membership_set(project=project, user=user, role=role)
    return project


def _grant(project, cluster, *, gpu_hours=100, starts=-10, ends=30) -> Allocation:
    return allocation_grant(
        project=project,
        cluster=cluster,
        gpu_hours=gpu_hours,
        starts_on=TODAY + dt.timedelta(days=starts),
        ends_on=TODAY + dt.timedelta(days=ends),
        actor=None,
        reason="crawl",
    )


def _job(owner, project, partition, **fields) -> Job:
    values = {
        "owner": owner,
        "project": project,
        "cluster": partition.cluster,
        "partition": partition,
        "name": "crawl",
        "gpus_per_node": 1,
        "time_limit_minutes": 10,
        "working_directory": "/home/alice",
        "output_path": "/home/alice/crawl-%j.out",
        "error_path": "/home/alice/crawl-%j.out",
        "script": "true\n",
        "rendered_script": "#!/bin/bash\ntrue\n",
        "billing_weight": Decimal("1"),
        "requested_gpu_seconds": 600,
        "state": JobState.COMPLETED,
        **fields,
    }
    return Job(**values)


def build_world() -> World:
    cluster = offline_cluster_create()
    partition = cluster.partitions.get(name="debug")
    users = {
        RESEARCHER: person("crawl-researcher", posix="alice"),
        PI: person("crawl-pi", posix="pat"),
        MANAGER: person("crawl-manager", posix="olga", staff=True, manager=True),
        NOBODY: person("crawl-nobody", posix="charlie"),
        SUPERUSER: person("crawl-root", staff=True),
    }
    User.objects.filter(pk=users[SUPERUSER].pk).update(is_superuser=True)
    users[SUPERUSER].refresh_from_db()
    researcher, pi = users[RESEARCHER], users[PI]
    members = {
        "crawl-main": {RESEARCHER: "member", PI: "pi"},
        "crawl-none": {RESEARCHER: "member", PI: "co_pi"},  # no allocation at all
        "crawl-over": {PI: "pi"},  # more used than granted
        "crawl-zero": {PI: "pi"},  # granted, nothing used
        "crawl-expired": {PI: "pi"},
        "crawl-revoked": {PI: "pi"},
        "crawl-tiny": {RESEARCHER: "member"},  # one tiny charge: the first 500
    }
    projects = {
        slug: _project(slug, {users[p]: role for p, role in roles.items()})
        for slug, roles in members.items()
    }
    allocations = {
        "main": _grant(projects["crawl-main"], cluster, gpu_hours=100),
        "over": _grant(projects["crawl-over"], cluster, gpu_hours=1),
        "zero": _grant(projects["crawl-zero"], cluster, gpu_hours=5),
        "expired": _grant(projects["crawl-expired"], cluster, starts=-60, ends=-30),
        "revoked": _grant(projects["crawl-revoked"], cluster),
        "tiny": _grant(projects["crawl-tiny"], cluster, gpu_hours=1000),
    }
    manager = users[MANAGER]
    # A sign-in a superuser linked to the manager's account by hand (issue 34).
    identity_link(actor=users[SUPERUSER], user=manager, source="oidc", subject="crawl-sub")
    # Tiny: 1,000 GPU-h with one job's 0.001 GPU-h charged and nothing else, as a new
    # user's first job left it. At that rate the run-out day lies past the year 9999:
    # the dashboard's burn-down answered 500 (issue 17).
    ledger_charge(allocation=allocations["tiny"], reference="crawl:tiny", gpu_seconds=4)
    # A tiny charge today beside larger ones on earlier days.
    ledger_charge(allocation=allocations["main"], reference="crawl:1", gpu_seconds=4)
    allocation_adjust(
        allocation=allocations["main"], gpu_seconds=-10 * HOUR, actor=manager, reason="crawl"
    )
    # Over the top: far more charged than granted (work outside the portal, late accounting).
    ledger_charge(allocation=allocations["over"], reference="crawl:2", gpu_seconds=10**10)
    # Caps: the researcher's own and a default on main; on over, a default far below
    # what was charged (nothing left, not a negative figure).
    member_cap_set(actor=pi, allocation=allocations["main"], user=researcher, gpu_hours=0.001)
    member_cap_set(actor=pi, allocation=allocations["main"], user=None, gpu_hours=10**6)
    member_cap_set(actor=pi, allocation=allocations["over"], user=None, gpu_hours=0)
    allocation_adjust(
        allocation=allocations["over"], gpu_seconds=-HOUR, actor=manager, reason="all of it"
    )
    # Charges on earlier days, one before the period began: the burn-down walks them back.
    # (The ledger refuses UPDATEs: the entries are written at those times.)
    for days_ago, gpu_seconds in ((3, 7200), (12, 1), (20, 3600)):
        then = timezone.now() - dt.timedelta(days=days_ago)
        with mock.patch("django.utils.timezone.now", return_value=then):
            ledger_charge(
                allocation=allocations["main"], reference=f"crawl:{then}", gpu_seconds=gpu_seconds
            )
    allocation_expire(allocation=allocations["expired"])
    allocation_revoke(allocation=allocations["revoked"], actor=manager, reason="crawl")

    main = projects["crawl-main"]
    now = timezone.now()
    edge = {
        "array": _job(
            researcher,
            main,
            partition,
            name="array",
            array="0-9999",
            array_tasks=10_000,
            requested_gpu_seconds=10_000 * 600,
            state=JobState.PENDING,
            slurm_job_id=9001,
            output_path="/home/alice/crawl-%A_%a.out",
            error_path="/home/alice/crawl-%A_%a.out",
        ),
        "failed": _job(
            researcher,
            main,
            partition,
            name="failed",
            state=JobState.FAILED,
            slurm_job_id=9002,
            exit_code=3,
            used_gpu_seconds=120,
            started_at=now,
            ended_at=now,
        ),
        "cancelled": _job(
            researcher,
            main,
            partition,
            name="cancelled",
            slurm_job_id=9003,
            state=JobState.CANCELLED,
            used_gpu_seconds=0,
        ),
        "timeout": _job(
            researcher,
            main,
            partition,
            name="timeout",
            state=JobState.TIMEOUT,
            slurm_job_id=9004,
            used_gpu_seconds=600,
            started_at=now,
            ended_at=now,
        ),
        "submit_failed": _job(
            researcher,
            main,
            partition,
            name="refused",
            state=JobState.SUBMIT_FAILED,
            submit_error="sbatch: error: Invalid account",
        ),
        "running": _job(
            researcher,
            main,
            partition,
            name="running",
            state=JobState.RUNNING,
            slurm_job_id=9005,
            started_at=now,
        ),
        "new": _job(researcher, main, partition, name="new", state=JobState.NEW),
        "tiny": _job(
            researcher,
            main,
            partition,
            name="tiny",
            slurm_job_id=9006,
            used_gpu_seconds=4,
            started_at=now,
            ended_at=now,
        ),
        "no_account": _job(
            researcher,
            projects["crawl-none"],
            partition,
            name="broke",
            state=JobState.SUBMIT_FAILED,
            submit_error="no allocation",
        ),
    }
    Job.objects.bulk_create(edge.values())
    pi_job = _job(pi, projects["crawl-over"], partition, name="pis-own")
    pi_job.save()
    # A thousand finished jobs of the researcher's, in one query.
    Job.objects.bulk_create(
        _job(researcher, main, partition, name=f"bulk{n}", used_gpu_seconds=300)
        for n in range(1000)
    )
    JobEvent.objects.bulk_create(
        JobEvent(job=job, at=now, state=job.state, detail="crawl") for job in edge.values()
    )
    AccountingRecord.objects.create(
        cluster=cluster,
        slurm_job_id=9100,
        user="alice",
        account="crawl-main",
        state="COMPLETED",
        allocated_gpus=1,
        elapsed_s=4,
        charged_gpu_seconds=4,
        job=edge["tiny"],
    )
    AccountingRecord.objects.create(
        cluster=cluster,
        slurm_job_id=9101,
        user="pat",
        account="crawl-over",
        state="COMPLETED",
        allocated_gpus=8,
        elapsed_s=10**6,
        charged_gpu_seconds=None,
    )
    # What a researcher's crafted job leaves in the refused records: their bytes, and one
    # record without an id.
    refused_records_report(
        cluster=cluster,
        listing=RefusedRecord.Listing.QUEUE,
        refused=[
            Refused(9102, "listed 2 times; none of them is taken", "name '\n\x1e<b>x</b>\u202e'"),
        ],
    )
    refused_records_report(
        cluster=cluster,
        listing=RefusedRecord.Listing.ACCOUNTING,
        refused=[Refused(None, "cannot read the record: 17 fields", "\x1f" * 40 + "%s{{ x }}")],
    )
    request = allocation_request_create(
        project=projects["crawl-over"],
        cluster=cluster,
        requested_by=pi,
        gpu_hours=50,
        starts_on=TODAY + dt.timedelta(days=40),
        ends_on=TODAY + dt.timedelta(days=70),
        justification="crawl",
    )
    token, _ = token_create(user=researcher, name="crawl")
    template = JobTemplate.objects.create(
        name="crawl-mine",
        scope="user",
        owner=researcher,
        script="true\n",
        defaults={"partition": "debug", "gpus_per_node": 1, "environment": {"A": "1"}},
    )
    Notification.objects.create(
        allocation=allocations["over"], kind=Notification.Kind.USAGE_100, claimed_at=now
    )
    JobTemplate.objects.create(name="crawl-global", scope="global", script="true\n")
    JobTemplate.objects.create(
        name="crawl-team",
        scope="project",
        project=main,
        script="true\n",
        defaults={"partition": "gone", "time_limit_minutes": 10**6},  # stale defaults
    )
    # The Slurm import: crawl-main adopted, an account made by hand of no project with
    # markup in its description, and one whose name no project may have.
    AdoptedAccount.objects.create(cluster=cluster, account="crawl-main", project=main)
    SlurmAccountListing.objects.create(
        cluster=cluster,
        listed_at=now,
        accounts=[
            listed_account_row("crawl-main", project="crawl-main", users=["alice"]),
            listed_account_row("handmade", description="<script>alert(1)</script> | qcd"),
            listed_account_row("Odd.Name", problem="not a Slurm account name the portal takes"),
        ],
    )
    # The status page's data: a node stuck (as the restart left one, seen in two
    # polls), one drained with markup in its reason, a pending array.
    stuck_node = NodeInfo("vm", ("gpu", "debug"), ("mixed",), "", (("h200", 8),), 8, 16, 0)
    drained = NodeInfo("vm2", ("gpu",), ("idle", "drain"), "<b>fan</b>", (("h200", 8),), 0, 16, 0)
    waiting = QueueEntry(
        77, 77, "0-5%2", "x", "pat", "crawl-over", "gpu", SlurmJobState.PENDING,
        "ReqNodeNotAvail", "", now - dt.timedelta(hours=1), None, 60, 1, None, 1, "",
    )  # fmt: skip
    listing = {"nodes": [stuck_node, drained], "queue": [waiting]}
    first = status_snapshot(**listing, now=now, pending_bound=dt.timedelta(minutes=10))
    ClusterStatus.objects.create(
        cluster=cluster,
        taken_at=now,
        snapshot=status_snapshot(
            **listing, now=now, pending_bound=dt.timedelta(minutes=10), previous=first
        ),
        error="squeue: <i>timed out</i>",
        error_at=now,
    )
    # Loopback port 9: a delivery would be refused before connecting (none is made here).
    hook = Webhook.objects.create(
        user=researcher,
        url="http://127.0.0.1:9/<i>crawl</i>",
        events=["job.ended"],
        secret="s",
        disabled_at=now,
        disabled_reason="<script>alert(1)</script> failed",
    )
    WebhookDelivery.objects.create(
        webhook=hook, event="job.ended", payload={}, state="failed", attempts=8,
        last_status=500, last_error="HTTP <b>500</b>",
    )  # fmt: skip
    for allocation in allocations.values():
        allocation.refresh_from_db()  # the ledger wrote their cached totals since
    return World(
        users=users,
        cluster=cluster,
        partition=partition,
        projects=projects,
        members=members,
        jobs=edge,
        pi_job=pi_job,
        allocations=allocations,
        request=request,
        token_id=token.pk,
        template=template,
        hook_id=hook.pk,
    )


@pytest.fixture(scope="module")
def _module_world(django_db_setup, django_db_blocker, _seeded_by_migrations) -> Iterator[World]:
    with kept_for_the_module(django_db_blocker, _seeded_by_migrations):
        yield build_world()


@pytest.fixture
def world(_module_world, db, celery_worker) -> World:
    """The world, with a worker to answer what pages ask the workers (a job's output, a
    start estimate): without one each such page waits out its deadline (3 to 5 s), and the
    crawl took a minute or two more whenever no earlier test of its process had started
    the session's worker."""
    return _module_world


def client_for(persona: str, w: World) -> Client:
    # A crash is a 500 in the list of what went wrong, not the end of the crawl.
    client = Client(raise_request_exception=False)
    if persona != ANONYMOUS:
        client.force_login(w.users[persona])
    return client


def test_the_dataset_has_its_edge_cases(world):
    """The crawl is only as good as its data: what the module's docstring promises."""
    from accounts.selectors import allocation_balance, allocation_daily_usage
    from portal.charts import RATE_WINDOW_DAYS

    over = allocation_balance(world.allocations["over"])
    assert over.available_gpu_seconds < 0 and over.used_gpu_seconds > over.granted_gpu_seconds
    assert len(allocation_daily_usage(world.allocations["main"])) >= 3  # history to walk back
    assert 0 < allocation_daily_usage(world.allocations["main"])[TODAY] < HOUR
    assert allocation_balance(world.allocations["zero"]).available_gpu_seconds == 5 * HOUR
    # On the researcher's dashboard, a rate so small that the naive run-out date
    # (today plus what is left over the rate) lies past the last day a date can hold.
    tiny = world.allocations["tiny"]
    assert tiny.state == "active" and world.members["crawl-tiny"][RESEARCHER]
    assert allocation_daily_usage(tiny) == {TODAY: 4}
    days_left = allocation_balance(tiny).available_gpu_seconds / (4 / RATE_WINDOW_DAYS)
    assert days_left > (dt.date.max - TODAY).days
    states = {label: a.state for label, a in world.allocations.items()}
    assert states["expired"] == "expired" and states["revoked"] == "revoked"
    assert not world.projects["crawl-none"].allocations.exists()
    assert world.jobs["array"].array_tasks == 10_000
    assert Job.objects.filter(owner=world.users[RESEARCHER]).count() > 1000
    jobs = set(Job.objects.values_list("state", flat=True))
    assert {"failed", "cancelled", "timeout", "submit_failed"} <= jobs
    assert not world.users[NOBODY].memberships.exists()


# --- what each persona gets ---------------------------------------------------------

LOGIN, ADMIN_LOGIN = "login", "admin_login"  # a 302 to that log-in page
Expected = int | str


@dataclass(frozen=True)
class Visit:
    label: str
    url: str
    expected: dict[str, Expected]
    only: frozenset[str] | None = None  # the personas who open it; None: every one


@dataclass(frozen=True)
class Page:
    """A named route: how to open it (one or several URLs) and what each persona gets."""

    visits: Callable[[World], list[Visit]]
    reads: tuple[str, ...] = ()  # the query parameters the page reads


def signed_in(code: Expected, anonymous: Expected = LOGIN, **by_persona: Expected) -> dict:
    return {ANONYMOUS: anonymous, **dict.fromkeys(SIGNED_IN, code), **by_persona}


def api(code: Expected, anonymous: Expected = 401, **by_persona: Expected) -> dict:
    return signed_in(code, anonymous, **by_persona)


def one(name: str, expected: dict, *args, query: str = "") -> Callable[[World], list[Visit]]:
    def visits(w: World) -> list[Visit]:
        values = [arg(w) if callable(arg) else arg for arg in args]
        return [Visit(name, reverse(name, args=values) + query, expected)]

    return visits


def per_project(name: str, code: Callable[[dict[str, str], str], Expected], anonymous=LOGIN):
    """One visit per project; ``code(roles, persona)`` for the signed-in."""

    def visits(w: World) -> list[Visit]:
        return [
            Visit(
                f"{name} {slug}",
                reverse(name, args=[slug]),
                {ANONYMOUS: anonymous} | {p: code(roles, p) for p in SIGNED_IN},
            )
            for slug, roles in w.members.items()
        ]

    return visits


def per_job(name: str, seen: Expected, unseen: Expected, anonymous=LOGIN, suffix=()):
    """One visit per edge-case job of the researcher's (the PI of crawl-main sees them
    too), and the PI's own job, which only the PI sees."""

    def visits(w: World) -> list[Visit]:
        out = [
            Visit(
                f"{name} {label}",
                reverse(name, args=[job.pk, *suffix]),
                signed_in(unseen, anonymous, researcher=seen, pi=seen),
                # Each job renders for those who see it; one is enough to refuse the rest.
                only=None if n == 0 else frozenset({RESEARCHER, PI}),
            )
            for n, (label, job) in enumerate(w.jobs.items())
        ]
        out.append(
            Visit(
                f"{name} pi's",
                reverse(name, args=[w.pi_job.pk, *suffix]),
                signed_in(unseen, anonymous, pi=seen),
            )
        )
        return out

    return visits


def member_page(roles: dict[str, str], persona: str) -> int:
    return 200 if persona in roles else 404


# The projects with an allocation active today: the others' caps are a 409.
CAPPABLE = {"crawl-main", "crawl-over", "crawl-zero", "crawl-tiny"}


def caps_api(w: World) -> list[Visit]:
    return [
        Visit(
            f"api:project-caps {slug}",
            reverse("api:project-caps", args=[slug]),
            {ANONYMOUS: 401}
            | {p: (200 if slug in CAPPABLE else 409) if p in roles else 404 for p in SIGNED_IN},
        )
        for slug, roles in w.members.items()
    ]


def usage_api(roles: dict[str, str], persona: str) -> int:
    if persona not in roles:
        return 404
    return 200 if roles[persona] in ("pi", "co_pi") else 403


PAGES: dict[str, Page] = {
    # --- the portal ---
    "home": Page(one("home", signed_in(200))),
    "project": Page(per_project("project", member_page)),
    "tokens": Page(one("tokens", signed_in(200))),
    "preferences": Page(one("preferences", signed_in(200))),
    "project_caps": Page(per_project("project_caps", member_page)),
    "status": Page(one("status", signed_in(200))),
    "token_revoke": Page(one("token_revoke", signed_in(405), lambda w: w.token_id)),
    "webhooks": Page(one("webhooks", signed_in(200))),
    "webhook_delete": Page(one("webhook_delete", signed_in(405), lambda w: w.hook_id)),
    "webhook_test": Page(one("webhook_test", signed_in(405), lambda w: w.hook_id)),
    "healthz": Page(one("healthz", signed_in(200, 200))),
    "metrics": Page(one("metrics", signed_in(200, 200))),  # dev: loopback may scrape
    "login": Page(one("login", signed_in(302, 200)), reads=("next",)),
    "logout": Page(one("logout", signed_in(405, 405))),
    # Off to the provider's log-in page; a callback this browser did not start, or an
    # error from the provider, back to the log-in page (with a message, never a 5xx).
    "oidc_start": Page(one("oidc_start", signed_in(302, 302)), reads=("next",)),
    "oidc_callback": Page(
        one("oidc_callback", signed_in(302, 302), query="?code=x&state=y"),
        reads=("code", "state", "error", "error_description", "iss"),
    ),
    "set_language": Page(one("set_language", signed_in(302, 302)), reads=("next",)),
    "admin_login": Page(
        one("admin_login", signed_in(200, 200, manager=302, superuser=302)), reads=("next",)
    ),
    # --- jobs ---
    "jobs:list": Page(
        lambda w: [
            *one("jobs:list", signed_in(200))(w),
            *one("jobs:list", signed_in(200), query="?project=crawl-main&state=active")(w),
            *one("jobs:list", signed_in(200), query="?page=40")(w),
        ],
        reads=("state", "project", "q", "page"),
    ),
    "jobs:new": Page(
        lambda w: [
            *one("jobs:new", signed_in(200))(w),
            *one("jobs:new", signed_in(200), query="?project=crawl-none")(w),
            *one(
                "jobs:new",
                signed_in(404, researcher=200),
                query=f"?template={w.template.pk}&from={w.jobs['array'].pk}",
            )(w),
            *one(
                "jobs:new",
                signed_in(404, researcher=200, pi=200),
                query=f"?from={w.jobs['submit_failed'].pk}",
            )(w),
        ],
        reads=("template", "from", "project"),
    ),
    "jobs:preview": Page(one("jobs:preview", signed_in(405))),
    "jobs:save_template": Page(one("jobs:save_template", signed_in(405))),
    "jobs:detail": Page(per_job("jobs:detail", 200, 404)),
    "jobs:status": Page(per_job("jobs:status", 200, 404)),
    "jobs:output": Page(per_job("jobs:output", 200, 404), reads=("stream",)),
    "jobs:action": Page(per_job("jobs:action", 405, 405, suffix=("cancel",))),
    # --- the console: our own pages (the model pages are found from the registry) ---
    "admin:index": Page(
        one("admin:index", signed_in(ADMIN_LOGIN, ADMIN_LOGIN, manager=200, superuser=200))
    ),
    "admin:accounts_project_usage": Page(
        lambda w: [
            Visit(
                f"usage {slug}",
                reverse("admin:accounts_project_usage", args=[p.pk]),
                signed_in(ADMIN_LOGIN, ADMIN_LOGIN, manager=200, superuser=200),
            )
            for slug, p in w.projects.items()
        ]
    ),
    "admin:accounts_project_usage_charges": Page(
        one(
            "admin:accounts_project_usage_charges",
            signed_in(ADMIN_LOGIN, ADMIN_LOGIN, manager=200, superuser=200),
            lambda w: w.projects["crawl-over"].pk,
        )
    ),
    "admin:accounts_project_usage_monthly": Page(
        one(
            "admin:accounts_project_usage_monthly",
            signed_in(ADMIN_LOGIN, ADMIN_LOGIN, manager=200, superuser=200),
            lambda w: w.projects["crawl-main"].pk,
        )
    ),
    "admin:accounts_allocation_adjust": Page(
        lambda w: [
            Visit(
                f"adjust {label}",
                reverse("admin:accounts_allocation_adjust", args=[a.pk]),
                signed_in(ADMIN_LOGIN, ADMIN_LOGIN, manager=200, superuser=200),
            )
            for label, a in w.allocations.items()
        ]
    ),
    # Shows the last reconcile run's stored report: no Slurm call (``slurm_calls``).
    "admin:accounts_allocation_drift": Page(
        one(
            "admin:accounts_allocation_drift",
            signed_in(ADMIN_LOGIN, ADMIN_LOGIN, manager=200, superuser=200),
        )
    ),
    "admin:accounts_adoptedaccount_import": Page(
        one(
            "admin:accounts_adoptedaccount_import",
            signed_in(ADMIN_LOGIN, ADMIN_LOGIN, manager=200, superuser=200),
        )
    ),
    "admin:accounts_adoptedaccount_adopt": Page(
        lambda w: [
            Visit(
                f"adopt {account}",
                reverse("admin:accounts_adoptedaccount_adopt", args=[w.cluster.pk, account]),
                signed_in(ADMIN_LOGIN, ADMIN_LOGIN, manager=code, superuser=code),
            )
            for account, code in (
                ("handmade", 200),
                ("crawl-main", 200),  # adopted already: the page says so
                ("Odd.Name", 200),  # the page says why it cannot be adopted
                ("never-listed", 404),
            )
        ]
    ),
    # --- the API ---
    "api:me": Page(one("api:me", api(200))),
    "api:projects": Page(one("api:projects", api(200))),
    "api:project": Page(per_project("api:project", member_page, anonymous=401)),
    "api:project-usage": Page(
        per_project("api:project-usage", usage_api, anonymous=401), reads=("group_by",)
    ),
    "api:project-caps": Page(caps_api, reads=("cluster",)),
    "api:project-member-cap": Page(
        one(
            "api:project-member-cap",
            api(404, researcher=200, pi=200),
            lambda w: "crawl-main",
            lambda w: w.users[RESEARCHER].username,
        ),
        reads=("cluster",),
    ),
    "api:partitions": Page(one("api:partitions", api(200)), reads=("cluster",)),
    "api:status": Page(one("api:status", api(200))),
    "api:jobs": Page(
        lambda w: [
            *one("api:jobs", api(200))(w),
            *one(
                "api:jobs",
                api(400, researcher=200, pi=200),
                query="?project=crawl-main&state=failed,timeout",
            )(w),
        ],
        reads=("state", "project", "search", "cursor", "page_size"),
    ),
    "api:job-estimate": Page(one("api:job-estimate", api(405))),
    "api:job": Page(per_job("api:job", 200, 404, anonymous=401)),
    "api:job-cancel": Page(per_job("api:job-cancel", 405, 405, anonymous=401)),
    "api:job-hold": Page(per_job("api:job-hold", 405, 405, anonymous=401)),
    "api:job-release": Page(per_job("api:job-release", 405, 405, anonymous=401)),
    # No output file exists: 404 for those who may see the job (it says why), 404 otherwise.
    "api:job-output": Page(
        per_job("api:job-output", 404, 404, anonymous=401), reads=("stream", "tail", "array_task")
    ),
    "api:templates": Page(one("api:templates", api(200))),
    "api:allocation-requests": Page(
        one("api:allocation-requests", api(200)), reads=("state", "project")
    ),
    "api:allocation-request-approve": Page(
        one("api:allocation-request-approve", api(405), lambda w: w.request.pk)
    ),
    "api:allocation-request-deny": Page(
        one("api:allocation-request-deny", api(405), lambda w: w.request.pk)
    ),
    "api:tokens": Page(one("api:tokens", api(200))),
    "api:token": Page(one("api:token", api(405), lambda w: w.token_id)),
    "api:webhooks": Page(one("api:webhooks", api(200))),
    "api:webhook": Page(one("api:webhook", api(405), lambda w: w.hook_id)),
    "api:webhook-test": Page(one("api:webhook-test", api(405), lambda w: w.hook_id)),
    "api:sign-in": Page(one("api:sign-in", api(200, anonymous=200))),
    "api:token-sign-in": Page(one("api:token-sign-in", api(405, anonymous=405))),
    "api:schema": Page(one("api:schema", api(200, anonymous=200)), reads=("format", "lang")),
    "api:docs": Page(one("api:docs", api(200, anonymous=200))),
}


# --- the console's model pages, from the admin registry -------------------------------

_ADMIN_OWN = {
    "index": signed_in(ADMIN_LOGIN, ADMIN_LOGIN, manager=200, superuser=200),
    "login": signed_in(200, 200, manager=302, superuser=302),
    # Django sends those who are not staff to the console's index (and so to its log-in).
    "logout": signed_in(302, 302, manager=405, superuser=405),
    # Setting another user's password is the superuser's.
    "auth_user_password_change": signed_in(ADMIN_LOGIN, ADMIN_LOGIN, manager=403, superuser=200),
    "password_change": signed_in(ADMIN_LOGIN, ADMIN_LOGIN, manager=200, superuser=200),
    "password_change_done": signed_in(ADMIN_LOGIN, ADMIN_LOGIN, manager=200, superuser=200),
    "jsi18n": signed_in(ADMIN_LOGIN, ADMIN_LOGIN, manager=200, superuser=200),
    # Without its parameters: a 403, as Django answers a bad autocomplete request.
    "autocomplete": signed_in(ADMIN_LOGIN, ADMIN_LOGIN, manager=403, superuser=403),
}
_MODEL_PAGE = re.compile(
    r"(?P<app>[a-z]+)_(?P<model>[a-z]+)_(?P<view>changelist|add|change|delete|history)"
)


def _admin_may(persona: str, w: World, model, view: str, obj) -> Expected:
    if persona not in STAFF:
        return ADMIN_LOGIN
    model_admin = admin.site._registry[model]
    request = RequestFactory().get("/admin/")
    request.user = w.users[persona]
    allowed = {
        "changelist": lambda: model_admin.has_view_or_change_permission(request),
        "add": lambda: model_admin.has_add_permission(request),
        "change": lambda: model_admin.has_view_or_change_permission(request, obj),
        "history": lambda: model_admin.has_view_or_change_permission(request, obj),
        "delete": lambda: model_admin.has_delete_permission(request, obj),
    }[view]()
    return 200 if allowed else 403


def _sample(model, w: World):
    """An object of ``model`` from the dataset: one with edge cases where there is one."""
    chosen = {
        Project: w.projects["crawl-over"],
        Allocation: w.allocations["over"],
        Job: w.jobs["array"],
        User: w.users[RESEARCHER],
        Group: Group.objects.get(name=ALLOCATION_MANAGERS),
        Cluster: w.cluster,
        Partition: w.partition,
        AllocationRequest: w.request,
    }
    return chosen.get(model) or model.objects.order_by("-pk").first()


def _app_page(persona: str, w: World, app_label: str) -> Expected:
    """Staff see an app's page when they may view one of its models."""
    if persona not in STAFF:
        return ADMIN_LOGIN
    models = [m for m in admin.site._registry if m._meta.app_label == app_label]
    may = any(_admin_may(persona, w, m, "changelist", None) == 200 for m in models)
    return 200 if may else 404


def admin_visits(w: World) -> list[Visit]:
    visits = []
    for name in sorted(route_names()):
        if not name.startswith("admin:"):
            continue
        page = name.removeprefix("admin:")
        if page in _ADMIN_OWN:
            args = [w.users[RESEARCHER].pk] if page == "auth_user_password_change" else []
            visits.append(Visit(name, reverse(name, args=args), _ADMIN_OWN[page]))
            continue
        match = _MODEL_PAGE.fullmatch(page)
        if not match:
            continue
        model = next(
            m
            for m in admin.site._registry
            if (m._meta.app_label, m._meta.model_name) == (match["app"], match["model"])
        )
        view = match["view"]
        obj = None if view in ("changelist", "add") else _sample(model, w)
        if view not in ("changelist", "add") and obj is None:
            continue
        args = [] if obj is None else [obj.pk]
        expected = {p: _admin_may(p, w, model, view, obj) for p in SIGNED_IN}
        visits.append(Visit(name, reverse(name, args=args), {ANONYMOUS: ADMIN_LOGIN} | expected))
    for app_label in sorted({m._meta.app_label for m in admin.site._registry}):
        visits.append(
            Visit(
                f"admin:app_list {app_label}",
                reverse("admin:app_list", args=[app_label]),
                {ANONYMOUS: ADMIN_LOGIN} | {p: _app_page(p, w, app_label) for p in SIGNED_IN},
            )
        )
    project_type = ContentType.objects.get_for_model(Project)
    visits.append(
        Visit(
            "admin:view_on_site",
            reverse("admin:view_on_site", args=[project_type.pk, w.projects["crawl-main"].pk]),
            # No model of ours has get_absolute_url.
            signed_in(ADMIN_LOGIN, ADMIN_LOGIN, manager=404, superuser=404),
        )
    )
    return visits


# --- the route table is complete ------------------------------------------------------


def _names(patterns, namespace: str = "") -> Iterator[str]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            inner = namespace + (f"{pattern.namespace}:" if pattern.namespace else "")
            yield from _names(pattern.url_patterns, inner)
        elif isinstance(pattern, URLPattern) and pattern.name:
            yield namespace + pattern.name


def route_names() -> set[str]:
    return set(_names(get_resolver().url_patterns))


def _covered_by_the_registry(name: str) -> bool:
    page = name.removeprefix("admin:")
    return name.startswith("admin:") and (
        page in _ADMIN_OWN
        or page in ("app_list", "view_on_site")
        or bool(_MODEL_PAGE.fullmatch(page))
    )


def test_every_route_has_a_crawl_entry():
    missing = {n for n in route_names() if n not in PAGES and not _covered_by_the_registry(n)}
    assert not missing, f"routes the crawl does not open: {sorted(missing)}; add them to PAGES"
    assert not set(PAGES) - route_names(), "PAGES names routes that no longer exist"


def test_every_registered_model_has_its_pages_crawled(world):
    crawled = {visit.label for visit in admin_visits(world)}
    for model in admin.site._registry:
        prefix = f"admin:{model._meta.app_label}_{model._meta.model_name}"
        assert {f"{prefix}_changelist", f"{prefix}_change"} <= crawled, prefix


# --- the crawl ------------------------------------------------------------------------


def all_visits(w: World) -> list[Visit]:
    visits = [visit for page in PAGES.values() for visit in page.visits(w)]
    return visits + admin_visits(w)


def answered_as_expected(response, expected: Expected) -> bool:
    status = response.status_code
    if expected in (LOGIN, ADMIN_LOGIN):
        page = "/login/?next=" if expected == LOGIN else "/admin/login/?next="
        return status == 302 and response["Location"].startswith(page)
    return status == expected


# Pages allowed to ask Slurm during the request: none, as DESIGN says ("the web tier
# makes no slow Slurm call"). The drift page shows the last reconcile run's stored
# report; estimates and output come from the workers.
ASKS_SLURM: set[str] = set()


@pytest.fixture
def slurm_calls(monkeypatch) -> list[str]:
    """What the backends were asked during the test (the offline cluster refuses it all)."""
    calls: list[str] = []

    def rest_send(self, method, path, **kwargs):
        calls.append(f"{method} {path}")
        raise SlurmUnavailable("the crawl does not reach Slurm")

    def cli_run(self, argv, **kwargs):
        calls.append(" ".join(argv))
        raise SlurmUnavailable("the crawl does not reach Slurm")

    monkeypatch.setattr(RestClient, "_send", rest_send)
    monkeypatch.setattr(CliClient, "_run", cli_run)
    monkeypatch.setattr(CliClient, "_streamed", cli_run)  # squeue, read as it prints
    return calls


@pytest.mark.parametrize("persona", PERSONAS)
def test_every_page_answers_every_persona_as_it_should(world, persona, slurm_calls):
    client = client_for(persona, world)
    wrong = []
    for visit in all_visits(world):
        if visit.only is not None and persona not in visit.only:
            continue
        del slurm_calls[:]
        response = client.get(visit.url)
        if slurm_calls and visit.label not in ASKS_SLURM:
            wrong.append(f"{visit.label} {visit.url} asked Slurm: {slurm_calls}")
        expected = visit.expected[persona]
        if response.status_code >= 500 or not answered_as_expected(response, expected):
            wrong.append(f"{visit.label} {visit.url}: {response.status_code}, expected {expected}")
    assert not wrong, "\n".join(wrong)


# --- hostile query strings and path parameters --------------------------------------

HOSTILE_VALUES = [
    "abc",
    str(10**30),
    "-1",
    "%00",
    "x" * 3000,
    "%C2%B2",  # "²": a digit to str.isdigit(), not to int()
    "%FF%FE",  # not UTF-8
    "1.5",
    "..%2F..%2Fetc%2Fpasswd",
    "9999",  # a year past which no date goes
]
# Parameters some page reads, and some no page reads.
COMMON_PARAMS = (
    "page",
    "p",
    "o",
    "q",
    "e",
    "from",
    "template",
    "project",
    "state",
    "stream",
    "tail",
    "array_task",
    "search",
    "cursor",
    "page_size",
    "group_by",
    "cluster",
    "format",
    "next",
    "id",
    "since",
    "month",
    "all",
    "sort",
    "_changelist_filters",
    "_to_field",
    "_popup",
    "unknown_filter",
)


def hostile_queries(reads: tuple[str, ...], together: tuple[str, ...] = ()) -> Iterator[str]:
    """Each parameter the page reads alone with every hostile value (``together``: all of
    them at once, parameters one piece of code reads without stopping at any, as an add
    page its fields' initial values); then every common parameter at once, each with
    every hostile value in turn (rotated, so one request carries them all); repeated
    parameters and bad page numbers."""
    for value in HOSTILE_VALUES:
        for name in reads:
            yield f"{name}={value}"
        if together:
            yield "&".join(f"{name}={value}" for name in together)
    for turn in range(len(HOSTILE_VALUES)):
        yield "&".join(
            f"{name}={HOSTILE_VALUES[(turn + n) % len(HOSTILE_VALUES)]}"
            for n, name in enumerate(COMMON_PARAMS)
        )
    for name in reads:
        yield f"{name}=1&{name}=abc&{name}=%00"
    if together:
        yield "&".join(f"{name}=1&{name}=abc&{name}=%00" for name in together)
    yield "page=0&p=0&o=99.-abc.0&=&&=x&%00=1&page=999999&p=-1"


def _hostile_persona(visit: Visit) -> str:
    """Whoever may open the page, so that the parameters are read past the door."""
    for persona in (PI, RESEARCHER, SUPERUSER, MANAGER, NOBODY, ANONYMOUS):
        if visit.expected[persona] == 200:
            return persona
    return PI


def _answers_5xx(
    client: Client, url: str, reads: tuple[str, ...], together: tuple[str, ...] = ()
) -> list[str]:
    base = url.split("?")[0]
    failures = []
    for query in hostile_queries(reads, together):
        response = client.get(f"{base}?{query}")
        if response.status_code >= 500:
            failures.append(f"{response.status_code} {base}?{query[:120]}")
    return failures


def test_hostile_query_strings_are_refused_or_ignored(world, slurm_calls):
    clients = {p: client_for(p, world) for p in PERSONAS}
    failures = []
    # One address of each route (the parameters are read the same for every id).
    for page in PAGES.values():
        visit = page.visits(world)[0]
        failures += _answers_5xx(clients[_hostile_persona(visit)], visit.url, page.reads)
    assert not failures, "\n".join(failures)


# What every console model page reads from the query string: the field a popup picks by,
# the popup flag, and the list's filters to go back to.
CONSOLE_READS = ("_to_field", "_popup", "_changelist_filters")


def _console_reads(model, view: str, user: User) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The query parameters a console model page reads, tried alone and together: a
    changelist its search, order, page, filters and date drill-down (alone: a bad filter
    sends the list to ``?e=1`` before the next is read); an add page every field (as
    initial values, read all alike: together)."""
    model_admin = admin.site._registry[model]
    reads = list(CONSOLE_READS)
    together: list[str] = []
    if view == "changelist":
        request = RequestFactory().get("/admin/")
        request.user = user
        changelist = model_admin.get_changelist_instance(request)
        reads += ["q", "o", "p", "all", "e"]
        reads += [name for spec in changelist.filter_specs for name in spec.expected_parameters()]
        if model_admin.date_hierarchy:
            reads += [f"{model_admin.date_hierarchy}__{part}" for part in ("year", "month", "day")]
    elif view == "add":
        together = [field.name for field in model._meta.get_fields() if field.concrete]
    return tuple(dict.fromkeys(reads)), tuple(dict.fromkeys(together))


@pytest.mark.parametrize("persona", STAFF)
def test_hostile_query_strings_on_the_consoles_model_pages(world, persona, slurm_calls):
    """Every model page of the console (list, add, change, delete, history) that
    ``persona`` may open, with hostile values in each parameter it reads. The manager
    tries the parameters every page reads; each list's filters and each add page's fields
    are read by the same code for both personas, so the superuser (who opens every page)
    tries them alone, and the parameters every page reads only where the manager may not
    open the page."""
    client = client_for(persona, world)
    failures = []
    for visit in admin_visits(world):
        match = _MODEL_PAGE.fullmatch(visit.label.removeprefix("admin:"))
        if match is None or visit.expected[persona] != 200:
            continue
        model = next(
            m
            for m in admin.site._registry
            if (m._meta.app_label, m._meta.model_name) == (match["app"], match["model"])
        )
        if persona == MANAGER:
            failures += _answers_5xx(client, visit.url, CONSOLE_READS)
        elif match["view"] in ("changelist", "add"):
            reads, together = _console_reads(model, match["view"], world.users[persona])
            failures += _answers_5xx(client, visit.url, reads, together)
        elif visit.expected[MANAGER] != 200:
            failures += _answers_5xx(client, visit.url, CONSOLE_READS)
    assert not failures, "\n".join(failures)


# Ids no row has (0, past int32 and int64), slugs no project has, and for the console's
# object pages (which take any text) what is not an id at all.
HOSTILE_PATH_VALUES = ["0", str(2**31), str(2**63), str(10**30), "x" * 300, "abc", "-1", "%00"]


def test_hostile_path_parameters_are_404s(world, slurm_calls):
    """Every route that takes an id or a slug, given ids that exist nowhere, huge ones,
    and (for the console's object pages) ids that are not numbers at all."""
    superuser, pi = client_for(SUPERUSER, world), client_for(PI, world)
    failures = []
    for pattern_name in sorted(route_names()):
        # Whoever gets furthest: the superuser in the console, the PI elsewhere.
        client = superuser if pattern_name.startswith("admin:") else pi
        for value in HOSTILE_PATH_VALUES:
            try:
                url = _with_argument(pattern_name, value, world)
            except NoReverseMatch:
                continue  # the route's converter refuses it: the resolver answers 404
            if url is None:
                continue
            response = client.get(url)
            if response.status_code >= 500 or response.status_code == 200:
                failures.append(f"{response.status_code} {url[:150]}")
    assert not failures, "\n".join(failures)


def _with_argument(name: str, value: str, w: World) -> str | None:
    """``name``'s URL with its id or slug replaced by ``value``; None when it takes none."""
    try:
        reverse(name)
        return None  # no parameter
    except NoReverseMatch:
        pass
    if name == "jobs:action":
        return reverse(name, args=[value, "cancel"])
    if name == "admin:view_on_site":
        return reverse(name, args=[ContentType.objects.get_for_model(Project).pk, value])
    if name == "admin:app_list":
        return reverse(name, args=[value]) if not value.isdigit() else None
    raw = reverse(name, args=["12345"]) if name.startswith("admin:") else None
    if raw is not None:
        # The console's object pages take a path: any text at all.
        return raw.replace("12345", quote(value, safe="%"))
    return reverse(name, args=[value])


# --- hostile form values ---------------------------------------------------------------

FORM_VALUES = ["abc", str(10**30), "-1", "\x00", "x" * 3000, "²"]
JOB_FIELDS = ["project", "template", "partition", "name", "nodes", "gpus_per_node",
              "cpus_per_gpu", "mem_per_gpu_gb", "time_limit_minutes", "working_directory",
              "output_path", "error_path", "array", "environment", "script"]  # fmt: skip


def _job_form(w: World) -> dict[str, str]:
    return {
        "project": "crawl-main", "partition": "debug", "name": "hostile", "nodes": "1",
        "gpus_per_node": "1", "time_limit_minutes": "5", "script": "true\n", "title": "t",
    }  # fmt: skip


def _forms(w: World) -> list[tuple[str, str, dict[str, str], list[str]]]:
    """(persona, URL, valid data, fields to spoil) of every form a persona may send."""
    main = w.projects["crawl-main"]
    request = {"cluster": str(w.cluster.pk), "gpu_hours": "10", "starts_on": "2030-01-01",
               "ends_on": "2030-02-01", "justification": "more"}  # fmt: skip
    adjust = reverse("admin:accounts_allocation_adjust", args=[w.allocations["over"].pk])
    return [
        (RESEARCHER, reverse("jobs:preview"), _job_form(w), JOB_FIELDS),
        # Submitting and saving a template read the same form as the preview.
        (RESEARCHER, reverse("jobs:new"), _job_form(w), ["project", "template", "nodes"]),
        (RESEARCHER, reverse("jobs:save_template"), _job_form(w), ["title", "template"]),
        (PI, reverse("project", args=[main.slug]), request, list(request)),
        (RESEARCHER, reverse("tokens"), {"name": "t", "expires_in_days": "7"},
         ["name", "expires_in_days"]),
        # A written public address: nothing is resolved or connected to at registration.
        (RESEARCHER, reverse("webhooks"),
         {"url": "http://93.184.216.34/h", "events": "job.ended", "format": "json"},
         ["owner", "url", "events", "format"]),
        (MANAGER, adjust, {"gpu_hours": "1", "reason": "r"}, ["gpu_hours", "reason"]),
        (RESEARCHER, reverse("preferences"), {"job_mail": "all", "mail_language": "en"},
         ["job_mail", "mail_language"]),
    ]  # fmt: skip


def test_hostile_form_values_are_refused_not_crashed(world, slurm_calls):
    failures = []
    for persona, url, valid, fields in _forms(world):
        client = client_for(persona, world)
        for name in fields:
            for value in FORM_VALUES:
                response = client.post(url, valid | {name: value})
                if response.status_code >= 500:
                    failures.append(f"{response.status_code} {url} {name}={value[:20]!r}")
    assert not failures, "\n".join(failures)


JSON_VALUES: list[object] = ["abc", 10**30, "\x00", None, [], {}]
API_JOB_FIELDS = [*JOB_FIELDS, "cluster", "depends_on"]


def test_hostile_json_values_are_refused_not_crashed(world, slurm_calls):
    """The API's job estimate reads the same request as job creation, and saves nothing."""
    client = client_for(RESEARCHER, world)
    valid = {k: v for k, v in _job_form(world).items() if k != "title"}
    failures = []
    for name in API_JOB_FIELDS:
        for value in JSON_VALUES:
            response = client.post(
                reverse("api:job-estimate"), valid | {name: value}, content_type="application/json"
            )
            if response.status_code >= 500:
                failures.append(f"{response.status_code} {name}={str(value)[:20]!r}")
    assert not failures, "\n".join(failures)
