"""Job lists say which GPU-hours figure they show: what a job requested (held until it
is charged) or what it used (charged); a finished job shows what it used (issue 17)."""

import re

import pytest

from jobs.models import Job
from jobs.states import JobState
from tests.factories import bulk_jobs
from tests.security.conftest import funded_project, offline_cluster_create, person

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice():
    return person("figures-alice", posix="alice")


@pytest.fixture
def jobs(alice):
    project = funded_project(
        "figures-alpha", cluster=offline_cluster_create(), members={alice: "member"}
    )
    [done] = bulk_jobs(owner=alice, project=project, count=1, name="done")  # used 300 s of 600
    [queued] = bulk_jobs(owner=alice, project=project, count=1, name="queued", state="pending")
    [refused] = bulk_jobs(
        owner=alice, project=project, count=1, name="refused", state=JobState.SUBMIT_FAILED
    )
    [uncharged] = bulk_jobs(owner=alice, project=project, count=1, name="uncharged", state="failed")
    Job.objects.filter(pk=uncharged.pk).update(slurm_job_id=77)  # ran; accounting is to come
    return {"done": done, "queued": queued, "refused": refused, "uncharged": uncharged}


def figure(html: str, job) -> str:
    row = re.search(rf'<tr data-job="{job.pk}">(.*?)</tr>', html, re.DOTALL)
    assert row, job
    cell = re.findall(r'<td class="num">(.*?)</td>', row[1], re.DOTALL)[0]
    return re.sub(r"<[^>]+>", "", cell).strip()


@pytest.mark.parametrize("page", ["/jobs/", "/", "/projects/figures-alpha/"])
def test_each_figure_says_whether_it_was_used_or_requested(client, alice, jobs, page):
    client.force_login(alice)
    html = client.get(page).content.decode()
    assert "GPU-hours used or requested" in html
    assert figure(html, jobs["done"]) == "0.08 GPU-h used"
    assert figure(html, jobs["refused"]) == "0 GPU-h used"  # never reached Slurm: nothing
    if page != "/":  # the dashboard lists finished jobs only among recent ones
        assert figure(html, jobs["queued"]) == "0.17 GPU-h requested"
    assert figure(html, jobs["uncharged"]) == "0.17 GPU-h requested"  # its charge is to come


def test_the_api_names_both_figures(client, alice, jobs):
    client.force_login(alice)
    listed = {job["name"]: job for job in client.get("/api/v1/jobs/").json()["results"]}
    assert listed["done0"]["used_gpu_hours"] == pytest.approx(300 / 3600)
    assert listed["done0"]["requested_gpu_hours"] == pytest.approx(600 / 3600)
    assert listed["queued0"]["used_gpu_hours"] is None
