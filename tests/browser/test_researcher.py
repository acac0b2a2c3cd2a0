"""A researcher's day in a real browser: log in, compose from a template, watch the job
run and end without reloading, read its output, cancel another; an outsider gets 404."""

import re

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.browser.conftest import log_in, screenshot
from tests.conftest import running_worker

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]

# Long enough for the page (polling every 3 s) to see it running, short enough for a test.
SCRIPT = "sleep 8\necho hello from the browser\n"
JOB_TIMEOUT_MS = 90_000  # the dev node is shared: a job may wait for a free slot


def state_badge(page: Page) -> Locator:
    return page.locator("#job-status .status-head .job-state")


def fact(page: Page, name: str) -> Locator:
    """The value beside a name in the job's status facts."""
    return page.locator("#job-status dl.facts dt", has_text=name).locator(
        "xpath=following-sibling::dd[1]"
    )


def mark_page(page: Page) -> None:
    """A flag in the page's window: a reload or a navigation loses it."""
    page.evaluate("window.notReloaded = true")


def assert_not_reloaded(page: Page) -> None:
    assert page.evaluate("window.notReloaded === true"), "the page was reloaded"


def fill_resources(page: Page, *, workdir, script: str) -> None:
    page.get_by_label("Partition").select_option("debug")
    page.get_by_label("Time limit (minutes)").fill("5")
    page.get_by_label("Working directory").fill(str(workdir))
    page.get_by_label("Script", exact=True).fill(script)


def submit(page: Page) -> str:
    with page.expect_navigation():
        page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    return page.url


def test_a_researcher_runs_a_job_from_a_template_and_cancels_another(
    open_page, make_project, alice, charlie, workdir, global_templates
):
    project = make_project(members={alice: "pi"}, gpu_hours=10)
    with running_worker(beat=True):
        page = open_page()
        log_in(page, "alice")

        # The dashboard: the project and its balance; htmx is served locally and loaded.
        expect(page.get_by_role("heading", name="Dashboard")).to_be_visible()
        expect(page.locator(".card.project h2")).to_contain_text(project.name)
        expect(page.locator(".card.project [data-available]")).to_have_text("10 GPU-h")
        assert page.evaluate("typeof htmx") == "object"
        screenshot(page, "dashboard.png")

        # The composer, filled from a template; the script and cost follow the GPUs.
        page.get_by_role("link", name="New job").first.click()
        expect(page.get_by_role("heading", name="New job")).to_be_visible()
        with page.expect_navigation():
            page.get_by_label("Template", exact=True).select_option(
                label="PyTorch training, one GPU"
            )
        expect(page).to_have_url(re.compile(r"\?template=\d+$"))
        expect(page.get_by_label("Job name")).to_have_value("train")
        expect(page.get_by_label("Script", exact=True)).to_have_value(re.compile("python train.py"))
        fill_resources(page, workdir=workdir, script=SCRIPT)
        # One CPU and 1 GB per GPU, not the template's 8 and 32: the node is shared.
        page.get_by_label("CPUs per GPU").fill("1")
        page.get_by_label("Memory per GPU (GB)").fill("1")
        rendered, cost = page.locator("pre[data-script]"), page.locator("[data-cost]")
        expect(rendered).to_contain_text("echo hello from the browser")
        expect(rendered).to_contain_text("--gpus-per-node=1")
        expect(rendered).to_contain_text("--partition=debug")
        expect(cost).to_have_text("0.08 GPU-h")  # 1 GPU for 5 minutes
        page.get_by_label("GPUs per node").fill("2")
        expect(rendered).to_contain_text("--gpus-per-node=2")
        expect(cost).to_have_text("0.17 GPU-h")
        expect(page.locator("#partition-limits")).to_contain_text("Partition debug")
        screenshot(page, "composer.png")

        # Submit; the job page follows it to the end without a reload.
        first_job_url = submit(page)
        mark_page(page)
        expect(state_badge(page)).to_have_text("Running", timeout=JOB_TIMEOUT_MS)
        expect(state_badge(page)).to_have_text("Completed", timeout=JOB_TIMEOUT_MS)
        expect(page.locator("pre[data-output]")).to_contain_text(
            "hello from the browser", timeout=JOB_TIMEOUT_MS
        )
        # The exit code and the charge come with accounting, a little after the end.
        expect(fact(page, "Exit code")).to_have_text("0", timeout=JOB_TIMEOUT_MS)
        expect(fact(page, "Charged")).to_have_text(re.compile(r"^(< 0\.01|0\.\d+) GPU-h$"))
        assert_not_reloaded(page)
        screenshot(page, "job.png")

        # A second, long job, cancelled from the list after a confirmation.
        page.goto("/jobs/new/")
        page.get_by_label("Job name").fill("long")
        fill_resources(page, workdir=workdir, script="sleep 120\n")
        second_job_id = submit(page).rstrip("/").rsplit("/", 1)[1]
        page.get_by_role("link", name="Jobs", exact=True).click()
        row = page.locator(f"tr[data-job='{second_job_id}']")
        expect(row.locator(".job-state")).to_have_text("Running", timeout=JOB_TIMEOUT_MS)
        dialogs = []

        def accept(dialog):
            dialogs.append(dialog.message)
            dialog.accept()

        page.on("dialog", accept)
        with page.expect_navigation():
            row.get_by_role("button", name="Cancel").click()
        assert dialogs == ["Cancel job “long”?"]
        expect(page.locator(".message")).to_contain_text(f"Cancelling job #{second_job_id}.")
        mark_page(page)
        expect(row.locator(".job-state")).to_have_text("Cancelled", timeout=JOB_TIMEOUT_MS)
        assert_not_reloaded(page)

    # An outsider is told there is no such job.
    outsider = open_page()
    log_in(outsider, "charlie")
    response = outsider.goto(first_job_url)
    assert response is not None and response.status == 404
    expect(outsider.locator("body")).not_to_contain_text("hello from the browser")


