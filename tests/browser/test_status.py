"""The cluster status page in a real browser, with the dev cluster's real numbers: alice's
1-GPU job runs, the queue sync reads the nodes and the queue, and the page shows the
GPUs in use and idle as Slurm counted them; the allocation manager also sees the node
and no stuck GPU (a normal running job is no alarm)."""

import time

import pytest
from playwright.sync_api import expect

from clusters.models import ClusterStatus
from clusters.slurm import client_for
from clusters.slurm.states import SlurmJobState
from jobs.queue_sync import queue_sync
from tests.browser.conftest import log_in, screenshot
from tests.factories import outside_job, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]


def test_the_status_page_shows_a_running_job_s_gpu_in_use(
    open_page, make_project, dev_cluster, alice, manny, workdir, settings
):
    settings.CLUSTER_STATUS_INTERVAL_S = 1
    project = make_project(members={alice: "pi"})
    slurm = client_for(dev_cluster)
    job_id = outside_job(slurm, project, workdir, name="status")
    try:
        wait_for(
            lambda: any(
                e.job_id == job_id and e.state == SlurmJobState.RUNNING for e in slurm.queue()
            ),
            what=f"Slurm job {job_id} to run",
        )
        queue_sync(cluster=dev_cluster)
        time.sleep(1.1)
        queue_sync(cluster=dev_cluster)  # a second poll: what was stuck would be confirmed
        snapshot = ClusterStatus.objects.get(cluster=dev_cluster).snapshot
        gpus = snapshot["gpus"]
        # Other test processes may run jobs on the cluster too: at least alice's GPU.
        assert gpus["in_use"] >= 1 and gpus["total"] == 8
        assert gpus["idle"] == 8 - gpus["in_use"] - gpus["unavailable"]

        page = open_page()
        log_in(page, "alice")
        page.get_by_role("link", name="Cluster status").click()
        expect(page.get_by_role("heading", name="portal-dev")).to_be_visible()
        summary = page.locator(".status-summary")
        expect(summary.locator("[data-figure='total']")).to_have_text("8")
        expect(summary.locator("[data-figure='in_use']")).to_have_text(str(gpus["in_use"]))
        expect(summary.locator("[data-figure='idle']")).to_have_text(str(gpus["idle"]))
        debug = page.locator("tr[data-partition='debug']")
        expect(debug.locator("[data-figure='in_use']")).to_have_text(str(gpus["in_use"]))
        bar = debug.locator("svg.gpu-bar")
        label = f"{gpus['in_use']} in use, {gpus['idle']} idle, {gpus['unavailable']} unavailable"
        expect(bar).to_have_attribute("aria-label", label)
        expect(page.locator(".node-table")).to_have_count(0)  # nodes are the managers'
        screenshot(page, "status-researcher.png")

        manager = open_page()
        log_in(manager, "manny")
        manager.goto("/status/")
        expect(manager.locator(".node-count")).to_contain_text("of 1 node")
        manager.get_by_role("link", name="Show every node").click()  # vm, busy or not
        expect(manager.locator(".node-table tr[data-node]")).to_have_count(1)
        expect(manager.locator(".stuck-none")).to_be_visible()
        screenshot(manager, "status-manager.png")
    finally:
        slurm.cancel(job_id, user="alice")
