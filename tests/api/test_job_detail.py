"""GET jobs/{id}/ and POST jobs/{id}/cancel|hold|release/: the owner and the project's
PI see and manage a job; anyone else gets a 404 and changes nothing."""

import pytest

from accounts.models import LedgerEntry
from jobs.models import Job, JobEvent
from jobs.services import job_create
from tests.api.conftest import error_of, make_job
from tests.factories import request_for

pytestmark = pytest.mark.slurm


def act(client, job, action):
    return client.post(f"/api/v1/jobs/{job.pk}/{action}/")


def test_the_owner_sees_the_job_with_its_timeline(api, alice, project):
    job = make_job(owner=alice, project=project, slurm_job_id=77, reason="Priority")
    JobEvent.objects.create(job=job, at=job.created_at, state="pending", detail="queued")
    response = api(alice).get(f"/api/v1/jobs/{job.pk}/")
    assert response.status_code == 200
    shown = response.json()
    assert shown["id"] == job.pk and shown["slurm_job_id"] == 77 and shown["reason"] == "Priority"
    assert shown["rendered_script"] == job.rendered_script and shown["script"] == job.script
    assert [(e["state"], e["detail"]) for e in shown["events"]] == [
        ("new", "held"),
        ("pending", "queued"),
    ]
    assert shown["used_gpu_hours"] is None and shown["requested_gpu_hours"] == 300 / 3600


def test_a_pending_job_says_why_it_waits_in_the_callers_language(api, alice, project):
    job = make_job(owner=alice, project=project, nodes=2, gpus_per_node=3, reason="Resources")
    shown = api(alice).get(f"/api/v1/jobs/{job.pk}/").json()
    assert shown["reason"] == "Resources"
    assert shown["pending_reason"]["code"] == "Resources"
    assert shown["pending_reason"]["family"] == "resources"
    assert "6 GPUs" in shown["pending_reason"]["sentence"]
    assert shown["pending_reason"]["advice"]
    japanese = api(alice).get(f"/api/v1/jobs/{job.pk}/", HTTP_ACCEPT_LANGUAGE="ja").json()
    assert japanese["pending_reason"]["sentence"] != shown["pending_reason"]["sentence"]
    listed = api(alice).get("/api/v1/jobs/").json()["results"]
    assert [j["pending_reason"] for j in listed if j["id"] == job.pk] == [shown["pending_reason"]]


def test_only_a_pending_job_has_a_pending_reason(api, alice, project):
    job = make_job(owner=alice, project=project, state=Job.State.RUNNING)
    assert api(alice).get(f"/api/v1/jobs/{job.pk}/").json()["pending_reason"] is None
    spent = make_job(owner=alice, project=project, reason="AssocGrpGRESMinutes")
    reason = api(alice).get(f"/api/v1/jobs/{spent.pk}/").json()["pending_reason"]
    assert reason["family"] == "gpu_hours" and "PI" in reason["advice"]


def test_the_pi_sees_a_members_job(api, alice, pat, project):
    job = make_job(owner=alice, project=project)
    assert api(pat).get(f"/api/v1/jobs/{job.pk}/").status_code == 200


@pytest.mark.parametrize("who", ["bob", "charlie", "olga"])
def test_anyone_else_gets_a_404(api, alice, project, who, request):
    job = make_job(owner=alice, project=project)
    response = api(request.getfixturevalue(who)).get(f"/api/v1/jobs/{job.pk}/")
    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"


def test_a_job_that_does_not_exist_is_a_404(api, alice, project):
    assert api(alice).get("/api/v1/jobs/999999999/").status_code == 404


def test_cancelling_a_job_not_yet_in_slurm_ends_it_and_releases_its_hold(
    api, alice, project, workdir
):
    job = job_create(user=alice, request=request_for(project, workdir))
    response = act(api(alice), job, "cancel")
    assert response.status_code == 202
    assert response.json()["state"] == "cancelled"
    job.refresh_from_db()
    assert job.state == Job.State.CANCELLED and job.ended_at is not None
    assert LedgerEntry.objects.filter(kind="release", reference=job.hold_reference).count() == 1
    # A repeat: the job has ended, nothing more is released.
    again = act(api(alice), job, "cancel")
    assert again.status_code == 400
    assert LedgerEntry.objects.filter(kind="release", reference=job.hold_reference).count() == 1


def test_cancelling_a_job_in_slurm_asks_a_worker_to_scancel_it(
    api, alice, project, django_capture_on_commit_callbacks
):
    job = make_job(owner=alice, project=project, slurm_job_id=4321)
    with django_capture_on_commit_callbacks() as callbacks:
        response = act(api(alice), job, "cancel")
    assert response.status_code == 202
    assert response.json()["state"] == "pending"  # until Slurm says it is cancelled
    job.refresh_from_db()
    assert job.cancel_requested_at is not None
    assert job.events.filter(detail="cancel asked by alice").exists()
    assert len(callbacks) == 1


def test_the_pi_may_cancel_a_members_job(api, alice, pat, project):
    job = make_job(owner=alice, project=project, slurm_job_id=4322)
    assert act(api(pat), job, "cancel").status_code == 202
    job.refresh_from_db()
    assert job.cancel_requested_at is not None


def test_a_teammate_cannot_cancel_and_learns_nothing(api, alice, bob, project):
    job = make_job(owner=alice, project=project, slurm_job_id=4323)
    response = act(api(bob), job, "cancel")
    assert response.status_code == 404
    job.refresh_from_db()
    assert job.cancel_requested_at is None and job.events.count() == 1


def test_a_finished_job_cannot_be_cancelled(api, alice, project):
    job = make_job(owner=alice, project=project, state="completed")
    response = act(api(alice), job, "cancel")
    assert response.status_code == 400
    assert "already ended" in error_of(response)["fields"]["__all__"][0]


def test_hold_and_release_a_pending_job(api, alice, project, django_capture_on_commit_callbacks):
    job = make_job(owner=alice, project=project, slurm_job_id=4324)
    client = api(alice)
    with django_capture_on_commit_callbacks() as callbacks:
        assert act(client, job, "hold").status_code == 202
        assert act(client, job, "release").status_code == 202
    assert len(callbacks) == 2
    assert list(job.events.values_list("detail", flat=True))[-2:] == [
        "hold asked by alice",
        "release asked by alice",
    ]


def test_only_a_pending_job_can_be_held(api, alice, project):
    job = make_job(owner=alice, project=project, state="running", slurm_job_id=4325)
    response = act(api(alice), job, "hold")
    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid"


def test_anonymous_gets_a_401(anonymous, alice, project):
    job = make_job(owner=alice, project=project)
    assert anonymous.get(f"/api/v1/jobs/{job.pk}/").status_code == 401
    assert anonymous.post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 401
