"""Who may do what: every address of the portal, its console and its API, for every persona.

One table: a row is an address (method, URL, body) and what each persona gets
(DESIGN "Interfaces": another user's object is a 404, a role that is not enough a
403, signed out a redirect to the login page on the web and a 401 in the API, a
dead token a 401). Each (row, persona) pair is one test, which also checks that a
refusal changed nothing in the database and that a read changed nothing at all.

The table is complete by construction: ``test_every_route_has_a_row`` walks the
URL resolver, so a new page or endpoint without a row fails the suite.

Personas: the owner of a job (alice), a teammate (bob, a member of the same
project), the project's PI (pat), an allocation manager (olga, staff and in the
allocation managers' group), a staff user without any permission, an outsider
(charlie, PI of another project only), and three callers without an identity:
no credentials at all, the owner's expired token, the owner's revoked token.
Two more came in by single sign-on, made by ``accounts.identity.sign_in`` as at a
first sign-in: a member of the owner's project through the provider's groups (olga,
from OpenID Connect claims) and a PI of the other project through the directory's
groups (dora, from an LDAP entry). Each must get exactly what the local persona of
the same standing (the teammate, the outsider) gets, ``LIKE``: the way in gives no
more and no less. A job runs as a login of the web host (its home is the default
working directory), and the host has five: the manager has none, as in the demo.
Nothing here reaches Slurm: the only cluster is offline (see conftest).
"""

import datetime as dt
import os
import pwd
import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client, override_settings
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone

from accounts.caps import member_cap_set
from accounts.identity import Person, sign_in
from accounts.models import (
    Allocation,
    AllocationRequest,
    ExternalIdentity,
    LedgerEntry,
    MemberCap,
    PersonalAccessToken,
    Project,
    SlurmAccountListing,
    User,
    Webhook,
    WebhookDelivery,
)
from accounts.oidc import person_from_claims
from accounts.requests import allocation_request_create
from accounts.tokens import token_create
from clusters.models import Cluster, Partition
from jobs.models import Job, JobEvent, JobTemplate
from tests.factories import listed_account_row
from tests.security.conftest import (
    funded_project,
    kept_for_the_module,
    offline_cluster_create,
    person,
)

pytestmark = pytest.mark.django_db

TODAY = dt.date.today()

OWNER, TEAMMATE, PI, MANAGER, STAFF, OUTSIDER = (
    "owner",
    "teammate",
    "pi",
    "manager",
    "staff",
    "outsider",
)
OIDC_TEAMMATE, LDAP_OUTSIDER = "oidc-teammate", "ldap-outsider"
ANONYMOUS, EXPIRED, REVOKED = "anonymous", "expired", "revoked"
# The personas who signed in through the provider or the directory, and the local
# persona whose answers are theirs.
LIKE = {OIDC_TEAMMATE: TEAMMATE, LDAP_OUTSIDER: OUTSIDER}
SIGNED_IN = (OWNER, TEAMMATE, PI, MANAGER, STAFF, OUTSIDER, *LIKE)
SIGNED_OUT = (ANONYMOUS, EXPIRED, REVOKED)
PERSONAS = SIGNED_IN + SIGNED_OUT

JOB_NAME = "sec-secret-job"  # appears only where the job may be seen
OUTPUT_TEXT = "the owners private output\n"


@pytest.fixture(autouse=True)
def _no_throttling(settings):
    # Rate limits have their own tests; here hundreds of calls a minute are expected.
    settings.API_RATE = None
    settings.API_ANON_RATE = None


@dataclass(frozen=True)
class Redirect:
    """A 302 to ``to``: a prefix of the Location (or the exact Location with ``exact``);
    ``to=""`` is a redirect anywhere but to a login page (a write that succeeded)."""

    to: str
    exact: bool = False


LOGIN = Redirect("/login/?next=")
ADMIN_LOGIN = Redirect("/admin/login/?next=")
MOVED = Redirect("")
TO_LOGIN_PAGE = Redirect("/login/", exact=True)  # where logging out leads
TO_PROVIDER = Redirect(f"{settings.OIDC_ISSUER}/auth?")  # the identity provider's log-in
Expected = int | Redirect


def refused(expected: Expected) -> bool:
    if isinstance(expected, Redirect):
        return expected in (LOGIN, ADMIN_LOGIN)
    return expected >= 400


