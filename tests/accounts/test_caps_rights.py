"""Who may change which cap: nobody changes their own, only allocation managers change or
lift a cap a manager set (or give a member more than a manager's default), and the
service, the API, the caps page and the console say why they refuse."""

import pytest
from django.test import Client

from accounts.caps import cap_for, member_cap_clear, member_cap_set
from accounts.errors import NotAllowed
from accounts.groups import ALLOCATION_MANAGERS
from accounts.models import MemberCap
from accounts.services import membership_set, user_create
from accounts.tokens import token_create
from audit.models import AuditEvent
from tests.factories import project_with_allocation, recorded_cluster

HOUR = 3600


@pytest.fixture
def people(db):
    people = {
        name: user_create(username=name, password=f"{name}-pass-1234", posix_username=name)
        for name in ("pat", "cora", "bob")
    }
    people["manny"] = user_create(
        username="manny", password="manny-pass-1234", groups=(ALLOCATION_MANAGERS,)
    )
    people["manny"].is_staff = True
    people["manny"].save()
    return people


@pytest.fixture
def allocation(people):
    """pat is the PI, cora a co-PI, bob a member."""
    project = project_with_allocation(recorded_cluster(), pi=people["pat"], gpu_hours=100)
    membership_set(project=project, user=people["cora"], role="co_pi")
    membership_set(project=project, user=people["bob"], role="member")
    return project.allocations.get()


def cap_events() -> int:
    return AuditEvent.objects.filter(action__startswith="member_cap").count()


def test_the_pi_cannot_lift_or_change_a_cap_the_manager_set_on_them(allocation, people):
    pat, manny = people["pat"], people["manny"]
    member_cap_set(actor=manny, allocation=allocation, user=pat, gpu_hours=5)
    audited = cap_events()
    with pytest.raises(NotAllowed, match="Nobody changes their own cap"):
        member_cap_clear(actor=pat, allocation=allocation, user=pat)
    with pytest.raises(NotAllowed, match="Nobody changes their own cap"):
        member_cap_set(actor=pat, allocation=allocation, user=pat, gpu_hours=50)
    assert cap_for(allocation.pk, pat.pk).gpu_seconds == 5 * HOUR
    assert cap_events() == audited
    # A teammate lead may not lift it either: a manager set it.
    with pytest.raises(NotAllowed, match="An allocation manager set this cap"):
        member_cap_clear(actor=people["cora"], allocation=allocation, user=pat)
    with pytest.raises(NotAllowed, match="An allocation manager set this cap"):
        member_cap_set(actor=people["cora"], allocation=allocation, user=pat, gpu_hours=1)
    assert cap_for(allocation.pk, pat.pk).gpu_seconds == 5 * HOUR
    # The manager changes and lifts it.
    member_cap_set(actor=manny, allocation=allocation, user=pat, gpu_hours=6)
    assert member_cap_clear(actor=manny, allocation=allocation, user=pat) is True
    assert cap_for(allocation.pk, pat.pk) is None


def test_nobody_sets_or_lifts_their_own_cap_even_one_a_teammate_set(allocation, people):
    pat, cora = people["pat"], people["cora"]
    member_cap_set(actor=pat, allocation=allocation, user=cora, gpu_hours=3)
    with pytest.raises(NotAllowed, match="own cap"):
        member_cap_clear(actor=cora, allocation=allocation, user=cora)
    with pytest.raises(NotAllowed, match="own cap"):
        member_cap_set(actor=cora, allocation=allocation, user=cora, gpu_hours=1)
    with pytest.raises(NotAllowed, match="own cap"):
        member_cap_set(actor=pat, allocation=allocation, user=pat, gpu_hours=1)
    assert cap_for(allocation.pk, cora.pk).gpu_seconds == 3 * HOUR
    assert cap_for(allocation.pk, pat.pk) is None
    # Another lead may: pat set it, and cora is not pat.
    assert member_cap_clear(actor=pat, allocation=allocation, user=cora) is True


def test_a_manager_does_not_change_their_own_cap_either(allocation, people):
    manny, pat = people["manny"], people["pat"]
    membership_set(project=allocation.project, user=manny, role="member")
    member_cap_set(actor=pat, allocation=allocation, user=manny, gpu_hours=2)
    with pytest.raises(NotAllowed, match="own cap"):
        member_cap_clear(actor=manny, allocation=allocation, user=manny)
    assert cap_for(allocation.pk, manny.pk).gpu_seconds == 2 * HOUR


