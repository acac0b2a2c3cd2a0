"""GET/POST allocation-requests/ and POST allocation-requests/{id}/approve|deny/: the PI
and co-PIs ask, allocation managers decide (approval grants the hours), others are refused."""

import datetime as dt

import pytest

from accounts.models import Allocation, AllocationRequest
from accounts.requests import allocation_request_create
from tests.api.conftest import error_of

pytestmark = pytest.mark.slurm

TODAY = dt.date.today()


def ask(client, project, **changes):
    body = {
        "project": project.slug,
        "gpu_hours": 500,
        "starts_on": str(TODAY + dt.timedelta(days=60)),
        "ends_on": str(TODAY + dt.timedelta(days=150)),
        "justification": "Training runs for the paper.",
        **changes,
    }
    return client.post("/api/v1/allocation-requests/", body, content_type="application/json")


@pytest.fixture
def pending(project, pat, dev_cluster):
    return allocation_request_create(
        project=project,
        cluster=dev_cluster,
        requested_by=pat,
        gpu_hours=200,
        starts_on=TODAY + dt.timedelta(days=60),
        ends_on=TODAY + dt.timedelta(days=90),
        justification="More",
    )


def decide(client, request, verdict, **body):
    return client.post(
        f"/api/v1/allocation-requests/{request.pk}/{verdict}/",
        body,
        content_type="application/json",
    )


def test_the_pi_asks_for_hours(api, pat, project):
    response = ask(api(pat), project)
    assert response.status_code == 201
    shown = response.json()
    assert shown["state"] == "pending" and shown["requested_by"] == "pat"
    assert shown["cluster"] == "portal-dev" and shown["project"] == project.slug
    assert AllocationRequest.objects.get(pk=shown["id"]).gpu_hours == 500


def test_a_member_may_not_ask(api, alice, project):
    response = ask(api(alice), project)
    assert response.status_code == 403
    assert error_of(response)["code"] == "permission_denied"
    assert not AllocationRequest.objects.exists()


def test_an_outsider_cannot_name_the_project(api, charlie, project):
    response = ask(api(charlie), project)
    assert response.status_code == 400
    assert "project" in error_of(response)["fields"]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"gpu_hours": 0}, "gpu_hours"),
        ({"starts_on": "soon"}, "starts_on"),
        ({"ends_on": str(TODAY)}, "ends_on"),  # before it starts: the model's check
        ({"cluster": "elsewhere"}, "cluster"),
        ({"justification": ""}, "justification"),
    ],
)
def test_a_bad_request_names_the_field(api, pat, project, changes, field):
    response = ask(api(pat), project, **changes)
    assert response.status_code == 400
    fields = error_of(response)["fields"]
    assert field in fields or "__all__" in fields, fields
    assert not AllocationRequest.objects.exists()


def test_who_sees_which_requests(api, pat, alice, olga, charlie, pending):
    listed = lambda user: [r["id"] for r in api(user).get("/api/v1/allocation-requests/").json()]  # noqa: E731
    assert listed(olga) == [pending.pk]
    assert listed(pat) == [pending.pk]
    assert listed(alice) == []  # a member: the leads' business
    assert listed(charlie) == []
    assert api(olga).get("/api/v1/allocation-requests/?state=approved").json() == []
    assert api(olga).get("/api/v1/allocation-requests/?state=maybe").status_code == 400


def test_a_manager_approves_and_the_hours_are_granted(api, olga, pending):
    response = decide(api(olga), pending, "approve", comment="Go")
    assert response.status_code == 200
    shown = response.json()
    assert shown["state"] == "approved" and shown["decided_by"] == "olga"
    allocation = Allocation.objects.get(pk=shown["allocation"])
    assert allocation.granted_gpu_seconds == 200 * 3600
    # A repeat is refused and grants nothing more.
    again = decide(api(olga), pending, "approve")
    assert again.status_code == 409
    assert error_of(again)["code"] == "already_decided"
    assert Allocation.objects.filter(project=pending.project).count() == 2


def test_a_manager_denies_with_a_comment(api, olga, pending):
    nameless = decide(api(olga), pending, "deny")
    assert nameless.status_code == 400
    assert "comment" in error_of(nameless)["fields"]
    blank = decide(api(olga), pending, "deny", comment="   ")
    assert blank.status_code == 400
    response = decide(api(olga), pending, "deny", comment="Budget is spent")
    assert response.status_code == 200
    pending.refresh_from_db()
    assert pending.state == "denied" and pending.decision_comment == "Budget is spent"


@pytest.mark.parametrize("who", ["pat", "alice", "charlie"])
def test_only_allocation_managers_decide(api, pending, who, request):
    client = api(request.getfixturevalue(who))
    for verdict in ("approve", "deny"):
        response = decide(client, pending, verdict, comment="x")
        assert response.status_code == 403
        assert error_of(response)["code"] == "permission_denied"
    pending.refresh_from_db()
    assert pending.state == "pending"


def test_an_unknown_request_is_a_404(api, olga, dev_cluster):
    response = api(olga).post(
        "/api/v1/allocation-requests/999999/approve/", {}, content_type="application/json"
    )
    assert response.status_code == 404


def test_approving_a_period_that_overlaps_an_active_allocation_is_a_409(
    api, olga, pat, project, dev_cluster
):
    overlapping = allocation_request_create(
        project=project,
        cluster=dev_cluster,
        requested_by=pat,
        gpu_hours=5,
        starts_on=TODAY,
        ends_on=TODAY + dt.timedelta(days=10),
        justification="Now",
    )
    response = decide(api(olga), overlapping, "approve")
    assert response.status_code == 409
    assert error_of(response)["code"] == "allocation_overlap"
    overlapping.refresh_from_db()
    assert overlapping.state == "pending"


@pytest.mark.django_db
def test_anonymous_gets_a_401(anonymous):
    assert anonymous.get("/api/v1/allocation-requests/").status_code == 401