def test_the_dashboard_and_the_composer_switch_to_japanese(open_page, make_project, alice):
    """With the Japanese catalogue (locale/ja/LC_MESSAGES/django.po, compiled by make)."""
    make_project(members={alice: "pi"}, in_slurm=False)
    page = open_page()
    log_in(page, "alice")
    with page.expect_navigation():
        page.locator("select#language").select_option("ja")
    expect(page).to_have_url(re.compile(r"/$"))  # back where the switch was made
    expect(page.locator("html")).to_have_attribute("lang", "ja")
    nav = page.locator("header nav")
    expect(nav.get_by_role("link", name="ダッシュボード", exact=True)).to_be_visible()
    expect(nav.get_by_role("link", name="ジョブ", exact=True)).to_be_visible()
    expect(nav.get_by_role("link", name="新しいジョブ", exact=True)).to_be_visible()
    expect(page.locator("h1")).to_have_text("ダッシュボード")

    nav.get_by_role("link", name="新しいジョブ", exact=True).click()
    expect(page).to_have_url(re.compile(r"/jobs/new/$"))
    expect(page.locator("html")).to_have_attribute("lang", "ja")
    expect(page.locator("h1")).to_have_text("新しいジョブ")
    expect(page.locator("select#language")).to_have_value("ja")
    expect(page.get_by_role("button", name="ジョブを投入")).to_be_visible()
    # The live preview (an htmx partial) speaks Japanese too.
    page.locator("#id_gpus_per_node").fill("2")
    page.locator("textarea[name=script]").fill("echo hello\n")
    expect(page.locator("#preview").get_by_role("heading", name="コスト")).to_be_visible()


def test_every_composer_field_is_labelled_and_submit_is_reachable_by_keyboard(
    open_page, make_project, alice
):
    make_project(members={alice: "pi"}, in_slurm=False)
    page = open_page()
    log_in(page, "alice")
    page.goto("/jobs/new/")

    # From the top of the page, Tab reaches the skip link first and then the submit button.
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    submit_button = page.get_by_role("button", name="Submit job")
    for _ in range(60):
        page.keyboard.press("Tab")
        if submit_button.evaluate("button => button === document.activeElement"):
            break
    else:
        pytest.fail("Tab never reached the submit button", pytrace=False)

    page.get_by_text("Save as a template").click()  # its fields, too
    unlabelled = page.evaluate(
        """() => [...document.querySelectorAll("input, select, textarea")]
            .filter((field) => field.type !== "hidden")
            .filter((field) => ![...field.labels].some((label) => label.textContent.trim())
                && !field.getAttribute("aria-label") && !field.getAttribute("aria-labelledby"))
            .map((field) => field.name || field.id)"""
    )
    assert unlabelled == []
    fields = page.locator("input:not([type=hidden]), select, textarea")
    assert fields.count() > 10
    for index in range(fields.count()):
        expect(fields.nth(index)).to_have_accessible_name(re.compile(r"\S"))
