"""GET projects/, projects/{slug}/ and projects/{slug}/usage/: members see the balance,
the PI and co-PIs the usage, outsiders nothing (404)."""

import pytest

from accounts.ledger import ledger_charge, ledger_hold
from accounts.selectors import active_allocation, project_balance
from clusters.models import Partition
from tests.api.conftest import error_of

pytestmark = pytest.mark.slurm

BALANCE = {"granted_gpu_hours", "used_gpu_hours", "held_gpu_hours", "available_gpu_hours"}


@pytest.fixture
def spent(project, alice, bob, dev_cluster):
    """alice used 2 GPU-hours on debug, bob 1 on gpu; bob holds 0.5 more."""
    allocation = active_allocation(project=project, cluster=dev_cluster)
    debug = Partition.objects.get(cluster=dev_cluster, name="debug")
    gpu = Partition.objects.get(cluster=dev_cluster, name="gpu")
    ledger_charge(
        allocation=allocation, reference="t:1", gpu_seconds=7200, user=alice, partition=debug
    )
    ledger_charge(allocation=allocation, reference="t:2", gpu_seconds=3600, user=bob, partition=gpu)
    ledger_hold(allocation=allocation, reference="job:x", gpu_seconds=1800, user=bob, partition=gpu)
    return project


def test_a_member_sees_their_projects_with_the_balance(api, alice, spent):
    response = api(alice).get("/api/v1/projects/")
    assert response.status_code == 200
    [listed] = response.json()
    assert listed["slug"] == spent.slug and listed["role"] == "member"
    assert listed["balance"] == {
        "granted_gpu_hours": 10.0,
        "used_gpu_hours": 3.0,
        "held_gpu_hours": 0.5,
        "available_gpu_hours": 6.5,
    }
    assert listed["balance"] == project_balance(spent).as_gpu_hours()
    [allocation] = listed["allocations"]
    assert allocation["cluster"] == "portal-dev" and allocation["state"] == "active"
    assert set(allocation) >= BALANCE


def test_the_list_has_only_the_users_projects(api, charlie, project):
    assert api(charlie).get("/api/v1/projects/").json() == []


def test_the_list_takes_a_constant_number_of_queries(
    api, alice, make_project, django_assert_max_num_queries
):
    for _ in range(3):
        make_project(members={alice: "member"}, in_slurm=False)
    client = api(alice)
    with django_assert_max_num_queries(5):
        assert len(client.get("/api/v1/projects/").json()) == 3


def test_the_project_shows_its_members_and_their_roles(api, bob, project):
    response = api(bob).get(f"/api/v1/projects/{project.slug}/")
    assert response.status_code == 200
    shown = response.json()
    assert {m["username"]: m["role"] for m in shown["members"]} == {
        "pat": "pi",
        "alice": "member",
        "bob": "member",
    }
    assert shown["role"] == "member"
    assert set(shown["balance"]) == BALANCE


def test_an_outsider_gets_a_404_for_the_project(api, charlie, olga, project):
    for user in (charlie, olga):
        response = api(user).get(f"/api/v1/projects/{project.slug}/")
        assert response.status_code == 404
        assert error_of(response)["code"] == "not_found"
    assert api(charlie).get("/api/v1/projects/no-such/").status_code == 404


def test_the_pi_sees_usage_by_user_partition_and_month(api, pat, spent):
    client = api(pat)
    by_user = client.get(f"/api/v1/projects/{spent.slug}/usage/?group_by=user").json()
    assert by_user["group_by"] == "user" and by_user["total_gpu_hours"] == 3.0
    assert {r["key"]: r["used_gpu_hours"] for r in by_user["rows"]} == {"alice": 2.0, "bob": 1.0}
    by_partition = client.get(f"/api/v1/projects/{spent.slug}/usage/?group_by=partition").json()
    assert {r["key"]: r["used_gpu_hours"] for r in by_partition["rows"]} == {
        "debug": 2.0,
        "gpu": 1.0,
    }
    by_month = client.get(f"/api/v1/projects/{spent.slug}/usage/?group_by=month").json()
    [month] = by_month["rows"]
    assert len(month["key"]) == 7 and month["used_gpu_hours"] == 3.0
    # group_by defaults to user.
    assert client.get(f"/api/v1/projects/{spent.slug}/usage/").json()["group_by"] == "user"


def test_a_co_pi_sees_usage_too(api, alice, spent):
    from accounts.services import membership_set

    membership_set(project=spent, user=alice, role="co_pi")
    assert api(alice).get(f"/api/v1/projects/{spent.slug}/usage/").status_code == 200


def test_a_member_may_not_see_the_usage_of_teammates(api, bob, spent):
    response = api(bob).get(f"/api/v1/projects/{spent.slug}/usage/")
    assert response.status_code == 403
    error = error_of(response)
    assert error["code"] == "permission_denied"
    assert "PI" in error["message"]


def test_an_outsider_gets_a_404_for_the_usage(api, charlie, spent):
    response = api(charlie).get(f"/api/v1/projects/{spent.slug}/usage/")
    assert response.status_code == 404


def test_an_unknown_grouping_is_a_400(api, pat, spent):
    response = api(pat).get(f"/api/v1/projects/{spent.slug}/usage/?group_by=colour")
    assert response.status_code == 400
    assert "group_by" in error_of(response)["fields"]


def test_anonymous_gets_a_401(anonymous, project):
    assert anonymous.get(f"/api/v1/projects/{project.slug}/").status_code == 401
