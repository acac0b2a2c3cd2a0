"""The researcher's job pages, server-side: content, live partials, errors, scoping, queries."""

import pytest
from django.test import override_settings

from jobs.models import Job
from jobs.services import job_create
from tests.factories import bulk_jobs, request_for

pytestmark = pytest.mark.slurm


@pytest.fixture
def project(make_project, alice, bob):
    return make_project(members={alice: "pi", bob: "member"}, gpu_hours=10, in_slurm=False)


@pytest.fixture
def job(project, alice, workdir):
    return job_create(user=alice, request=request_for(project, workdir, name="mine"))


def form_data(project, workdir, **fields):
    data = {
        "project": project.slug,
        "partition": "debug",
        "name": "from-the-form",
        "nodes": "1",
        "gpus_per_node": "1",
        "time_limit_minutes": "5",
        "working_directory": str(workdir),
        "script": "echo hi\n",
    }
    data.update(fields)
    return data


def test_the_composer_shows_the_fields_and_the_templates(client, alice, project):
    client.force_login(alice)
    page = client.get("/jobs/new/")
    assert page.status_code == 200
    html = page.content.decode()
    for label in ("GPUs per node", "Time limit (minutes)", "Working directory", "Script"):
        assert label in html
    assert "Multi-GPU torchrun, one node" in html


def test_the_preview_renders_the_script_and_cost_and_saves_nothing(client, alice, project, workdir):
    client.force_login(alice)
    response = client.post("/jobs/new/preview/", form_data(project, workdir, gpus_per_node="2"))
    html = response.content.decode()
    assert response.status_code == 200
    assert "#SBATCH --gpus-per-node=2" in html
    assert "0.17 GPU-h" in html  # 2 GPUs x 5 minutes, and one CPU's 0.0008
    # The breakdown: GPU-hours at the weight, plus CPU-hours at the partition's rate.
    times = "\u00d7"
    assert f"0.17 GPU-hours {times} 1 = 0.17 GPU-h, plus 0.08 CPU-hours {times} 0.01" in html
    assert "one CPU for one hour 0.01 GPU-h" in html
    assert not Job.objects.exists()


def test_a_cpu_only_job_is_priced_not_free(client, alice, project, workdir):
    client.force_login(alice)
    data = form_data(project, workdir, gpus_per_node="0", time_limit_minutes="60", array="0-99")
    html = client.post("/jobs/new/preview/", data).content.decode()
    # 100 tasks of one CPU for an hour: 100 CPU-hours at 0.01.
    assert "0 GPU-hours \u00d7 1 = 0 GPU-h, plus 100 CPU-hours \u00d7 0.01 = 1 GPU-h" in html
    assert "<span data-cost>1 GPU-h</span>" in html


def test_an_array_over_max_submit_jobs_is_an_error_beside_the_array_field(
    client, alice, project, workdir
):
    client.force_login(alice)
    with override_settings(SLURM_MAX_SUBMIT_JOBS=8):
        preview = client.post("/jobs/new/preview/", form_data(project, workdir, array="0-9"))
        submitted = client.post("/jobs/new/", form_data(project, workdir, array="0-9"))
    html = preview.content.decode()
    assert 'id="error-array"' in html and "This array has 10 tasks" in html
    assert "at most 8 jobs" in html and "data-cost" not in html
    assert submitted.status_code == 400 and "This array has 10 tasks" in submitted.content.decode()
    assert not Job.objects.exists()


def test_the_preview_puts_each_error_beside_its_field(client, alice, project, workdir):
    client.force_login(alice)
    response = client.post(
        "/jobs/new/preview/",
        form_data(project, workdir, script="#SBATCH --gres=gpu:8\n", gpus_per_node="99"),
    )
    html = response.content.decode()
    assert 'id="error-script"' in html and "Line 1" in html
    assert 'id="error-gpus_per_node"' in html and "at most 8" in html


def test_submitting_the_form_creates_the_job_and_shows_its_page(client, alice, project, workdir):
    client.force_login(alice)
    response = client.post("/jobs/new/", form_data(project, workdir))
    job = Job.objects.get(name="from-the-form")
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}/"
    page = client.get(response["Location"]).content.decode()
    assert "from-the-form" in page and "#SBATCH --account=" in page


def test_a_quota_refusal_says_both_numbers_and_links_to_the_request_form(
    client, alice, project, workdir
):
    client.force_login(alice)
    response = client.post(
        "/jobs/new/", form_data(project, workdir, partition="gpu", time_limit_minutes="720")
    )
    html = response.content.decode()
    assert response.status_code == 400
    # 1 GPU and its CPU for 12 hours: 12 + 0.12 GPU-hours.
    assert "12.12 GPU-hours" in html and "10.00 are available" in html
    assert f"/projects/{project.slug}/#request" in html
    assert not Job.objects.exists()


def test_no_state_change_on_get(client, alice, job):
    client.force_login(alice)
    assert client.get(f"/jobs/{job.pk}/cancel/").status_code == 405
    job.refresh_from_db()
    assert job.state == "new"


def test_the_owner_cancels_a_job_from_its_page(client, alice, job):
    client.force_login(alice)
    response = client.post(f"/jobs/{job.pk}/cancel/")
    assert response.status_code == 302
    job.refresh_from_db()
    assert job.state == "cancelled"


def test_another_users_job_is_a_404(client, charlie, bob, job):
    for outsider in (charlie, bob):  # bob is a member of the project, not its PI
        client.force_login(outsider)
        assert client.get(f"/jobs/{job.pk}/").status_code == 404
        assert client.get(f"/jobs/{job.pk}/status/").status_code == 404
        assert client.post(f"/jobs/{job.pk}/cancel/").status_code == 404


def test_the_status_partial_polls_while_the_job_runs_and_stops_after(client, alice, job):
    client.force_login(alice)
    html = client.get(f"/jobs/{job.pk}/status/").content.decode()
    assert 'hx-trigger="every 3s"' in html
    Job.objects.filter(pk=job.pk).update(state="completed")
    html = client.get(f"/jobs/{job.pk}/status/").content.decode()
    assert "hx-trigger" not in html


def test_a_job_without_output_yet_says_so(client, alice, job):
    client.force_login(alice)
    html = client.get(f"/jobs/{job.pk}/output/").content.decode()
    assert "not reached Slurm yet" in html


def test_the_list_filters_and_its_rows_refresh_alone(client, alice, project, job):
    bulk_jobs(owner=alice, project=project, count=3, state="failed")
    client.force_login(alice)
    html = client.get("/jobs/?state=failed").content.decode()
    assert html.count('data-job="') == 3
    rows = client.get("/jobs/?state=new", HTTP_HX_REQUEST="true").content.decode()
    assert rows.startswith('<tbody id="job-rows"') and "every 4s" in rows


@pytest.mark.parametrize("url", ["/", "/jobs/", "/jobs/?state=completed&page=3", "/jobs/new/"])
def test_pages_issue_a_bounded_number_of_queries_with_1000_jobs(
    client, alice, project, django_assert_max_num_queries, url
):
    bulk_jobs(owner=alice, project=project, count=1000)
    client.force_login(alice)
    with django_assert_max_num_queries(20):
        assert client.get(url).status_code == 200


def test_the_job_page_issues_a_bounded_number_of_queries(
    client, alice, project, job, django_assert_max_num_queries
):
    bulk_jobs(owner=alice, project=project, count=1000)
    client.force_login(alice)
    with django_assert_max_num_queries(20):
        assert client.get(f"/jobs/{job.pk}/").status_code == 200
