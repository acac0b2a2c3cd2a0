"""Security headers on every kind of response, a CSP the templates keep, and a browser
that sees no CSP violation on the portal's pages, the admin console and the API docs."""

import datetime as dt
import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from accounts.ledger import allocation_grant, ledger_charge
from accounts.models import User
from accounts.services import membership_set, project_create
from clusters.services import cluster_register
from tests.browser import conftest as browser_fixtures
from tests.browser.conftest import log_in
from tests.conftest import REPO

TEMPLATES = REPO / "templates"
# The browser tests' fixtures, for the browser checks at the end.
browser = browser_fixtures.browser
open_page = browser_fixtures.open_page

STRICT = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self'",
    "font-src": "'self'",
    "connect-src": "'self'",
    "object-src": "'none'",
    "base-uri": "'none'",
    "form-action": "'self'",
    "frame-ancestors": "'none'",
}


def directives(response) -> dict[str, str]:
    policy = response["Content-Security-Policy"]
    return dict(part.strip().split(" ", 1) for part in policy.split(";"))


def assert_security_headers(response, *, policy=STRICT) -> None:
    assert directives(response) == policy
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["Cross-Origin-Opener-Policy"] == "same-origin"
    assert response["Cross-Origin-Resource-Policy"] == "same-origin"


def test_an_html_page_has_them(client, alice):
    client.force_login(alice)
    response = client.get("/")
    assert response.status_code == 200
    assert_security_headers(response)


def test_the_login_page_has_them(client, db):
    response = client.get("/login/")
    assert response.status_code == 200
    assert_security_headers(response)


def test_an_api_answer_has_them(client, alice):
    client.force_login(alice)
    response = client.get("/api/v1/me/")
    assert response.status_code == 200
    assert_security_headers(response)
    refused = client.get("/api/v1/jobs/999999/")
    assert refused.status_code == 404
    assert_security_headers(refused)


def test_a_not_found_page_has_them(client, db):
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert_security_headers(response)


def test_a_static_file_has_them(client, db):
    response = client.get("/static/js/portal.js")
    assert response.status_code == 200
    assert directives(response) == STRICT
    assert response["Cross-Origin-Resource-Policy"] == "same-origin"


def test_only_the_api_docs_allow_inline_styles_and_no_page_inline_scripts(client, db):
    docs = client.get("/api/docs/")
    assert docs.status_code == 200
    assert_security_headers(
        docs,
        policy={**STRICT, "style-src": "'self' 'unsafe-inline'", "img-src": "'self' data:"},
    )
    html = docs.content.decode()
    # Swagger UI's start-up script is a file of its own, not inline.
    assert re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", html) == []
    script = client.get("/api/docs/?script=")
    assert script.status_code == 200
    assert script["Content-Type"].startswith("application/javascript")
    assert b"SwaggerUIBundle" in script.content


def template_files() -> list[Path]:
    files = sorted(TEMPLATES.rglob("*.html"))
    assert len(files) > 10  # the scan below looks where the templates are
    return files


@pytest.mark.parametrize("path", template_files(), ids=lambda p: str(p.relative_to(TEMPLATES)))
def test_no_template_has_inline_script_style_or_handler(path):
    text = path.read_text()
    assert not re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", text, flags=re.I), "inline <script>"
    assert not re.findall(r"<style\b", text, flags=re.I), "<style> block"
    assert not re.findall(r"\sstyle\s*=", text, flags=re.I), "style= attribute"
    assert not re.findall(r"<[^>]*\son[a-z]+\s*=", text, flags=re.I), "on*= handler"
    assert not re.findall(r"javascript:", text, flags=re.I), "javascript: URL"


def test_htmx_is_told_not_to_inject_its_indicator_style():
    base = (TEMPLATES / "base.html").read_text()
    assert re.search(
        r'<meta name="htmx-config" content=\'\{[^\']*"includeIndicatorStyles": false', base
    )


# In a real browser: nothing the pages need is blocked by their policy.

COLLECT_VIOLATIONS = """
window.cspViolations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  const where = `${event.sourceFile}:${event.lineNumber}`;
  window.cspViolations.push(`${event.violatedDirective} ${event.blockedURI} ${where}`);
});
"""


@pytest.fixture
def lab(transactional_db, alice):
    cluster = cluster_register(name="portal-dev")
    project = project_create(slug="csp-lab", name="CSP Lab", slurm_account="csplab")
    membership_set(project=project, user=alice, role="pi")
    today = dt.date.today()
    allocation = allocation_grant(
        project=project,
        cluster=cluster,
        gpu_hours=100,
        starts_on=today - dt.timedelta(days=10),
        ends_on=today + dt.timedelta(days=20),
        actor=None,
        reason="test",
    )
    ledger_charge(allocation=allocation, reference="csp:1", gpu_seconds=7200, user=alice)
    return project


def visit_without_violations(page, url: str, *, ready: str) -> None:
    page.goto(url)
    expect(page.locator(ready).first).to_be_visible()
    page.wait_for_load_state("networkidle")
    assert page.evaluate("window.cspViolations") == [], url


@pytest.mark.django_db(transaction=True)
def test_the_pages_work_under_their_policy_in_a_browser(open_page, lab, alice):
    page = open_page()
    page.add_init_script(COLLECT_VIOLATIONS)
    visit_without_violations(page, "/login/", ready="form button.primary")
    log_in(page, "alice")
    visit_without_violations(page, "/", ready="svg.balance-bar")
    visit_without_violations(page, f"/projects/{lab.slug}/", ready="main h1")
    visit_without_violations(page, "/jobs/new/", ready="form")
    visit_without_violations(page, "/tokens/", ready="form")
    # Swagger UI: the schema is fetched and drawn by the split view's script.
    visit_without_violations(page, "/api/docs/", ready=".swagger-ui .info .title")


@pytest.mark.django_db(transaction=True)
def test_the_admin_console_works_under_the_policy_in_a_browser(open_page, lab):
    # A superuser: a transactional test may start after another flushed the managers'
    # group that a migration made.
    User.objects.create_superuser("csp-manager", password="csp-manager-pass-1234")
    page = open_page()
    page.add_init_script(COLLECT_VIOLATIONS)
    visit_without_violations(page, "/admin/login/", ready="#login-form")
    page.get_by_label("Username").fill("csp-manager")
    page.get_by_label("Password").fill("csp-manager-pass-1234")
    with page.expect_navigation():
        page.get_by_role("button", name="Log in").click()
    visit_without_violations(page, "/admin/", ready="#content-main")
    visit_without_violations(page, "/admin/accounts/allocation/", ready="#changelist")
    visit_without_violations(page, "/admin/accounts/project/", ready="#changelist")