def expect(signed_in: Expected, signed_out: Expected, **by_persona: Expected) -> dict:
    """Every persona's answer: ``signed_in`` for those with an identity, ``signed_out``
    for the rest, and ``by_persona`` where one differs."""
    unknown = set(by_persona) - (set(PERSONAS) - set(LIKE))
    assert not unknown, unknown
    codes = dict.fromkeys(SIGNED_IN, signed_in) | dict.fromkeys(SIGNED_OUT, signed_out) | by_persona
    return codes | {sso: codes[local] for sso, local in LIKE.items()}


@dataclass(frozen=True)
class World:
    users: dict[str, User]
    cluster: Cluster
    partition: Partition
    project: Project
    other_project: Project
    allocation: Allocation
    entry: LedgerEntry
    job: Job
    request: AllocationRequest
    token: PersonalAccessToken  # one of the owner's, for the revoke rows
    template: JobTemplate  # the owner's private one
    dead_tokens: dict[str, str]
    hook: Webhook  # the owner's own
    project_hook: Webhook  # the project's, registered by its PI


# The site's mapping of groups to projects, for the module.
SSO_GROUPS = [("sec-alpha-members", "sec-alpha", "member"), ("sec-beta-pis", "sec-beta", "pi")]


def sso_personas_sign_in() -> dict[str, User]:
    """The SSO personas' first sign-in. The provider's site has no directory here (the
    matrix asks nothing of slapd); a worker answers the Unix login survey at once, as
    it knows of no cluster (this module's are never committed)."""
    with override_settings(LDAP_URL="", GROUP_PROJECTS=SSO_GROUPS):
        olga = sign_in(
            person_from_claims(
                {
                    "sub": "u-sec-olga",
                    "preferred_username": "olga.ortiz",
                    "uid": "olga",
                    "email": "olga@portal.test",
                    "groups": ["sec-alpha-members"],
                }
            )
        )
        dora = sign_in(
            Person(
                source=ExternalIdentity.Source.LDAP,
                issuer="ldap://127.0.0.1:3389",
                subject="uid=dora,ou=people,dc=portal,dc=test",
                login="dora",
                posix_username="dora",
                email="dora@portal.test",
                groups=frozenset({"sec-beta-pis"}),
            )
        )
    return {OIDC_TEAMMATE: olga, LDAP_OUTSIDER: dora}


def build_world(output_dir: Path) -> World:
    cluster = offline_cluster_create()
    users = {
        OWNER: person("sec-owner", posix="alice"),
        TEAMMATE: person("sec-teammate", posix="bob"),
        PI: person("sec-pi", posix="pat"),
        MANAGER: person("sec-manager", staff=True, manager=True),
        STAFF: person("sec-staff", staff=True),
        OUTSIDER: person("sec-outsider", posix="charlie"),
    }
    project = funded_project(
        "sec-alpha",
        cluster=cluster,
        members={users[OWNER]: "member", users[TEAMMATE]: "member", users[PI]: "pi"},
    )
    other = funded_project("sec-beta", cluster=cluster, members={users[OUTSIDER]: "pi"})
    users |= sso_personas_sign_in()
    allocation = project.allocations.get()
    partition = cluster.partitions.get(name="debug")
    job = Job.objects.create(
        owner=users[OWNER],
        project=project,
        cluster=cluster,
        partition=partition,
        name=JOB_NAME,
        gpus_per_node=1,
        time_limit_minutes=5,
        working_directory=str(output_dir),
        output_path=f"{output_dir}/slurm-%j.out",
        error_path=f"{output_dir}/slurm-%j.out",
        script="echo hi\n",
        rendered_script="#!/bin/bash\necho hi\n",
        billing_weight=partition.billing_weight,
        requested_gpu_seconds=300,
        slurm_job_id=4242,
        state=Job.State.PENDING,
    )
    JobEvent.objects.create(job=job, at=job.created_at, state=Job.State.PENDING, detail="queued")
    request = allocation_request_create(
        project=project,
        cluster=cluster,
        requested_by=users[PI],
        gpu_hours=50,
        starts_on=TODAY + dt.timedelta(days=40),
        ends_on=TODAY + dt.timedelta(days=70),
        justification="sec-secret-justification",
    )
    token, _ = token_create(user=users[OWNER], name="laptop")
    # The owner has a cap of their own and every member a default: each can be lifted.
    member_cap_set(actor=users[PI], allocation=allocation, user=users[OWNER], gpu_hours=3)
    member_cap_set(actor=users[PI], allocation=allocation, user=None, gpu_hours=4)
    template = JobTemplate.objects.create(
        name="sec-secret-template", scope="user", owner=users[OWNER], script="true\n"
    )
    expired, expired_plain = token_create(user=users[OWNER], name="old")
    PersonalAccessToken.objects.filter(pk=expired.pk).update(
        expires_at=timezone.now() - dt.timedelta(seconds=1)
    )
    SlurmAccountListing.objects.create(
        cluster=cluster, listed_at=timezone.now(), accounts=[listed_account_row("handmade")]
    )
    revoked, revoked_plain = token_create(user=users[OWNER], name="gone")
    PersonalAccessToken.objects.filter(pk=revoked.pk).update(revoked_at=timezone.now())
    return World(
        users=users,
        cluster=cluster,
        partition=partition,
        project=project,
        other_project=other,
        allocation=allocation,
        entry=allocation.entries.get(),
        job=job,
        request=request,
        token=token,
        template=template,
        dead_tokens={EXPIRED: expired_plain, REVOKED: revoked_plain},
        # Port 9 on loopback: a test delivery the worker makes is refused before it connects.
        hook=Webhook.objects.create(
            user=users[OWNER], url="http://127.0.0.1:9/sec", events=["job.ended"], secret="s"
        ),
        project_hook=Webhook.objects.create(
            project=project, url="http://127.0.0.1:9/sec", events=["job.ended"], secret="s"
        ),
    )


