"""The caps page: the PI sets and lifts caps (audited), a member sees only their own and
cannot change any, and someone outside the project gets a 404."""

import pytest

from accounts.models import MemberCap
from audit.models import AuditEvent
from tests.factories import project_with_allocation, recorded_cluster


@pytest.fixture
def project(db, alice, bob, charlie):
    from accounts.services import membership_set

    project = project_with_allocation(recorded_cluster(), pi=alice, gpu_hours=100)
    membership_set(project=project, user=bob, role="member")
    return project


def url(project) -> str:
    return f"/projects/{project.slug}/caps/"


def test_the_pi_sets_a_members_cap_and_a_default_and_lifts_them(client, alice, bob, project):
    client.force_login(alice)
    allocation = project.allocations.get()
    response = client.post(
        url(project), {"allocation": allocation.pk, "member": "bob", "gpu_hours": "20"}
    )
    assert response.status_code == 302
    client.post(url(project), {"allocation": allocation.pk, "member": "*", "gpu_hours": "5"})
    assert {(c.user, c.gpu_seconds) for c in MemberCap.objects.all()} == {
        (bob, 20 * 3600),
        (None, 5 * 3600),
    }
    page = client.get(url(project)).content.decode()
    assert 'data-cap-row="bob"' in page and 'data-cap-row="alice"' in page
    assert "(default)" in page  # alice is under the default
    client.post(url(project), {"allocation": allocation.pk, "lift": "bob"})
    assert list(MemberCap.objects.values_list("user", flat=True)) == [None]
    assert AuditEvent.objects.filter(action__startswith="member_cap").count() == 3


def test_a_refused_figure_is_shown_beside_the_form(client, alice, project):
    client.force_login(alice)
    allocation = project.allocations.get()
    response = client.post(
        url(project), {"allocation": allocation.pk, "member": "bob", "gpu_hours": "-3"}
    )
    assert response.status_code == 400
    assert 'id="error-gpu_hours"' in response.content.decode()
    assert not MemberCap.objects.exists()


def test_a_member_sees_their_own_cap_only_and_cannot_change_any(client, alice, bob, project):
    allocation = project.allocations.get()
    client.force_login(alice)
    client.post(url(project), {"allocation": allocation.pk, "member": "bob", "gpu_hours": "20"})
    client.force_login(bob)
    page = client.get(url(project)).content.decode()
    assert 'data-cap-row="bob"' in page and 'data-cap-row="alice"' not in page
    assert "Set cap" not in page
    project_page = client.get(f"/projects/{project.slug}/").content.decode()
    assert "Your cap on recorded: 20 GPU-h, 20 GPU-h left." in project_page
    data = {"allocation": allocation.pk, "member": "bob", "gpu_hours": "999"}
    assert client.post(url(project), data).status_code == 404
    assert (
        client.post(url(project), {"allocation": allocation.pk, "lift": "bob"}).status_code == 404
    )
    assert MemberCap.objects.get().gpu_seconds == 20 * 3600


def test_an_outsider_gets_a_404(client, charlie, project):
    client.force_login(charlie)
    assert client.get(url(project)).status_code == 404
    assert client.post(url(project), {"lift": "*"}).status_code == 404


def test_the_default_is_shown_when_every_member_has_their_own_cap(
    client, alice, bob, charlie, project
):
    from accounts.services import membership_set

    # Nobody sets their own cap: charlie, a co-PI, caps alice, and she the others.
    membership_set(project=project, user=charlie, role="co_pi")
    allocation = project.allocations.get()
    for lead, member, hours in (
        (alice, "*", "7"),
        (charlie, "alice", "30"),
        (alice, "bob", "20"),
        (alice, "charlie", "10"),
    ):
        client.force_login(lead)
        response = client.post(
            url(project), {"allocation": allocation.pk, "member": member, "gpu_hours": hours}
        )
        assert response.status_code == 302
    client.force_login(alice)
    page = client.get(url(project)).content.decode()
    assert "(default)" not in page  # nobody is under it, yet it is there to lift
    assert "Default for every member: 7 GPU-h" in " ".join(page.split())
