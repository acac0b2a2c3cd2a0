"""Leaving the directory ends access: the periodic sync against the dev stack's real
slapd switches off who is gone or disabled there (sign-in, sessions and API tokens),
leaves their queued jobs alone, switches them back on when they return, and keeps
group-made memberships in line with the directory's groups."""

import contextlib
import datetime as dt

import ldap
import pytest
from django.conf import settings

from accounts import directory
from accounts.directory_groups import memberships_follow_groups, roles_from_groups
from accounts.directory_sync import directory_sync
from accounts.models import ExternalIdentity, Membership, User
from accounts.services import membership_set, project_create
from accounts.tokens import token_create
from audit.models import AuditEvent
from jobs.models import Job
from jobs.states import JobState
from tests.factories import bulk_jobs
from tests.security.conftest import offline_cluster_create

BOB_DN = "uid=bob,ou=people,dc=portal,dc=test"


def signed_in_before(login: str, **fields) -> User:
    """A user as a directory sign-in left them (``test_sign_in_ldap`` shows that part)."""
    user = User.objects.create_user(username=login, posix_username=login, **fields)
    ExternalIdentity.objects.create(
        user=user,
        source=ExternalIdentity.Source.LDAP,
        issuer=settings.LDAP_URL,
        subject=f"uid={login},ou=people,dc=portal,dc=test",
        login=login,
    )
    return user


@contextlib.contextmanager
def directory_admin():
    connection = ldap.initialize(settings.LDAP_URL)
    password = (settings.STACK_DIR / "secrets" / "ldap-admin").read_text().strip()
    connection.simple_bind_s("cn=admin,dc=portal,dc=test", password)
    try:
        yield connection
    finally:
        connection.unbind_s()


@contextlib.contextmanager
def bob_disabled_in_the_directory():
    """bob's entry expires (shadowExpire day 1, in 1970) until the block ends."""
    with directory_admin() as admin:
        admin.modify_s(BOB_DN, [(ldap.MOD_REPLACE, "shadowExpire", [b"1"])])
    try:
        yield
    finally:
        with directory_admin() as admin:
            admin.modify_s(BOB_DN, [(ldap.MOD_DELETE, "shadowExpire", None)])


@pytest.mark.exclusive  # bob's entry is the whole machine's: no other test may sign him in now
@pytest.mark.django_db
def test_bob_disabled_in_the_directory_loses_sign_in_session_and_tokens_but_not_his_jobs(client):
    offline_cluster_create()
    bob = signed_in_before("bob")
    _, token = token_create(user=bob, name="script")
    project = project_create(slug="vision", name="Vision Lab", slurm_account="vision")
    bulk_jobs(owner=bob, project=project, count=1, state=JobState.PENDING)
    client.force_login(bob)
    api = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    assert client.get("/api/v1/me/", **api).status_code == 200

    with bob_disabled_in_the_directory():
        assert directory.person_where("uid", "bob").disabled
        report = directory_sync()

        assert report.switched_off == ["bob: disabled in the directory"]
        bob.refresh_from_db()
        assert not bob.is_active and bob.directory_disabled_at is not None
        refused = client.get("/api/v1/me/", **api)
        assert refused.status_code == 401
        assert "disabled" in refused.json()["error"]["message"]
        assert client.get("/").status_code == 302  # the session ended with him
        client.logout()
        password = (settings.STACK_DIR / "secrets" / "ldap-user-bob").read_text().strip()
        page = client.post("/login/", {"username": "bob", "password": password})
        assert b"disabled in the site&#x27;s directory" in page.content
        assert "_auth_user_id" not in client.session
        # His queued job is for a PI or a manager to decide on.
        assert Job.objects.get(owner=bob).state == JobState.PENDING
        assert AuditEvent.objects.filter(action="user.disable", target_id=str(bob.pk)).exists()
        assert directory_sync().switched_off == []  # once

    report = directory_sync()
    assert report.switched_on == ["bob"]
    bob.refresh_from_db()
    assert bob.is_active and bob.directory_disabled_at is None
    assert client.get("/api/v1/me/", **api).status_code == 200
    assert AuditEvent.objects.filter(action="user.enable", target_id=str(bob.pk)).exists()


@pytest.mark.django_db
def test_someone_gone_from_the_directory_is_switched_off_and_local_accounts_are_not():
    gone = signed_in_before("zed")
    local = User.objects.create_user(username="breakglass", posix_username="charlie")

    report = directory_sync()

    assert report.switched_off == ["zed: gone from the directory"]
    gone.refresh_from_db()
    local.refresh_from_db()
    assert not gone.is_active
    assert local.is_active


@pytest.mark.django_db
def test_a_user_an_administrator_switched_off_stays_off_whatever_the_directory_says(client):
    alice = signed_in_before("alice", is_active=False)

    assert directory_sync().switched_on == []
    alice.refresh_from_db()
    assert not alice.is_active


@pytest.mark.django_db
def test_a_group_made_membership_ends_when_the_group_no_longer_says_so():
    """charlie is in no mapped group: the sync takes back what a group gave him, and
    leaves what a manager gave him by hand."""
    vision = project_create(slug="vision", name="Vision Lab", slurm_account="vision")
    genomics = project_create(slug="genomics", name="Genomics", slurm_account="genomics")
    charlie = signed_in_before("charlie")
    membership_set(project=vision, user=charlie, role="member", source="directory")
    membership_set(project=genomics, user=charlie, role="member")

    report = directory_sync()

    assert report.memberships == ["charlie left vision"]
    assert list(Membership.objects.filter(user=charlie).values_list("project__slug", "source")) == [
        ("genomics", "manual")
    ]


@pytest.mark.django_db
def test_a_directory_that_does_not_answer_switches_no_one_off(settings):
    user = signed_in_before("alice")
    settings.LDAP_URL = "ldap://127.0.0.1:9"

    with pytest.raises(directory.DirectoryUnavailable, match=r"127\.0\.0\.1:9"):
        directory_sync()
    user.refresh_from_db()
    assert user.is_active


def test_the_highest_role_of_a_persons_mapped_groups_wins(settings):
    settings.GROUP_PROJECTS = [
        ("vision-members", "vision", "member"),
        ("vision-pis", "vision", "pi"),
        ("vision-copis", "vision", "co_pi"),
        ("genomics-members", "genomics", "member"),
    ]
    assert roles_from_groups(frozenset({"vision-members", "vision-pis", "x"})) == {"vision": "pi"}
    assert roles_from_groups(frozenset({"vision-copis", "genomics-members"})) == {
        "vision": "co_pi",
        "genomics": "member",
    }
    assert roles_from_groups(frozenset()) == {}


@pytest.mark.django_db
def test_without_a_mapping_groups_change_nothing(settings):
    settings.GROUP_PROJECTS = []
    user = User.objects.create_user(username="u")
    assert memberships_follow_groups(user, frozenset({"vision-pis"})) == []


@pytest.mark.parametrize(
    ("shadow_expire", "expired"),
    [("", False), ("-1", False), ("1", True), ("20000", True), ("20425", True), ("20426", False)],
)
def test_an_account_expires_on_its_shadow_expire_day(shadow_expire, expired):
    today = dt.date(1970, 1, 1) + dt.timedelta(days=20425)
    assert directory.is_expired(shadow_expire, today) is expired