def write_output(output_dir: Path) -> None:
    """The owner's job has written its stdout, in the owner's home, owned by the owner."""
    entry = pwd.getpwnam("alice")
    output_dir.mkdir(parents=True)
    path = output_dir / "slurm-4242.out"
    path.write_text(OUTPUT_TEXT)
    for part in (output_dir.parent, output_dir, path):
        os.chown(part, entry.pw_uid, entry.pw_gid)


@pytest.fixture(scope="module")
def _module_world(
    django_db_setup, django_db_blocker, _seeded_by_migrations, celery_worker
) -> Iterator[World]:
    output_dir = Path(pwd.getpwnam("alice").pw_dir) / "portal-tests" / f"sec-{uuid.uuid4().hex[:8]}"
    write_output(output_dir)
    with kept_for_the_module(django_db_blocker, _seeded_by_migrations):
        yield build_world(output_dir)
    shutil.rmtree(output_dir, ignore_errors=True)


@pytest.fixture
def world(_module_world, db) -> World:
    return _module_world


# --- the table --------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    name: str  # the route's name, as reverse() knows it
    method: str
    url: Callable[[World], str]
    codes: dict[str, Expected]
    label: str = ""  # when one route has several rows
    data: Callable[[World], dict] | None = None
    changes: bool | None = None  # whether a success writes; default: every method but GET
    reveals: tuple[Callable[[World], str], frozenset[str]] | None = None

    @property
    def api(self) -> bool:
        return self.name.startswith("api:")

    @property
    def writes(self) -> bool:
        return self.method != "GET" if self.changes is None else self.changes

    @property
    def id(self) -> str:
        return f"{self.method} {self.label or self.name}"


def at(name: str, *args: Callable[[World], object], query: str = "") -> Callable[[World], str]:
    """A URL builder: reverse(name) with arguments taken from the world."""
    return lambda w: reverse(name, args=[arg(w) for arg in args]) + query


def job_id(w: World) -> int:
    return w.job.pk


def slug(w: World) -> str:
    return w.project.slug


def owner_name(w: World) -> str:
    return w.users[OWNER].username


def job_form(w: World) -> dict:
    return {
        "project": w.project.slug,
        "partition": "debug",
        "name": "matrix",
        "nodes": 1,
        "gpus_per_node": 1,
        "time_limit_minutes": 5,
        "script": "echo hi\n",
    }


def request_form(w: World) -> dict:
    return {
        "project": w.project.slug,
        "cluster": w.cluster.pk,
        "gpu_hours": 10,
        "starts_on": (TODAY + dt.timedelta(days=100)).isoformat(),
        "ends_on": (TODAY + dt.timedelta(days=130)).isoformat(),
        "justification": "more",
    }


def api_request_form(w: World) -> dict:
    return {**request_form(w), "cluster": w.cluster.name}


def job_name(w: World) -> str:
    return JOB_NAME


def output_text(w: World) -> str:
    return OUTPUT_TEXT.strip()


def admin(model: str, view: str, *args: Callable[[World], object]) -> Callable[[World], str]:
    return at(f"admin:{model}_{view}", *args)


SEES_THE_JOB = frozenset({OWNER, PI})
CONSOLE = expect(ADMIN_LOGIN, ADMIN_LOGIN, manager=200, staff=403)

