"""An ended job's efficiency in a real browser: the job page, open while the job runs,
shows the section once accounting has the job, without a reload."""

import re

import pytest
from playwright.sync_api import expect

from jobs.services import job_create
from tests.browser.conftest import log_in, screenshot
from tests.browser.test_researcher import JOB_TIMEOUT_MS, assert_not_reloaded, mark_page
from tests.conftest import running_worker
from tests.factories import request_for
from tests.jobs.test_efficiency_dev import BURN

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]


def test_an_ended_jobs_page_shows_its_efficiency(open_page, make_project, alice, workdir):
    project = make_project(members={alice: "pi"}, gpu_hours=10)
    with running_worker(beat=True):
        job = job_create(user=alice, request=request_for(project, workdir, script=BURN))
        page = open_page()
        log_in(page, "alice")
        page.goto(f"/jobs/{job.pk}/")
        section = page.locator("#job-efficiency")
        expect(section).to_contain_text("Shown when the job has ended")
        mark_page(page)

        cpu = section.locator("[data-efficiency='cpu']")
        expect(cpu).to_contain_text(re.compile(r"\d+ %"), timeout=JOB_TIMEOUT_MS)
        expect(cpu).to_contain_text("of CPU time out of")
        expect(cpu.locator("svg.meter")).to_be_visible()
        expect(section.locator("[data-efficiency='memory']")).to_contain_text("requested (")
        expect(section.locator("[data-efficiency='time']")).to_contain_text("of a 5 min limit")
        expect(section.locator("[data-efficiency='gpu']")).to_have_text(
            "not recorded by this cluster"
        )
        assert_not_reloaded(page)
        screenshot(page, "job-efficiency.png")
