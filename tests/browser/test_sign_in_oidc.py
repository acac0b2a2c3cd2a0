"""Single sign-on in a real browser, through the stack's OpenID provider and its own log-in
page: alice.anders comes back as the portal user alice, and her job runs as the Unix user
alice on the dev cluster; eve, who edits the request on its way to the provider, comes
back as no one."""

import os
import pwd
import re
import shutil
import uuid
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import pytest
from django.conf import settings
from playwright.sync_api import Route, expect

from accounts.models import ExternalIdentity, User
from jobs.models import Job
from tests.browser.conftest import screenshot
from tests.browser.test_researcher import JOB_TIMEOUT_MS, fact, fill_resources, state_badge, submit
from tests.conftest import running_worker

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def alices_workdir():
    """A fresh directory in the Unix user alice's home, owned by her (no portal user is
    made for it: she is made at her first sign-in)."""
    entry = pwd.getpwnam("alice")
    path = Path(entry.pw_dir) / "portal-tests" / uuid.uuid4().hex[:8]
    path.mkdir(parents=True)
    for part in (path.parent, path):
        os.chown(part, entry.pw_uid, entry.pw_gid)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_alice_signs_in_at_the_provider_and_her_job_runs_as_alice(
    open_page, live_server, make_project, alices_workdir
):
    page = open_page()
    page.goto("/login/")
    page.get_by_role("link", name="Log in with single sign-on").click()

    # The provider's own page, at the provider; she types her name there.
    expect(page).to_have_url(re.compile(rf"^{re.escape(settings.OIDC_ISSUER)}/interaction/"))
    page.get_by_label("Username").fill("alice.anders")
    password = (settings.STACK_DIR / "secrets" / "oidc-user-alice.anders").read_text().strip()
    page.get_by_label("Password").fill(password)
    screenshot(page, "sso-provider-login.png")
    page.get_by_role("button", name="Sign in").click()

    expect(page).to_have_url(f"{live_server.url}/")
    expect(page.locator("header nav")).to_contain_text("Log out alice")
    alice = User.objects.get(username="alice")
    assert alice.posix_username == "alice"
    assert ExternalIdentity.objects.get(user=alice).login == "alice.anders"

    make_project(members={alice: "member"}, gpu_hours=1)
    with running_worker(beat=True):
        page.goto("/jobs/new/")
        page.get_by_label("Job name").fill("whoami")
        fill_resources(page, workdir=alices_workdir, script='echo "ran as $(id -un)"\n')
        page.get_by_label("CPUs per GPU").fill("1")
        page.get_by_label("Memory per GPU (GB)").fill("1")
        submit(page)
        expect(state_badge(page)).to_have_text("Completed", timeout=JOB_TIMEOUT_MS)
        expect(page.locator("pre[data-output]")).to_contain_text(
            "ran as alice", timeout=JOB_TIMEOUT_MS
        )
        expect(fact(page, "Exit code")).to_have_text("0", timeout=JOB_TIMEOUT_MS)
        screenshot(page, "sso-job.png")
    job = Job.objects.get()
    assert (job.owner, job.state) == (alice, "completed")


def provider_password(login: str) -> str:
    return (settings.STACK_DIR / "secrets" / f"oidc-user-{login}").read_text().strip()


@pytest.mark.parametrize(
    ("scope", "says"),
    [
        (
            "openid posix groups",
            "did not grant everything the portal asks for (email profile missing)",
        ),
        ("openid posix", "did not grant everything the portal asks for (email groups profile"),
        (None, "Your sign-in and the site's directory name different Unix logins"),
    ],
)
def test_eve_cutting_the_request_s_scope_down_is_refused_not_signed_in_as_bob(
    open_page, live_server, scope, says
):
    """Issue 34: eve (Unix login claim bob, alice's address) edits ``scope`` in the
    request the portal's ``/oidc/start/`` sends her browser to (None: she leaves it)."""
    page = open_page()
    asked = []

    def cut_down(route: Route) -> None:
        # The browser follows the portal's redirect: what it sends on is its own to edit.
        answer = route.fetch(max_redirects=0)
        parts = urlsplit(answer.headers["location"])
        query = parse_qs(parts.query)
        asked.append(query["scope"][0])
        if scope is not None:
            query["scope"] = [scope]
        edited = urlunsplit(parts._replace(query=urlencode(query, doseq=True)))
        route.fulfill(response=answer, headers={**answer.headers, "location": edited})

    page.route(re.compile(r"/oidc/start/"), cut_down)
    page.goto("/login/")
    page.get_by_role("link", name="Log in with single sign-on").click()
    expect(page).to_have_url(re.compile(rf"^{re.escape(settings.OIDC_ISSUER)}/interaction/"))
    page.get_by_label("Username").fill("eve")
    page.get_by_label("Password").fill(provider_password("eve"))
    page.get_by_role("button", name="Sign in").click()

    expect(page).to_have_url(f"{live_server.url}/login/")
    expect(page.get_by_role("status")).to_contain_text(says)
    expect(page.locator("header nav")).not_to_contain_text("Log out")
    assert asked == [settings.OIDC_RP_SCOPES], asked
    assert not User.objects.exists()
    assert not ExternalIdentity.objects.exists()
    if scope == "openid posix":
        screenshot(page, "sso-scope-cut-down.png")