ROWS = [
    # --- the portal's pages ---
    Row("home", "GET", at("home"), expect(200, LOGIN), reveals=(job_name, frozenset({OWNER}))),
    Row("project", "GET", at("project", slug), expect(404, LOGIN, owner=200, teammate=200, pi=200),
        reveals=(job_name, SEES_THE_JOB)),
    # The allocation request form is the leads': members are not shown it (a 404).
    Row("project", "POST", at("project", slug), expect(404, LOGIN, pi=MOVED), data=request_form),
    Row("project_caps", "GET", at("project_caps", slug),
        expect(404, LOGIN, owner=200, teammate=200, pi=200)),
    # Only the leads change caps; for a member the form is not there (a 404).
    Row("project_caps", "POST", at("project_caps", slug), expect(404, LOGIN, pi=MOVED),
        data=lambda w: {"allocation": w.allocation.pk, "member": "*", "gpu_hours": "9"}),
    Row("project_caps", "POST", at("project_caps", slug), expect(404, LOGIN, pi=MOVED),
        data=lambda w: {"allocation": w.allocation.pk, "lift": w.users[OWNER].username},
        label="project_caps lift"),
    Row("status", "GET", at("status"), expect(200, LOGIN)),
    Row("tokens", "GET", at("tokens"), expect(200, LOGIN)),
    Row("tokens", "POST", at("tokens"), expect(200, LOGIN),
        data=lambda w: {"name": "new", "expires_in_days": 7}),
    Row("preferences", "GET", at("preferences"), expect(200, LOGIN)),
    Row("preferences", "POST", at("preferences"), expect(MOVED, LOGIN),
        data=lambda w: {"job_mail": "all", "mail_language": "en"}),
    Row("token_revoke", "POST", at("token_revoke", lambda w: w.token.pk),
        expect(404, LOGIN, owner=MOVED)),
    Row("webhooks", "GET", at("webhooks"), expect(200, LOGIN)),
    # A written public address: registration resolves nothing and connects nowhere.
    Row("webhooks", "POST", at("webhooks"), expect(200, LOGIN), data=lambda w: {
        "url": "http://93.184.216.34/hook", "events": "job.ended", "format": "json"}),
    Row("webhooks", "POST", at("webhooks"), expect(400, LOGIN, pi=200), label="webhooks project",
        changes=True, data=lambda w: {"owner": w.project.slug, "url": "http://93.184.216.34/h",
                                      "events": "allocation.usage_80", "format": "json"}),
    Row("webhook_delete", "POST", at("webhook_delete", lambda w: w.hook.pk),
        expect(404, LOGIN, owner=MOVED)),
    Row("webhook_delete", "POST", at("webhook_delete", lambda w: w.project_hook.pk),
        expect(404, LOGIN, pi=MOVED), label="webhook_delete project"),
    Row("webhook_test", "POST", at("webhook_test", lambda w: w.hook.pk),
        expect(404, LOGIN, owner=MOVED)),
    Row("webhook_test", "POST", at("webhook_test", lambda w: w.project_hook.pk),
        expect(404, LOGIN, pi=MOVED), label="webhook_test project"),
    # Public: the verdict is the same for everyone; a cluster that is offline (the only
    # one here) is named to staff but does not fail it.
    Row("healthz", "GET", at("healthz"), expect(200, 200)),
    # A scrape is allowed by a token or an address, never by who is signed in: dev mode
    # lets loopback scrape, as these requests come (tests/portal/test_metrics.py has the
    # token, the allow-list and the refusals).
    Row("metrics", "GET", at("metrics"), expect(200, 200)),
    Row("login", "GET", at("login"), expect(Redirect("/", exact=True), 200)),
    # The console's own login page: staff are sent on to the console, anyone else is
    # shown the form (a signed-in researcher is told the account is not staff).
    Row("admin_login", "GET", at("admin_login"),
        expect(200, 200, manager=Redirect("/admin/", exact=True),
               staff=Redirect("/admin/", exact=True))),
    Row("logout", "GET", at("logout"), expect(405, 405)),  # no state change on GET
    # Sign-in with the provider: off to its log-in page, whoever asks; a callback this
    # browser did not start leads back to the log-in page, and logs no one out.
    Row("oidc_start", "GET", at("oidc_start"), expect(TO_PROVIDER, TO_PROVIDER)),
    Row("oidc_callback", "GET", at("oidc_callback", query="?code=x&state=y"),
        expect(TO_LOGIN_PAGE, TO_LOGIN_PAGE)),
    Row("oidc_callback", "GET", at("oidc_callback", query="?error=access_denied"),
        expect(TO_LOGIN_PAGE, TO_LOGIN_PAGE), label="oidc_callback?error"),
    Row("logout", "POST", at("logout"), expect(TO_LOGIN_PAGE, TO_LOGIN_PAGE), changes=False),
    Row("set_language", "POST", at("set_language"), expect(MOVED, MOVED), changes=False,
        data=lambda w: {"language": "en", "next": "/"}),
    # --- jobs ---
    Row("jobs:list", "GET", at("jobs:list"), expect(200, LOGIN),
        reveals=(job_name, frozenset({OWNER}))),
    Row("jobs:list", "GET", at("jobs:list", query="?project=sec-alpha"), expect(200, LOGIN),
        label="jobs:list?project", reveals=(job_name, SEES_THE_JOB)),
    Row("jobs:new", "GET", at("jobs:new"), expect(200, LOGIN)),
    Row("jobs:new", "GET", at("jobs:new", query="?template={template}"),
        expect(404, LOGIN, owner=200), label="jobs:new?template"),
    Row("jobs:new", "GET", at("jobs:new", query="?from={job}"),
        expect(404, LOGIN, owner=200, pi=200), label="jobs:new?from"),
    # Only a member can name the project: for anyone else it is not one of the choices.
    Row("jobs:new", "POST", at("jobs:new"),
        expect(400, LOGIN, owner=MOVED, teammate=MOVED, pi=MOVED), data=job_form),
    Row("jobs:preview", "POST", at("jobs:preview"), expect(200, LOGIN), data=job_form,
        changes=False),
    Row("jobs:save_template", "POST", at("jobs:save_template"),
        expect(400, LOGIN, owner=MOVED, teammate=MOVED, pi=MOVED),
        data=lambda w: {**job_form(w), "title": "mine"}),
    Row("jobs:detail", "GET", at("jobs:detail", job_id), expect(404, LOGIN, owner=200, pi=200)),
    Row("jobs:status", "GET", at("jobs:status", job_id), expect(404, LOGIN, owner=200, pi=200)),
    Row("jobs:output", "GET", at("jobs:output", job_id), expect(404, LOGIN, owner=200, pi=200),
        reveals=(output_text, SEES_THE_JOB)),
    *(
        Row("jobs:action", "POST", at("jobs:action", job_id, lambda w, a=action: a),
            expect(404, LOGIN, owner=MOVED, pi=MOVED), label=f"jobs:action {action}")
        for action in ("cancel", "hold", "release")
    ),
    Row("jobs:action", "POST", at("jobs:action", job_id, lambda w: "delete"),
        expect(404, LOGIN), label="jobs:action delete"),
    # --- the allocation managers' console ---
    Row("admin:index", "GET", at("admin:index"), expect(ADMIN_LOGIN, ADMIN_LOGIN, manager=200,
        staff=200)),
    *(
        Row(f"admin:{model}_changelist", "GET", admin(model, "changelist"), CONSOLE)
        for model in (
            "accounts_project", "accounts_allocation", "accounts_allocationrequest",
            "jobs_job", "accounts_ledgerentry",
        )
    ),
    Row("admin:accounts_project_change", "GET",
        admin("accounts_project", "change", lambda w: w.project.pk), CONSOLE),
    Row("admin:accounts_allocation_change", "GET",
        admin("accounts_allocation", "change", lambda w: w.allocation.pk), CONSOLE),
    Row("admin:accounts_allocationrequest_change", "GET",
        admin("accounts_allocationrequest", "change", lambda w: w.request.pk), CONSOLE),
    Row("admin:jobs_job_change", "GET", admin("jobs_job", "change", job_id), CONSOLE),
    Row("admin:accounts_ledgerentry_change", "GET",
        admin("accounts_ledgerentry", "change", lambda w: w.entry.pk), CONSOLE),
    Row("admin:accounts_allocationrequest_changelist", "POST",
        admin("accounts_allocationrequest", "changelist"),
        expect(ADMIN_LOGIN, ADMIN_LOGIN, manager=MOVED, staff=403), label="admin approve action",
        data=lambda w: {"action": "approve", "_selected_action": [w.request.pk], "index": 0}),
    Row("admin:accounts_project_usage", "GET",
        admin("accounts_project", "usage", lambda w: w.project.pk), CONSOLE),
    Row("admin:accounts_project_usage_charges", "GET",
        admin("accounts_project", "usage_charges", lambda w: w.project.pk), CONSOLE),
    Row("admin:accounts_project_usage_monthly", "GET",
        admin("accounts_project", "usage_monthly", lambda w: w.project.pk), CONSOLE),
    Row("admin:accounts_allocation_adjust", "GET",
        admin("accounts_allocation", "adjust", lambda w: w.allocation.pk), CONSOLE),
    Row("admin:accounts_allocation_adjust", "POST",
        admin("accounts_allocation", "adjust", lambda w: w.allocation.pk),
        expect(ADMIN_LOGIN, ADMIN_LOGIN, manager=MOVED, staff=403),
        data=lambda w: {"gpu_hours": "1", "reason": "matrix"}),
    Row("admin:accounts_allocation_drift", "GET", admin("accounts_allocation", "drift"), CONSOLE),
    Row("admin:accounts_adoptedaccount_import", "GET",
        admin("accounts_adoptedaccount", "import"), CONSOLE),
    Row("admin:accounts_adoptedaccount_adopt", "GET",
        admin("accounts_adoptedaccount", "adopt", lambda w: w.cluster.pk, lambda w: "handmade"),
        CONSOLE),
    # --- the REST API ---
    Row("api:me", "GET", at("api:me"), expect(200, 401)),
    Row("api:me", "PATCH", at("api:me"), expect(200, 401), data=lambda w: {"job_mail": "never"}),
    Row("api:projects", "GET", at("api:projects"), expect(200, 401)),
    Row("api:project", "GET", at("api:project", slug),
        expect(404, 401, owner=200, teammate=200, pi=200)),
    Row("api:project-usage", "GET", at("api:project-usage", slug),
        expect(404, 401, owner=403, teammate=403, pi=200)),
    # Caps: a member sees their own, the PI sets and lifts them; no one else sees any.
    Row("api:project-caps", "GET", at("api:project-caps", slug),
        expect(404, 401, owner=200, teammate=200, pi=200)),
    *(
        Row("api:project-caps", method, at("api:project-caps", slug),
            expect(404, 401, owner=403, teammate=403, pi=200), data=data)
        for method, data in (("PUT", lambda w: {"gpu_hours": 7}), ("DELETE", None))
    ),
    Row("api:project-member-cap", "GET", at("api:project-member-cap", slug, owner_name),
        expect(404, 401, owner=200, pi=200), reveals=(lambda w: "3.0", frozenset({OWNER, PI}))),
    *(
        Row("api:project-member-cap", method, at("api:project-member-cap", slug, owner_name),
            expect(404, 401, owner=403, teammate=403, pi=200), data=data)
        for method, data in (("PUT", lambda w: {"gpu_hours": 7}), ("DELETE", None))
    ),
    Row("api:partitions", "GET", at("api:partitions"), expect(200, 401)),
    Row("api:status", "GET", at("api:status"), expect(200, 401)),
    Row("api:jobs", "GET", at("api:jobs"), expect(200, 401),
        reveals=(job_name, frozenset({OWNER}))),
    Row("api:jobs", "GET", at("api:jobs", query="?project=sec-alpha"),
        expect(400, 401, owner=200, teammate=200, pi=200), label="api:jobs?project",
        reveals=(job_name, SEES_THE_JOB)),
    Row("api:jobs", "POST", at("api:jobs"), expect(400, 401, owner=201, teammate=201, pi=201),
        data=job_form),
    Row("api:job-estimate", "POST", at("api:job-estimate"),
        expect(400, 401, owner=200, teammate=200, pi=200), data=job_form, changes=False),
    Row("api:job", "GET", at("api:job", job_id), expect(404, 401, owner=200, pi=200)),
    *(
        Row(f"api:job-{action}", "POST", at(f"api:job-{action}", job_id),
            expect(404, 401, owner=202, pi=202))
        for action in ("cancel", "hold", "release")
    ),
    Row("api:job-output", "GET", at("api:job-output", job_id),
        expect(404, 401, owner=200, pi=200), reveals=(output_text, SEES_THE_JOB)),
    Row("api:templates", "GET", at("api:templates"), expect(200, 401),
        reveals=(lambda w: w.template.name, frozenset({OWNER}))),
    Row("api:templates", "POST", at("api:templates"), expect(201, 401),
        data=lambda w: {"name": "t", "script": "true\n"}),
    Row("api:allocation-requests", "GET", at("api:allocation-requests"), expect(200, 401),
        reveals=(lambda w: w.request.justification, frozenset({PI, MANAGER}))),
    # A member is told the role is not enough; for a non-member the project does not exist.
    Row("api:allocation-requests", "POST", at("api:allocation-requests"),
        expect(400, 401, owner=403, teammate=403, pi=201), data=api_request_form),
    Row("api:allocation-request-approve", "POST",
        at("api:allocation-request-approve", lambda w: w.request.pk),
        expect(403, 401, manager=200), data=lambda w: {"comment": "ok"}),
    Row("api:allocation-request-deny", "POST",
        at("api:allocation-request-deny", lambda w: w.request.pk),
        expect(403, 401, manager=200), data=lambda w: {"comment": "no"}),
    Row("api:tokens", "GET", at("api:tokens"), expect(200, 401)),
    # A token cannot mint tokens (only a browser session can).
    Row("api:tokens", "POST", at("api:tokens"), expect(403, 401), data=lambda w: {"name": "x"}),
    Row("api:token", "DELETE", at("api:token", lambda w: w.token.pk), expect(404, 401, owner=204)),
    Row("api:webhooks", "GET", at("api:webhooks"), expect(200, 401)),
    Row("api:webhooks", "POST", at("api:webhooks"), expect(201, 401),
        data=lambda w: {"url": "http://93.184.216.34/hook", "events": ["job.ended"]}),
    Row("api:webhooks", "POST", at("api:webhooks"),
        expect(400, 401, owner=403, teammate=403, pi=201), label="api:webhooks project",
        data=lambda w: {"url": "http://93.184.216.34/h", "events": ["job.ended"],
                        "project": w.project.slug}),
    Row("api:webhook", "DELETE", at("api:webhook", lambda w: w.hook.pk),
        expect(404, 401, owner=204)),
    Row("api:webhook", "DELETE", at("api:webhook", lambda w: w.project_hook.pk),
        expect(404, 401, pi=204), label="api:webhook project"),
    Row("api:webhook-test", "POST", at("api:webhook-test", lambda w: w.hook.pk),
        expect(404, 401, owner=202)),
    Row("api:webhook-test", "POST", at("api:webhook-test", lambda w: w.project_hook.pk),
        expect(404, 401, pi=202), label="api:webhook-test project"),
    # The command line's sign-in through the provider: where it is, for anyone; a token
    # the provider did not sign for the command line is refused whoever sends it.
    Row("api:sign-in", "GET", at("api:sign-in"), expect(200, 200)),
    Row("api:token-sign-in", "POST", at("api:token-sign-in"), expect(401, 401),
        data=lambda w: {"id_token": "not.a.token", "access_token": "x", "name": "laptop"}),
    # The schema and docs are public, but a dead token is still told it is dead.
    Row("api:schema", "GET", at("api:schema"), expect(200, 401, anonymous=200)),
    Row("api:docs", "GET", at("api:docs"), expect(200, 401, anonymous=200)),
]  # fmt: skip


