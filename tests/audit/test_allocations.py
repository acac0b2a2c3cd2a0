"""Grants, adjustments and revocations by allocation managers are in the audit log."""

import datetime as dt

import pytest

from accounts.errors import AllocationOverlap, Refused
from accounts.ledger import allocation_adjust, allocation_grant
from accounts.models import Allocation
from audit.models import AuditEvent
from tests.audit.conftest import TODAY, events, only


def test_a_grant_in_the_console_is_recorded_with_its_hours_and_reason(
    client, manny, vision, cluster
):
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
    allocation = Allocation.objects.get()
    event = only(AuditEvent.Action.ALLOCATION_GRANT)
    assert (event.actor, event.on_behalf_of, event.scope) == (manny, None, "vision")
    assert (event.target_type, event.target_id) == ("accounts.allocation", str(allocation.pk))
    assert event.target_repr == "Vision Lab on portal-dev: 50 GPU-h"
    assert event.detail == {
        "gpu_hours": 50,
        "cluster": "portal-dev",
        "starts_on": TODAY.isoformat(),
        "ends_on": (TODAY + dt.timedelta(days=10)).isoformat(),
        "reason": "new grant",
    }


def test_a_grant_that_overlaps_is_refused_and_leaves_no_record(manny, allocation):
    with pytest.raises(AllocationOverlap):
        allocation_grant(
            project=allocation.project,
            cluster=allocation.cluster,
            gpu_hours=5,
            starts_on=TODAY,
            ends_on=TODAY + dt.timedelta(days=3),
            actor=manny,
            reason="twice",
        )
    assert [e.actor for e in events(AuditEvent.Action.ALLOCATION_GRANT)] == [None]  # the fixture's


def test_an_adjustment_in_the_console_is_recorded(client, manny, allocation):
    client.force_login(manny)
    url = f"/admin/accounts/allocation/{allocation.pk}/adjust/"
    assert client.post(url, {"gpu_hours": "-10.5", "reason": "overestimated"}).status_code == 302
    event = only(AuditEvent.Action.ALLOCATION_ADJUST)
    assert (event.actor, event.target_id, event.scope) == (manny, str(allocation.pk), "vision")
    assert event.detail == {"gpu_seconds": -37800, "gpu_hours": -10.5, "reason": "overestimated"}


def test_an_adjustment_that_takes_too_much_is_refused_and_leaves_no_record(
    client, manny, allocation
):
    client.force_login(manny)
    url = f"/admin/accounts/allocation/{allocation.pk}/adjust/"
    response = client.post(url, {"gpu_hours": "-101", "reason": "too much"})
    assert response.status_code == 200
    assert b"cannot take away more than was granted" in response.content
    with pytest.raises(Refused, match="cannot take away"):
        allocation_adjust(allocation=allocation, gpu_seconds=-101 * 3600, actor=manny, reason="x")
    assert not events(AuditEvent.Action.ALLOCATION_ADJUST)


def test_a_revocation_in_the_console_is_recorded_once(client, manny, allocation):
    client.force_login(manny)
    revoke = {"action": "revoke", "_selected_action": [allocation.pk], "post": "yes"}
    response = client.post("/admin/accounts/allocation/", revoke | {"reason": "Ended early"})
    assert response.status_code == 302
    event = only(AuditEvent.Action.ALLOCATION_REVOKE)
    assert (event.actor, event.target_id, event.scope) == (manny, str(allocation.pk), "vision")
    assert event.detail == {
        "lapsed_gpu_hours": 100.0,
        "held_gpu_hours": 0.0,
        "reason": "Ended early",
    }
    client.post("/admin/accounts/allocation/", revoke | {"reason": "again"})  # a repeat
    assert len(events(AuditEvent.Action.ALLOCATION_REVOKE)) == 1
