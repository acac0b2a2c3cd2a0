"""A researcher with GPU-hours on two clusters, in a real browser: the composer groups
the partitions by cluster, a job composed for portal-next runs there, and the dashboard
charges it to that cluster's allocation alone."""

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import log_in, screenshot
from tests.browser.test_researcher import JOB_TIMEOUT_MS, fact, state_badge, submit
from tests.conftest import running_worker

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]


def test_a_job_composed_for_portal_next_runs_there_and_is_charged_to_its_allocation(
    open_page, make_project, dev_cluster, next_cluster, alice, workdir
):
    project = make_project(
        members={alice: "pi"}, gpu_hours=10, clusters=(dev_cluster, next_cluster)
    )
    with running_worker(beat=True):
        page = open_page()
        log_in(page, "alice")
        card = page.locator(".card.project", has_text=project.name)
        for name in ("portal-dev", "portal-next"):
            expect(
                card.locator(f".allocation[data-cluster='{name}'] [data-available]")
            ).to_have_text("10 GPU-h")

        page.goto("/jobs/new/")
        partition = page.get_by_label("Partition")
        groups = partition.locator("optgroup")
        expect(groups).to_have_count(2)
        assert [groups.nth(i).get_attribute("label") for i in range(2)] == [
            "portal-dev",
            "portal-next",
        ]
        expect(partition.locator("optgroup[label='portal-next'] option")).to_have_text(
            ["batch", "short"]
        )
        partition.select_option("portal-next/short")
        page.get_by_label("GPUs per node").fill("4")
        page.get_by_label("Time limit (minutes)").fill("5")
        page.get_by_label("CPUs per GPU").fill("1")
        page.get_by_label("Working directory").fill(str(workdir))
        page.get_by_label("Script", exact=True).fill(
            'sleep 2\necho "ran as $(id -un) on $SLURMD_NODENAME of $SLURM_CLUSTER_NAME"\n'
        )
        expect(page.locator("pre[data-script]")).to_contain_text("--partition=short")
        expect(page.locator("#partition-limits")).to_contain_text("up to 4 GPUs per node")
        # 4 GPUs and 4 CPUs (0.01 GPU-h an hour each) for 5 minutes
        expect(page.locator("[data-cost]")).to_have_text("0.34 GPU-h")
        screenshot(page, "composer-portal-next.png")

        submit(page)
        expect(state_badge(page)).to_have_text("Completed", timeout=JOB_TIMEOUT_MS)
        expect(page.locator("pre[data-output]")).to_contain_text(
            "ran as alice on next1 of portal-next", timeout=JOB_TIMEOUT_MS
        )
        expect(fact(page, "Charged")).to_have_text(
            re.compile(r"^(< 0\.01|0\.\d+) GPU-h$"), timeout=JOB_TIMEOUT_MS
        )

        page.goto("/")
        on_next = card.locator(".allocation[data-cluster='portal-next']")
        expect(on_next.locator("[data-used]")).not_to_have_text("0 GPU-h")
        expect(card.locator(".allocation[data-cluster='portal-dev'] [data-used]")).to_have_text(
            "0 GPU-h"
        )