def _url(row: Row, w: World) -> str:
    return row.url(w).format(template=w.template.pk, job=w.job.pk)


def client_for(persona: str, w: World, *, api: bool) -> Client:
    if persona in w.dead_tokens:
        # On the web the header is ignored (a token is not a session): signed out.
        return Client(headers={"Authorization": f"Bearer {w.dead_tokens[persona]}"})
    if persona == ANONYMOUS:
        return Client()
    user = w.users[persona]
    if api:
        _, plain = token_create(user=user, name="matrix")
        return Client(headers={"Authorization": f"Bearer {plain}"})
    client = Client()
    client.force_login(user)
    return client


def snapshot() -> dict[str, object]:
    """What any write of the table changes: counts, and the states that move."""
    return {
        "jobs": list(Job.objects.order_by("pk").values_list("pk", "state", "cancel_requested_at")),
        "events": JobEvent.objects.count(),
        "ledger": LedgerEntry.objects.count(),
        "allocations": Allocation.objects.count(),
        "requests": list(AllocationRequest.objects.order_by("pk").values_list("pk", "state")),
        "templates": JobTemplate.objects.count(),
        "tokens": list(PersonalAccessToken.objects.order_by("pk").values_list("pk", "revoked_at")),
        "webhooks": list(Webhook.objects.order_by("pk").values_list("pk", flat=True)),
        "deliveries": WebhookDelivery.objects.count(),
        "preferences": list(User.objects.order_by("pk").values_list("pk", "job_mail")),
        "caps": list(MemberCap.objects.order_by("pk").values_list("pk", "gpu_seconds")),
    }


