"""GET/PUT/DELETE projects/<slug>/caps/: the PI caps members (one or all), a member sees
their own cap, use and what is left, and a job over the cap is a 409 with both numbers
while a teammate's identical job is accepted."""

import pytest

from accounts.models import MemberCap
from audit.models import AuditEvent
from jobs.models import Job
from tests.api.conftest import error_of
from tests.conftest import workdir_of

pytestmark = pytest.mark.slurm


@pytest.fixture
def bob_workdir(bob):
    yield from workdir_of("bob")


def caps_url(project, member: str = "") -> str:
    return f"/api/v1/projects/{project.slug}/caps/" + (f"{member}/" if member else "")


def put(client, url, gpu_hours):
    return client.put(url, {"gpu_hours": gpu_hours}, content_type="application/json")


def job_body(project, workdir, **fields):
    return {
        "project": project.slug,
        "partition": "gpu",
        "name": "train",
        "gpus_per_node": 1,
        "time_limit_minutes": 120,  # 2 GPU-hours and its CPU's 0.02
        "working_directory": str(workdir),
        "script": "echo hello\n",
        **fields,
    }


def test_the_pi_caps_a_member_and_the_member_sees_only_their_own(api, pat, alice, bob, project):
    response = put(api(pat), caps_url(project, "alice"), 3)
    assert response.status_code == 200, response.json()
    assert put(api(pat), caps_url(project), 5).status_code == 200
    caps = api(pat).get(caps_url(project)).json()
    assert caps["default_cap_gpu_hours"] == 5 and caps["cluster"] == "portal-dev"
    rows = {row["username"]: row for row in caps["members"]}
    assert set(rows) == {"pat", "alice", "bob"}
    assert rows["alice"] == {
        "username": "alice",
        "cap_gpu_hours": 3.0,
        "own_cap": True,
        "used_gpu_hours": 0.0,
        "remaining_gpu_hours": 3.0,
    }
    assert rows["bob"]["cap_gpu_hours"] == 5 and rows["bob"]["own_cap"] is False
    mine = api(alice).get(caps_url(project)).json()
    assert [row["username"] for row in mine["members"]] == ["alice"]
    assert api(alice).get(caps_url(project, "alice")).json()["remaining_gpu_hours"] == 3
    assert api(alice).get(caps_url(project, "bob")).status_code == 404
    assert AuditEvent.objects.filter(action="member_cap.set").count() == 2


def test_a_member_cannot_set_or_lift_caps(api, pat, alice, project):
    put(api(pat), caps_url(project, "alice"), 3)
    for response in (
        put(api(alice), caps_url(project, "alice"), 300),
        put(api(alice), caps_url(project), 300),
        api(alice).delete(caps_url(project, "alice")),
    ):
        assert response.status_code == 403
        assert error_of(response)["code"] == "permission_denied"
    assert MemberCap.objects.get().gpu_seconds == 3 * 3600


def test_an_outsider_gets_404_and_changes_nothing(api, charlie, project):
    for response in (
        api(charlie).get(caps_url(project)),
        put(api(charlie), caps_url(project, "alice"), 1),
        api(charlie).delete(caps_url(project)),
    ):
        assert response.status_code == 404
    assert not MemberCap.objects.exists()


def test_capping_someone_not_in_the_project_is_a_404_and_a_bad_figure_a_400(
    api, pat, charlie, project
):
    assert put(api(pat), caps_url(project, "charlie"), 1).status_code == 404
    response = put(api(pat), caps_url(project, "alice"), -1)
    assert response.status_code == 400
    assert "gpu_hours" in error_of(response)["fields"]
    assert not MemberCap.objects.exists()


def test_the_pi_lifts_a_cap_and_it_is_audited(api, pat, project):
    put(api(pat), caps_url(project, "alice"), 3)
    response = api(pat).delete(caps_url(project, "alice"))
    assert response.status_code == 200
    assert not MemberCap.objects.exists()
    assert api(pat).delete(caps_url(project, "alice")).status_code == 200  # a repeat
    assert AuditEvent.objects.filter(action="member_cap.clear").count() == 1


def test_over_the_cap_is_a_409_with_both_numbers_and_a_teammates_job_is_accepted(
    api, pat, alice, bob, project, workdir, bob_workdir
):
    put(api(pat), caps_url(project), 3)  # every member: 3 of the project's 10
    first = api(alice).post(
        "/api/v1/jobs/", job_body(project, workdir), content_type="application/json"
    )
    assert first.status_code == 201, first.json()
    second = api(alice).post(
        "/api/v1/jobs/", job_body(project, workdir), content_type="application/json"
    )
    assert second.status_code == 409
    error = error_of(second)
    assert error["code"] == "quota_exceeded" and error["limited_by"] == "member_cap"
    assert error["requested_gpu_hours"] == 2.02
    assert error["member_remaining_gpu_hours"] == pytest.approx(0.98)
    assert error["available_gpu_hours"] == pytest.approx(7.98)
    teammate = api(bob).post(
        "/api/v1/jobs/", job_body(project, bob_workdir), content_type="application/json"
    )
    assert teammate.status_code == 201, teammate.json()
    assert Job.objects.filter(owner=alice).count() == 1
    # The estimate says so before a submission: it does not fit alice's cap, it fits bob's.
    estimate = (
        api(alice)
        .post("/api/v1/jobs/estimate/", job_body(project, workdir), content_type="application/json")
        .json()
    )
    assert estimate["fits"] is False
    assert estimate["member_remaining_gpu_hours"] == pytest.approx(0.98)
    assert estimate["available_gpu_hours"] == pytest.approx(5.96)
    mine = api(alice).get(caps_url(project, "alice")).json()
    assert mine["used_gpu_hours"] == 2.02 and mine["remaining_gpu_hours"] == pytest.approx(0.98)
