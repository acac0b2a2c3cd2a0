"""Decisions on allocation requests are recorded on behalf of the PI who asked."""

import datetime as dt

import pytest

from accounts.models import AllocationRequest
from accounts.requests import allocation_request_create
from audit.models import AuditEvent
from tests.audit.conftest import TODAY, events, only


@pytest.fixture
def pending(vision, cluster, pat):
    return allocation_request_create(
        project=vision,
        cluster=cluster,
        requested_by=pat,
        gpu_hours=25,
        starts_on=TODAY,
        ends_on=TODAY + dt.timedelta(days=30),
        justification="More training",
    )


def decide(client, request, verdict, **body):
    return client.post(
        f"/api/v1/allocation-requests/{request.pk}/{verdict}/",
        body,
        content_type="application/json",
    )


def test_an_approval_in_the_console_is_recorded_with_the_grant_it_made(client, manny, pat, pending):
    AllocationRequest.objects.filter(pk=pending.pk).update(decision_comment="fine")
    client.force_login(manny)
    response = client.post(
        "/admin/accounts/allocationrequest/",
        {"action": "approve", "_selected_action": [pending.pk]},
    )
    assert response.status_code == 302
    pending.refresh_from_db()
    approval = only(AuditEvent.Action.REQUEST_APPROVE)
    assert (approval.actor, approval.on_behalf_of, approval.scope) == (manny, pat, "vision")
    assert (approval.target_type, approval.target_id) == (
        "accounts.allocationrequest",
        str(pending.pk),
    )
    assert approval.detail == {
        "gpu_hours": 25,
        "comment": "fine",
        "allocation_id": pending.allocation_id,
    }
    grant = only(AuditEvent.Action.ALLOCATION_GRANT)
    assert (grant.actor, grant.target_id) == (manny, str(pending.allocation_id))
    assert grant.detail["reference"] == f"request:{pending.pk}"


def test_a_denial_through_the_api_is_recorded_with_its_comment(api, manny, pat, pending):
    response = decide(api(manny), pending, "deny", comment="Not this quarter")
    assert response.status_code == 200, response.content
    event = only(AuditEvent.Action.REQUEST_DENY)
    assert (event.actor, event.on_behalf_of, event.target_id) == (manny, pat, str(pending.pk))
    assert event.detail == {"gpu_hours": 25, "comment": "Not this quarter"}


def test_refused_decisions_leave_no_record(api, manny, pat, pending):
    assert decide(api(pat), pending, "approve").status_code == 403  # not a manager
    assert decide(api(manny), pending, "deny", comment="").status_code == 400
    assert not AuditEvent.objects.filter(target_type="accounts.allocationrequest").exists()
    assert decide(api(manny), pending, "approve").status_code == 200
    assert decide(api(manny), pending, "approve").status_code == 409  # already decided
    assert decide(api(manny), pending, "deny", comment="late").status_code == 409
    assert len(events(AuditEvent.Action.REQUEST_APPROVE)) == 1
    assert not events(AuditEvent.Action.REQUEST_DENY)