def call(client: Client, row: Row, w: World):
    url = _url(row, w)
    data = row.data(w) if row.data else None
    if row.method == "GET":
        return client.get(url)
    if row.method == "DELETE":
        return client.delete(url)
    if row.method == "PATCH":
        return client.patch(url, data or {}, content_type="application/json")
    if row.method == "PUT":
        return client.put(url, data or {}, content_type="application/json")
    if row.api:
        return client.post(url, data or {}, content_type="application/json")
    return client.post(url, data or {})


def check_status(response, expected: Expected) -> None:
    location = response.get("Location", "")
    answer = f"{response.status_code} {location}".strip()
    if not isinstance(expected, Redirect):
        assert response.status_code == expected, answer
        return
    assert response.status_code == 302, answer
    if expected.exact:
        assert location == expected.to, answer
    elif expected.to:
        assert location.startswith(expected.to), answer
    else:
        assert not re.search(r"/login/", location), answer


def check_error_shape(response) -> None:
    if response["Content-Type"].startswith("application/json"):
        body = response.json()
        assert set(body) == {"error"}, body
        assert {"code", "message", "fields"} <= set(body["error"]), body


CASES = [
    pytest.param(row, persona, id=f"{row.id}-{persona}") for row in ROWS for persona in PERSONAS
]


