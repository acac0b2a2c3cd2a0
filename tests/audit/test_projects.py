"""Projects and memberships changed in the console are recorded with who, what and the role."""

from django.utils import translation

from accounts.models import Membership, Project
from accounts.services import membership_remove, membership_set
from audit.models import AuditEvent
from tests.accounts.test_admin import form_data
from tests.audit.conftest import events, only


def test_adding_a_project_with_a_member_in_the_console_is_recorded(client, manny, alice):
    client.force_login(manny)
    data = form_data(client.get("/admin/accounts/project/add/"))
    data |= {"name": "Robotics", "slug": "robotics", "slurm_account": "robotics"}
    data |= {"memberships-TOTAL_FORMS": "1", "memberships-0-user": alice.pk}
    data |= {"memberships-0-role": "pi", "memberships-0-id": "", "memberships-0-project": ""}
    response = client.post("/admin/accounts/project/add/", data)
    assert response.status_code == 302, response.context["errors"]
    project = Project.objects.get(slug="robotics")
    created = only(AuditEvent.Action.PROJECT_CREATE)
    assert (created.actor, created.target_id, created.scope) == (manny, str(project.pk), "robotics")
    assert created.detail == {"slug": "robotics", "name": "Robotics"}
    added = only(AuditEvent.Action.MEMBERSHIP_ADD)
    assert (added.actor, added.on_behalf_of, added.scope) == (manny, alice, "robotics")
    assert added.target_repr == "alice in Robotics (PI)"
    assert added.detail == {"user": "alice", "role": "pi"}


def test_renaming_a_project_records_the_old_and_new_values(client, manny, vision):
    client.force_login(manny)
    url = f"/admin/accounts/project/{vision.pk}/change/"
    data = form_data(client.get(url)) | {"name": "Vision Group", "slug": "vision-group"}
    assert client.post(url, data).status_code == 302
    event = only(AuditEvent.Action.PROJECT_UPDATE)
    assert (event.actor, event.scope) == (manny, "vision")  # the Slurm account never changes
    assert event.detail == {
        "name": {"was": "Vision Lab", "now": "Vision Group"},
        "slug": {"was": "vision", "now": "vision-group"},
    }
    assert client.post(url, data).status_code == 302  # saved again unchanged
    assert len(events(AuditEvent.Action.PROJECT_UPDATE)) == 1


def test_a_role_change_and_a_removal_in_the_console_are_recorded(client, manny, vision, alice, bob):
    client.force_login(manny)
    url = f"/admin/accounts/project/{vision.pk}/change/"
    data = form_data(client.get(url))
    row = {data[f"memberships-{i}-user"]: i for i in range(3)}
    data |= {
        f"memberships-{row[alice.pk]}-DELETE": "on",
        f"memberships-{row[bob.pk]}-role": "co_pi",
    }
    response = client.post(url, data)
    assert response.status_code == 302, response.context["errors"]
    changed = only(AuditEvent.Action.MEMBERSHIP_CHANGE)
    assert (changed.actor, changed.on_behalf_of) == (manny, bob)
    assert changed.detail == {"user": "bob", "role": "co_pi", "was": "member"}
    removed = only(AuditEvent.Action.MEMBERSHIP_REMOVE)
    assert (removed.actor, removed.on_behalf_of, removed.scope) == (manny, alice, "vision")
    assert removed.target_repr == "alice in Vision Lab (Member)"
    assert removed.detail == {"user": "alice", "role": "member"}
    assert not Membership.objects.filter(project=vision, user=alice).exists()


def test_repeats_that_change_nothing_are_not_recorded(manny, vision, alice, charlie):
    membership_set(project=vision, user=alice, role="member", actor=manny)
    assert not membership_remove(project=vision, user=charlie, actor=manny)
    assert not AuditEvent.objects.filter(actor=manny).exists()


def test_the_log_is_written_in_english_whoever_acts(manny, vision, alice):
    with translation.override("ja"):
        assert str(Membership.Role.CO_PI.label) != "Co-PI"
        membership_set(project=vision, user=alice, role="co_pi", actor=manny)
    assert only(AuditEvent.Action.MEMBERSHIP_CHANGE).target_repr == "alice in Vision Lab (Co-PI)"
