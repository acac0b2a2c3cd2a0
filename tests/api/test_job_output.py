"""GET jobs/{id}/output/: the end of stdout or stderr, read as safely as the pages read it;
and a job made through the API that runs on the dev cluster and is read back through it."""

import os
import pwd

import pytest

from jobs.models import Job
from tests.api.conftest import error_of, make_job
from tests.factories import run_to_the_end
from tests.jobs.test_forged_tokens import nobody_takes_submissions

pytestmark = pytest.mark.slurm


def write_as_alice(path, text: str) -> None:
    path.write_text(text)
    entry = pwd.getpwnam("alice")
    os.chown(path, entry.pw_uid, entry.pw_gid)


@pytest.fixture
def job(alice, project, workdir):
    return make_job(
        owner=alice,
        project=project,
        slurm_job_id=555,
        working_directory=str(workdir),
        output_path=f"{workdir}/slurm-%j.out",
        error_path=f"{workdir}/slurm-%j.err",
    )


def output(client, job, query=""):
    return client.get(f"/api/v1/jobs/{job.pk}/output/{query}")


def test_it_shows_stdout_or_stderr_and_its_tail(api, alice, job, workdir):
    write_as_alice(workdir / "slurm-555.out", "".join(f"line {i}\n" for i in range(5)))
    write_as_alice(workdir / "slurm-555.err", "oops\n")
    client = api(alice)
    whole = output(client, job).json()
    assert whole == {
        "text": "line 0\nline 1\nline 2\nline 3\nline 4\n",
        "size_bytes": 35,
        "truncated": False,
    }
    tail = output(client, job, "?tail=2").json()
    assert tail["text"] == "line 3\nline 4\n" and tail["truncated"] is True
    assert output(client, job, "?stream=stderr").json()["text"] == "oops\n"


def test_output_not_written_yet_is_a_404_saying_so(api, alice, job):
    response = output(api(alice), job)
    assert response.status_code == 404
    error = error_of(response)
    assert error["code"] == "output_unavailable"
    assert "not written" in error["message"]


def test_a_job_not_in_slurm_yet_has_no_output(api, alice, project):
    job = make_job(owner=alice, project=project, state="new")
    response = output(api(alice), job)
    assert response.status_code == 404
    assert error_of(response)["code"] == "output_unavailable"


def test_a_file_the_owner_does_not_own_is_not_shown(api, alice, job, workdir):
    (workdir / "slurm-555.out").write_text("root's secret\n")  # owned by root
    response = output(api(alice), job)
    assert response.status_code == 404
    assert "root's secret" not in response.content.decode()


def test_when_no_worker_reads_the_output_in_time_the_api_and_page_answer_without_it(
    api, client, alice, job, workdir, settings
):
    write_as_alice(workdir / "slurm-555.out", "alice's output\n")
    assert output(api(alice), job).json()["text"] == "alice's output\n"  # a worker reads it
    client.force_login(alice)
    settings.OUTPUT_TIMEOUT_S = 0.5
    with nobody_takes_submissions():  # asked where no worker listens
        response = output(api(alice), job)
        page = client.get(f"/jobs/{job.pk}/output/")
    assert response.status_code == 404
    error = error_of(response)
    assert error["code"] == "output_unavailable"
    assert "did not read the output in time" in error["message"]
    assert "alice's output" not in response.content.decode()
    assert page.status_code == 200
    html = page.content.decode()
    assert "did not read the output in time" in html and "alice's output" not in html


def test_bad_parameters_are_a_400(api, alice, job):
    client = api(alice)
    for query, field in (("?stream=stdin", "stream"), ("?tail=-1", "tail"), ("?tail=x", "tail")):
        response = output(client, job, query)
        assert response.status_code == 400
        assert field in error_of(response)["fields"]


def test_another_users_job_output_is_a_404(api, bob, job, workdir):
    write_as_alice(workdir / "slurm-555.out", "alice's\n")
    response = output(api(bob), job)
    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"


@pytest.mark.django_db(transaction=True)
def test_a_job_made_through_the_api_runs_and_its_output_is_read_through_it(
    celery_worker, api, alice, make_project, workdir
):
    project = make_project(members={alice: "member"}, gpu_hours=5)
    client = api(alice)
    created = client.post(
        "/api/v1/jobs/",
        {
            "project": project.slug,
            "partition": "debug",
            "name": "api-e2e",
            "time_limit_minutes": 2,
            "working_directory": str(workdir),
            "environment": {"GREETING": "hello"},
            "script": 'echo "$GREETING from $(id -un)"\n',
        },
        content_type="application/json",
    )
    assert created.status_code == 201
    job = Job.objects.get(pk=created.json()["id"])

    run_to_the_end(job)
    shown = client.get(f"/api/v1/jobs/{job.pk}/").json()
    assert shown["state"] == "completed" and shown["exit_code"] == 0
    assert shown["slurm_job_id"] and shown["used_gpu_hours"] is not None
    text = client.get(f"/api/v1/jobs/{job.pk}/output/").json()["text"]
    assert text == "hello from alice\n"
