"""Browser tests: Playwright driving Debian's Chromium against the live test server.

`playwright install` cannot download browsers here, so the package drives the
system's `/usr/bin/chromium` (`dev/stack install` installs it). Screenshots go
to ``var/screenshots/`` (see the README).
"""

from collections.abc import Iterator
from importlib import import_module
from pathlib import Path

import pytest
from django.db import connections
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.conftest import REPO

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",  # the tests run as root
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = REPO / "var" / "screenshots"
TIMEOUT_MS = 15_000


@pytest.fixture
def browser(monkeypatch) -> Iterator[Browser]:
    """A headless Chromium for one test."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing; `dev/stack install` installs it", pytrace=False)
    # Playwright's sync API keeps an event loop running in this thread. Django then
    # refuses ORM calls here (SynchronousOnlyOperation) although nothing is async,
    # and keeps the connections opened meanwhile apart from the thread's own: close
    # them before the loop stops, or the test database cannot be dropped at the end.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()
        connections.close_all()


@pytest.fixture
def open_page(browser, live_server):
    """open_page(): a page in a fresh browser session (own cookies), English unless told."""

    def open_(*, locale: str = "en-GB") -> Page:
        context = browser.new_context(
            base_url=live_server.url, locale=locale, viewport={"width": 1280, "height": 900}
        )
        context.set_default_timeout(TIMEOUT_MS)
        return context.new_page()

    return open_


def log_in(page: Page, username: str) -> None:
    """Log in through the form, with the password tests/conftest.py gives each persona."""
    page.goto("/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(f"{username}-pass-1234")
    with page.expect_navigation():
        page.get_by_role("button", name="Log in").click()
    expect(page.locator("header nav")).to_contain_text(f"Log out {username}")


def screenshot(page: Page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / name
    page.screenshot(path=path, full_page=True)
    return path


@pytest.fixture
def global_templates(transactional_db):
    """The global job templates a migration ships. A transactional test flushes every
    table when it ends, so an earlier one in the session may have removed them."""
    from django.apps import apps

    import_module("jobs.migrations.0002_global_templates").create(apps, None)
