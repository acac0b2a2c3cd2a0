"""The allocation managers' console: every write goes through the bank's services."""

import datetime as dt

import pytest

from accounts.groups import ALLOCATION_MANAGERS
from accounts.ledger import allocation_grant
from accounts.models import Allocation, AllocationRequest, LedgerEntry
from accounts.requests import allocation_request_create
from accounts.services import membership_set, project_create, user_create
from clusters.services import cluster_register

TODAY = dt.date.today()


@pytest.fixture
def manny(db):
    return user_create(
        username="manny", password="pw-manny-1234", is_staff=True, groups=(ALLOCATION_MANAGERS,)
    )


@pytest.fixture
def vision(db):
    return project_create(slug="vision", name="Vision Lab", slurm_account="vision")


@pytest.fixture
def cluster(db):
    return cluster_register(name="portal-dev")


@pytest.fixture
def allocation(vision, cluster, manny):
    return allocation_grant(
        project=vision,
        cluster=cluster,
        gpu_hours=100,
        starts_on=TODAY,
        ends_on=TODAY + dt.timedelta(days=30),
        actor=manny,
        reason="start",
    )


@pytest.fixture
def pending_request(vision, cluster, alice):
    membership_set(project=vision, user=alice, role="pi")
    return allocation_request_create(
        project=vision,
        cluster=cluster,
        requested_by=alice,
        gpu_hours=25,
        starts_on=TODAY,
        ends_on=TODAY + dt.timedelta(days=30),
        justification="More training",
    )


def test_adding_an_allocation_grants_through_the_ledger(client, manny, vision, cluster):
    client.force_login(manny)
    response = client.post(
        "/admin/accounts/allocation/add/",
        {
            "project": vision.pk,
            "cluster": cluster.pk,
            "starts_on": TODAY.isoformat(),
            "ends_on": (TODAY + dt.timedelta(days=10)).isoformat(),
            "gpu_hours": 50,
            "reason": "new grant",
        },
    )
    assert response.status_code == 302, response.content
    grant = LedgerEntry.objects.get(kind="grant")
    assert (grant.gpu_seconds, grant.actor, grant.reason) == (50 * 3600, manny, "new grant")
    assert Allocation.objects.get().granted_gpu_seconds == 50 * 3600


def test_an_adjustment_needs_a_reason_and_is_recorded(client, manny, allocation):
    client.force_login(manny)
    url = f"/admin/accounts/allocation/{allocation.pk}/adjust/"
    assert client.get(url).status_code == 200
    response = client.post(url, {"gpu_hours": "-10", "reason": ""})
    assert response.status_code == 200
    assert b"This field is required" in response.content
    assert client.post(url, {"gpu_hours": "-10", "reason": "overestimated"}).status_code == 302
    adjust = LedgerEntry.objects.get(kind="adjust")
    assert (adjust.gpu_seconds, adjust.actor, adjust.reason) == (-36000, manny, "overestimated")
    allocation.refresh_from_db()
    assert allocation.granted_gpu_seconds == 90 * 3600


def test_the_ledger_is_read_only_in_the_console(client, manny, allocation):
    client.force_login(manny)
    assert client.get("/admin/accounts/ledgerentry/").status_code == 200
    entry = LedgerEntry.objects.get()
    assert client.get("/admin/accounts/ledgerentry/add/").status_code == 403
    assert client.post(f"/admin/accounts/ledgerentry/{entry.pk}/delete/").status_code == 403


def test_a_request_is_approved_from_the_list(client, manny, pending_request):
    request = pending_request
    client.force_login(manny)
    response = client.post(
        "/admin/accounts/allocationrequest/",
        {"action": "approve", "_selected_action": [request.pk]},
        follow=True,
    )
    assert response.status_code == 200
    request.refresh_from_db()
    assert request.state == AllocationRequest.State.APPROVED
    assert request.allocation.granted_gpu_seconds == 25 * 3600


def test_denying_without_a_comment_says_so_and_changes_nothing(client, manny, pending_request):
    request = pending_request
    client.force_login(manny)
    response = client.post(
        "/admin/accounts/allocationrequest/",
        {"action": "deny", "_selected_action": [request.pk]},
        follow=True,
    )
    assert b"Say why the request is denied" in response.content
    request.refresh_from_db()
    assert request.state == AllocationRequest.State.PENDING


def test_a_researcher_cannot_reach_the_console(client, alice, allocation):
    client.force_login(alice)
    assert client.get(f"/admin/accounts/allocation/{allocation.pk}/adjust/").status_code == 302


@pytest.mark.slurm
def test_the_drift_report_lists_what_the_reconciler_would_change(client, manny, dev_cluster):
    import uuid

    account = f"d{uuid.uuid4().hex[:10]}"
    project = project_create(slug=account, name="Drift", slurm_account=account)
    allocation_grant(
        project=project,
        cluster=dev_cluster,
        gpu_hours=1,
        starts_on=TODAY,
        ends_on=TODAY + dt.timedelta(days=3),
        actor=manny,
        reason="drift",
    )
    client.force_login(manny)
    assert b"Slurm drift" in client.get("/admin/accounts/allocation/").content
    response = client.get("/admin/accounts/allocation/slurm-drift/")
    assert response.status_code == 200
    assert f"{account}: add account".encode() in response.content
    assert f"{account}: GrpTRESMins gres/gpu None → 60".encode() in response.content
    from clusters.slurm import NotFound, client_for

    with pytest.raises(NotFound):
        client_for(dev_cluster).account_users(account)  # the report changed nothing


def test_a_researcher_cannot_see_the_drift_report(client, alice):
    client.force_login(alice)
    assert client.get("/admin/accounts/allocation/slurm-drift/").status_code == 302
