"""Login and logout pages in the portal's look; the admin console for managers only."""

import datetime as dt

import pytest

from accounts.groups import ALLOCATION_MANAGERS
from accounts.ledger import allocation_grant
from accounts.services import membership_set, project_create
from clusters.services import cluster_register


@pytest.fixture
def manager(db):
    from accounts.services import user_create

    return user_create(
        username="manny", password="manny-pass-1234", is_staff=True, groups=(ALLOCATION_MANAGERS,)
    )


def test_the_login_page_uses_the_portal_layout(client, db):
    response = client.get("/login/")
    assert response.status_code == 200
    names = [template.name for template in response.templates]
    assert "registration/login.html" in names
    assert "base.html" in names
    assert b'name="csrfmiddlewaretoken"' in response.content


def test_a_wrong_password_is_refused_with_a_message(client, alice):
    response = client.post("/login/", {"username": "alice", "password": "nope"})
    assert response.status_code == 200
    assert b"Please enter a correct username and password" in response.content
    assert "_auth_user_id" not in client.session


def test_a_researcher_logs_in_and_sees_their_projects(client, alice, bob):
    cluster = cluster_register(name="portal-dev")
    vision = project_create(slug="vision", name="Vision Lab", slurm_account="vision")
    other = project_create(slug="other", name="Other Lab", slurm_account="other")
    membership_set(project=vision, user=alice, role="member")
    membership_set(project=other, user=bob, role="pi")
    allocation_grant(
        project=vision,
        cluster=cluster,
        gpu_hours=1000,
        starts_on=dt.date(2026, 1, 1),
        ends_on=dt.date(2027, 1, 1),
        actor=None,
        reason="test",
    )
    response = client.post(
        "/login/", {"username": "alice", "password": "alice-pass-1234"}, follow=True
    )
    assert response.redirect_chain[-1][0] == "/"
    assert b"Vision Lab" in response.content
    assert b"1,000 GPU-h" in response.content
    assert b"Other Lab" not in response.content


def test_the_home_page_needs_a_login(client, db):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_logout_is_a_post_and_ends_the_session(client, alice):
    client.force_login(alice)
    assert client.get("/logout/").status_code == 405
    response = client.post("/logout/")
    assert response.status_code == 302
    assert "_auth_user_id" not in client.session


def test_the_allocation_manager_opens_the_admin_console(client, manager):
    client.force_login(manager)
    response = client.get("/admin/")
    assert response.status_code == 200
    assert b"Projects" in response.content
    assert client.get("/admin/accounts/allocation/").status_code == 200


def test_a_researcher_cannot_open_the_admin_console(client, alice):
    client.force_login(alice)
    response = client.get("/admin/")
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def test_the_manager_group_cannot_delete_projects_or_allocations(manager):
    assert manager.has_perm("accounts.change_allocation")
    assert manager.has_perm("clusters.change_partition")
    assert not manager.has_perm("accounts.delete_allocation")
    assert not manager.has_perm("accounts.delete_project")
    assert not manager.has_perm("clusters.change_cluster")


def test_the_language_can_be_switched_to_japanese(client, db):
    response = client.post("/i18n/setlang/", {"language": "ja", "next": "/login/"}, follow=True)
    assert response.status_code == 200
    assert response.wsgi_request.LANGUAGE_CODE == "ja"