def test_a_managers_default_binds_the_leads_who_only_tighten_it(allocation, people):
    pat, bob, manny = people["pat"], people["bob"], people["manny"]
    member_cap_set(actor=manny, allocation=allocation, user=None, gpu_hours=10)
    with pytest.raises(NotAllowed, match="An allocation manager set this cap"):
        member_cap_clear(actor=pat, allocation=allocation, user=None)
    with pytest.raises(NotAllowed, match="An allocation manager set this cap"):
        member_cap_set(actor=pat, allocation=allocation, user=None, gpu_hours=2)
    # An own cap above the manager's default would lift it for bob.
    with pytest.raises(NotAllowed, match="default cap at 10 GPU-hours"):
        member_cap_set(actor=pat, allocation=allocation, user=bob, gpu_hours=11)
    assert not MemberCap.objects.filter(user=bob).exists()
    # Below it is the leads' to set, change and lift (the default applies again).
    member_cap_set(actor=pat, allocation=allocation, user=bob, gpu_hours=4)
    member_cap_set(actor=pat, allocation=allocation, user=bob, gpu_hours=10)
    assert member_cap_clear(actor=pat, allocation=allocation, user=bob) is True
    assert cap_for(allocation.pk, bob.pk).user_id is None  # the manager's default
    member_cap_set(actor=manny, allocation=allocation, user=bob, gpu_hours=50)  # a manager may


def test_the_leads_own_default_stays_theirs_to_change(allocation, people):
    pat, cora = people["pat"], people["cora"]
    member_cap_set(actor=pat, allocation=allocation, user=None, gpu_hours=10)
    member_cap_set(actor=cora, allocation=allocation, user=None, gpu_hours=20)
    assert member_cap_clear(actor=pat, allocation=allocation, user=None) is True


def token_client(user) -> Client:
    _, plain = token_create(user=user, name="tests")
    return Client(headers={"Authorization": f"Bearer {plain}"})


def test_the_api_says_why_it_refuses(allocation, people):
    pat, manny = people["pat"], people["manny"]
    member_cap_set(actor=manny, allocation=allocation, user=pat, gpu_hours=5)
    url = f"/api/v1/projects/{allocation.project.slug}/caps/pat/"
    response = token_client(pat).delete(url)
    assert response.status_code == 403, response.json()
    error = response.json()["error"]
    assert error["code"] == "permission_denied"
    assert "Nobody changes their own cap" in error["message"]
    response = token_client(people["cora"]).put(
        url, {"gpu_hours": 50}, content_type="application/json"
    )
    assert response.status_code == 403
    assert "An allocation manager set this cap" in response.json()["error"]["message"]
    assert cap_for(allocation.pk, pat.pk).gpu_seconds == 5 * HOUR


def test_the_caps_page_offers_no_lift_it_would_refuse_and_says_why(client, allocation, people):
    pat, bob, manny = people["pat"], people["bob"], people["manny"]
    member_cap_set(actor=manny, allocation=allocation, user=pat, gpu_hours=5)
    member_cap_set(actor=pat, allocation=allocation, user=bob, gpu_hours=3)
    client.force_login(pat)
    url = f"/projects/{allocation.project.slug}/caps/"
    page = client.get(url).content.decode()
    pat_row = page.split('data-cap-row="pat"')[1].split("</tr>")[0]
    bob_row = page.split('data-cap-row="bob"')[1].split("</tr>")[0]
    assert "Nobody changes their own cap" in pat_row and 'name="lift"' not in pat_row
    assert 'name="lift" value="bob"' in bob_row
    # A forged lift is refused with the reason, and nothing changes.
    response = client.post(url, {"allocation": allocation.pk, "lift": "pat"})
    assert response.status_code == 400
    assert "Nobody changes their own cap" in response.content.decode()
    assert cap_for(allocation.pk, pat.pk).gpu_seconds == 5 * HOUR


def test_the_console_refuses_a_manager_changing_their_own_cap_on_the_form(
    client, allocation, people
):
    manny, pat = people["manny"], people["pat"]
    membership_set(project=allocation.project, user=manny, role="member")
    cap = member_cap_set(actor=pat, allocation=allocation, user=manny, gpu_hours=2)
    client.force_login(manny)
    change = f"/admin/accounts/membercap/{cap.pk}/change/"
    response = client.post(change, {"gpu_hours": 99})
    assert response.status_code == 200  # the form again, with the reason
    assert "Nobody changes their own cap" in response.content.decode()
    response = client.post(f"/admin/accounts/membercap/{cap.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert MemberCap.objects.filter(pk=cap.pk).exists()
    followed = client.get(response.url).content.decode()
    assert "Nobody changes their own cap" in followed
    response = client.post(
        "/admin/accounts/membercap/",
        {"action": "lift", "_selected_action": [cap.pk]},
        follow=True,
    )
    assert "Nobody changes their own cap" in response.content.decode()
    assert cap_for(allocation.pk, manny.pk).gpu_seconds == 2 * HOUR
