"""The audit log in the console: allocation managers read it; nobody adds, changes or deletes."""

import pytest
from django.db import DatabaseError, transaction

from accounts.services import user_create
from audit.models import AuditEvent
from audit.services import audit_record

LIST = "/admin/audit/auditevent/"


@pytest.fixture
def event(manny, vision):
    return audit_record(
        actor=manny,
        action=AuditEvent.Action.PROJECT_UPDATE,
        target=vision,
        scope="vision",
        detail={"name": {"was": "Vision", "now": "Vision Lab"}},
    )


def test_an_allocation_manager_reads_the_log(client, manny, event):
    client.force_login(manny)
    response = client.get(LIST)
    assert response.status_code == 200
    page = response.content.decode()
    assert "Project changed" in page and "Vision Lab" in page and "manny" in page
    assert "Add audit event" not in page
    detail = client.get(f"{LIST}{event.pk}/change/")
    assert detail.status_code == 200
    assert "Vision Lab" in detail.content.decode()
    assert 'name="_save"' not in detail.content.decode()  # read-only


def test_the_log_is_filtered_and_searched(client, manny, event):
    client.force_login(manny)
    assert "Vision Lab" in client.get(LIST, {"action": "project.update"}).content.decode()
    assert "Vision Lab" not in client.get(LIST, {"action": "job.cancel"}).content.decode()
    assert "Vision Lab" in client.get(LIST, {"q": "manny"}).content.decode()
    assert "Vision Lab" not in client.get(LIST, {"q": "nobody"}).content.decode()


def test_nobody_adds_changes_or_deletes_an_event_in_the_console(client, manny, event):
    client.force_login(manny)
    assert client.get(f"{LIST}add/").status_code == 403
    assert client.post(f"{LIST}{event.pk}/change/", {"action": "job.cancel"}).status_code == 403
    assert client.post(f"{LIST}{event.pk}/delete/", {"post": "yes"}).status_code == 403
    response = client.post(
        LIST, {"action": "delete_selected", "_selected_action": [event.pk], "post": "yes"}
    )
    assert response.status_code == 200  # no such action: the list is shown again
    event.refresh_from_db()
    assert event.action == "project.update"


def test_a_researcher_cannot_read_the_log(client, alice, event):
    client.force_login(alice)
    assert client.get(LIST).status_code == 302  # to the login page: not staff
    staff = user_create(username="sam", password="sam-pass-1234", is_staff=True)
    client.force_login(staff)
    assert client.get(LIST).status_code == 403


def test_the_database_refuses_to_change_or_delete_an_event(event):
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEvent.objects.filter(pk=event.pk).update(action="job.cancel")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEvent.objects.filter(pk=event.pk).delete()
    assert AuditEvent.objects.get(pk=event.pk).action == "project.update"