@pytest.mark.parametrize(("row", "persona"), CASES)
def test_the_matrix(world, row, persona):
    expected = row.codes[persona]
    client = client_for(persona, world, api=row.api)
    before = snapshot()

    response = call(client, row, world)

    check_status(response, expected)
    after = snapshot()
    if refused(expected) or not row.writes:
        assert after == before, "a refusal or a read changed the database"
    else:
        assert after != before, "the write was accepted but changed nothing"
    if row.api and refused(expected) and expected != 405:
        check_error_shape(response)
    if row.reveals:
        marker, seers = row.reveals
        shown = marker(world) in response.content.decode()
        assert shown == (LIKE.get(persona, persona) in seers), f"{marker(world)!r} shown: {shown}"


def test_the_sso_personas_came_in_by_signing_in(world):
    """They are users of their own, made at their first sign-in, with the standing the
    groups gave them (not one made by hand or linked to a local persona)."""
    for persona, source, project, role in (
        (OIDC_TEAMMATE, "oidc", world.project, "member"),
        (LDAP_OUTSIDER, "ldap", world.other_project, "pi"),
    ):
        user = world.users[persona]
        assert user.identities.get().source == source
        assert not user.has_usable_password()
        assert [(m.project, m.role, m.source) for m in user.memberships.all()] == [
            (project, role, "directory")
        ]
    assert len({user.pk for user in world.users.values()}) == len(world.users)


