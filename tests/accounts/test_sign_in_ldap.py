"""Log-in with the dev stack's real directory (slapd on 127.0.0.1:3389, seeded by
dev/stack with the demo users and their groups): who the user is, their Unix login and
their projects come from the directory, checked by a real worker where jobs run."""

import logging

import pytest
from django.conf import settings

from accounts.models import ExternalIdentity, Membership, Project, User
from accounts.services import membership_set, project_create, user_create
from audit.models import AuditEvent

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("transactional_db")]


def directory_password(login: str) -> str:
    return (settings.STACK_DIR / "secrets" / f"ldap-user-{login}").read_text().strip()


def log_in(client, login: str, password: str | None = None):
    return client.post(
        "/login/",
        {"username": login, "password": password or directory_password(login)},
        follow=True,
    )


@pytest.fixture
def vision(dev_cluster):
    return project_create(slug="vision", name="Vision Lab", slurm_account="vision")


def test_a_directory_log_in_creates_the_user_with_the_directorys_unix_login(client, dev_cluster):
    response = log_in(client, "alice")

    assert response.redirect_chain[-1][0] == "/"
    alice = User.objects.get(username="alice")
    assert alice.posix_username == "alice"
    assert (alice.first_name, alice.last_name, alice.email) == (
        "Alice",
        "Anders",
        "alice@portal.test",
    )
    assert not alice.has_usable_password()  # the directory keeps the password
    identity = ExternalIdentity.objects.get(user=alice)
    assert (identity.source, identity.subject) == ("ldap", "uid=alice,ou=people,dc=portal,dc=test")
    assert AuditEvent.objects.filter(action="user.create", target_id=str(alice.pk)).count() == 1
    assert int(client.session["_auth_user_id"]) == alice.pk

    client.logout()
    log_in(client, "alice")  # again: the same user, nothing new
    assert User.objects.filter(posix_username="alice").count() == 1
    assert ExternalIdentity.objects.count() == 1


def test_a_wrong_directory_password_is_refused_like_any_other(client, dev_cluster):
    response = log_in(client, "alice", password="not-her-password")

    assert b"Please enter a correct username and password" in response.content
    assert not User.objects.filter(username="alice").exists()


def test_a_local_account_with_the_same_unix_login_becomes_the_directorys_user(client, dev_cluster):
    made_by_hand = user_create(username="a.anders", password="x-pass-1234", posix_username="alice")

    log_in(client, "alice")

    assert int(client.session["_auth_user_id"]) == made_by_hand.pk
    assert ExternalIdentity.objects.get().user == made_by_hand


def test_someone_in_the_directory_whose_login_exists_on_no_cluster_is_refused(
    client, dev_cluster, caplog
):
    """dora is in the directory (uid 5999) but on no host where jobs are submitted."""
    with caplog.at_level(logging.WARNING, logger="accounts.identity"):
        response = log_in(client, "dora")

    assert "_auth_user_id" not in client.session
    assert b"Your Unix login dora cannot run jobs on any of the portal" in response.content
    assert not User.objects.filter(username="dora").exists()
    assert "does not exist on the host that submits jobs" in caplog.text
    assert "portal-dev" in caplog.text


def test_directory_groups_make_bob_a_member_and_pat_a_pi(client, vision):
    log_in(client, "bob")
    client.logout()
    log_in(client, "pat")

    memberships = {
        m.user.username: (m.role, m.source) for m in Membership.objects.filter(project=vision)
    }
    assert memberships == {
        "bob": (Membership.Role.MEMBER, Membership.Source.DIRECTORY),
        "pat": (Membership.Role.PI, Membership.Source.DIRECTORY),
    }
    assert AuditEvent.objects.filter(action="membership.add", scope="vision").count() == 2


def test_a_membership_made_by_hand_is_left_as_it_is(client, vision):
    bob = user_create(username="bob", password="bob-pass-1234", posix_username="bob")
    membership_set(project=vision, user=bob, role=Membership.Role.CO_PI)

    log_in(client, "bob")

    membership = Membership.objects.get(project=vision, user=bob)
    assert (membership.role, membership.source) == (Membership.Role.CO_PI, "manual")


def test_only_superusers_log_in_with_a_portal_password_when_local_log_in_is_limited(
    client, settings, dev_cluster
):
    settings.LOCAL_LOGIN = "superusers"
    user_create(username="local", password="local-pass-1234")
    User.objects.create_superuser(username="breakglass", password="glass-pass-1234")

    refused = log_in(client, "local", password="local-pass-1234")
    assert b"Please enter a correct username and password" in refused.content
    log_in(client, "breakglass", password="glass-pass-1234")
    assert client.session["_auth_user_id"]
    client.logout()
    log_in(client, "alice")  # the directory's people are not affected
    assert User.objects.get(pk=client.session["_auth_user_id"]).username == "alice"


def test_with_the_directory_down_a_portal_password_still_works(client, settings, alice):
    settings.LDAP_URL = "ldap://127.0.0.1:9"  # nothing listens there
    response = log_in(client, "alice", password="alice-pass-1234")
    assert response.redirect_chain[-1][0] == "/"


def test_the_log_in_page_offers_the_provider(client, db, settings):
    settings.OIDC_NAME = "Portal University"
    page = client.get("/login/").content.decode()
    assert "Log in with Portal University" in page
    assert 'href="/oidc/start/' in page

    settings.OIDC_ISSUER = ""
    assert "Log in with" not in client.get("/login/").content.decode()
    assert client.get("/oidc/start/").status_code == 404


def test_projects_are_not_made_by_group_names(client, dev_cluster, caplog):
    """A mapped group whose project does not exist is logged and skipped, not made."""
    with caplog.at_level(logging.WARNING, logger="accounts.directory_groups"):
        log_in(client, "bob")
    assert not Project.objects.exists()
    assert "names project 'vision', which does not exist" in caplog.text
