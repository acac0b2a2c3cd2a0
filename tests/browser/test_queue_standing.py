"""A pending job explained in a real browser: why it waits (in words), its place among
the pending jobs of its partition and when Slurm expects to start it, as the queue sync
read them from the dev cluster."""

import re

import pytest
from playwright.sync_api import expect

from clusters.slurm import client_for
from jobs.models import Job
from jobs.queue_sync import queue_sync
from jobs.services import job_create
from tests.browser.conftest import log_in, screenshot
from tests.factories import outside_job, request_for, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]


def test_a_pending_job_says_why_it_waits_its_place_and_its_expected_start(
    open_page, make_project, dev_cluster, alice, workdir
):
    project = make_project(members={alice: "pi"}, gpu_hours=100)
    slurm = client_for(dev_cluster)
    # Every GPU of the node, for two minutes, from outside the portal: the job behind it waits.
    blocker = outside_job(slurm, project, workdir, gpus=8, name="blocker")
    job = job_create(user=alice, request=request_for(project, workdir, name="waits"))
    try:
        wait_for(
            lambda: Job.objects.filter(pk=job.pk, slurm_job_id__isnull=False).exists(),
            what="the job to reach Slurm",
        )

        def explained() -> bool:
            queue_sync(cluster=dev_cluster)
            job.refresh_from_db()
            return bool(
                job.state == "pending" and job.reason and job.queue_place and job.expected_start_at
            )

        wait_for(explained, what="a place in the queue and Slurm's forecast")

        page = open_page()
        log_in(page, "alice")
        page.goto(f"/jobs/{job.pk}/")
        status = page.locator("#job-status")
        expect(status).to_contain_text(re.compile(r"It waits for|ahead of it|higher priority"))
        standing = status.locator(".queue-standing")
        expect(standing).to_contain_text(
            re.compile(r"\d+ (of \d+ pending in|among the pending jobs of) debug")
        )
        expect(standing).not_to_contain_text("Slurm has no forecast")
        screenshot(page, "job-pending-explained.png")

        page.goto("/jobs/")
        row = page.locator(f"tr[data-job='{job.pk}']")
        expect(row.locator(".queue-standing")).to_contain_text(re.compile(r"place \d+ · expected"))
    finally:
        slurm.cancel(blocker, user="alice")
        if job.slurm_job_id or Job.objects.get(pk=job.pk).slurm_job_id:
            slurm.cancel(Job.objects.get(pk=job.pk).slurm_job_id, user="alice")