# --- the table is complete and well formed -------------------------------------------

# Pages Django's admin site has of itself, and the standard pages of every model;
# what our apps add to the console (usage, adjust, drift…) must have rows.
_ADMIN_OWN = {
    "index", "login", "logout", "password_change", "password_change_done", "autocomplete",
    "jsi18n", "view_on_site", "app_list", "auth_user_password_change",
}  # fmt: skip
_ADMIN_MODEL_PAGE = re.compile(r"[a-z]+_[a-z]+_(changelist|add|change|delete|history)")
OUR_APPS = ("accounts_", "jobs_", "clusters_")


def _names(patterns, namespace: str = "") -> Iterator[str]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            inner = namespace + (f"{pattern.namespace}:" if pattern.namespace else "")
            yield from _names(pattern.url_patterns, inner)
        elif isinstance(pattern, URLPattern) and pattern.name:
            yield namespace + pattern.name


def routes_needing_rows() -> set[str]:
    needed = set()
    for name in _names(get_resolver().url_patterns):
        if name.startswith("admin:"):
            page = name.removeprefix("admin:")
            if page in _ADMIN_OWN or _ADMIN_MODEL_PAGE.fullmatch(page):
                continue
            if not page.startswith(OUR_APPS):
                continue
        needed.add(name)
    return needed


def test_every_route_has_a_row():
    missing = routes_needing_rows() - {row.name for row in ROWS}
    assert not missing, f"routes without a row in the authorisation matrix: {sorted(missing)}"
    assert {"api:jobs", "jobs:detail", "admin:accounts_project_usage"} <= routes_needing_rows()


def test_the_console_s_key_pages_have_rows():
    names = {row.name for row in ROWS}
    for model in ("accounts_project", "accounts_allocation", "accounts_allocationrequest",
                  "jobs_job", "accounts_ledgerentry"):  # fmt: skip
        assert {f"admin:{model}_changelist", f"admin:{model}_change"} <= names


def test_every_row_says_what_every_persona_gets():
    for row in ROWS:
        assert set(row.codes) == set(PERSONAS), row.id
    ids = [row.id for row in ROWS]
    assert len(ids) == len(set(ids)), "two rows with the same id: give one a label"
