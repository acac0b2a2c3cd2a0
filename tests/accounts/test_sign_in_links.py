"""Issue 34, item 2: a sign-in never takes a privileged account by itself.

A person from the directory or the provider used to be linked to any local account whose
user name (or Unix login) was theirs: a staff account such as manny's, a break-glass
superuser. Such accounts, and one another identity of the same source signs in to, are
linked only by a manager (``identity_link``, audited). Through the stack's real provider
and directory.
"""

import logging

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from accounts.errors import NotAllowed, Refused
from accounts.groups import ALLOCATION_MANAGERS
from accounts.identity import identity_link
from accounts.models import ExternalIdentity, User
from accounts.services import user_create
from audit.models import AuditEvent
from tests.accounts.test_sign_in_ldap import directory_password
from tests.accounts.test_sign_in_oidc import (
    portal,
    quick_survey,  # noqa: F401 - a fixture
    refused_on_the_login_page,
    sign_in,
    signed_in_user,
)

pytestmark = pytest.mark.django_db

NOT_LINKED = "The portal account with your Unix login is not linked to this sign-in"


def local(username: str, *, kind: str = "", posix_username: str | None = None) -> User:
    user = user_create(
        username=username,
        password=f"{username}-pass-1234",
        posix_username=posix_username,
        is_staff=kind == "staff",
        groups=(ALLOCATION_MANAGERS,) if kind == "manager" else (),
    )
    if kind == "superuser":
        User.objects.filter(pk=user.pk).update(is_superuser=True, is_staff=True)
        user.refresh_from_db()
    return user


def assert_untouched(account: User, posix_username: str | None) -> None:
    account.refresh_from_db()
    assert account.posix_username == posix_username
    assert not account.identities.exists()
    assert User.objects.count() == 1


@pytest.mark.parametrize("posix_username", [None, "alice"])
@pytest.mark.parametrize(
    ("kind", "why"),
    [
        ("staff", "is staff"),
        ("superuser", "is a superuser"),
        ("manager", "is an allocation manager"),
    ],
)
def test_the_provider_s_alice_does_not_take_a_privileged_account_of_her_name(
    quick_survey,  # noqa: F811
    caplog,
    kind,
    why,
    posix_username,
):
    caplog.set_level(logging.WARNING, logger="accounts.identity")
    account = local("alice", kind=kind, posix_username=posix_username)

    refused_on_the_login_page(sign_in(portal(), "alice.anders"), NOT_LINKED)

    assert_untouched(account, posix_username)
    assert f"the user 'alice' {why}; a manager links it" in caplog.text
    assert "--source oidc --subject u-alice" in caplog.text


def test_the_directory_s_alice_does_not_take_a_staff_account_of_her_name(
    client,
    quick_survey,  # noqa: F811
):
    account = local("alice", kind="staff")
    page = client.post(
        "/login/", {"username": "alice", "password": directory_password("alice")}, follow=True
    )

    assert NOT_LINKED in page.content.decode()
    assert "_auth_user_id" not in client.session
    assert_untouched(account, None)


def test_an_account_another_identity_of_the_provider_signs_in_to_is_not_taken(
    quick_survey,  # noqa: F811
    caplog,
):
    caplog.set_level(logging.WARNING, logger="accounts.identity")
    account = local("a.anders", posix_username="alice")
    ExternalIdentity.objects.create(
        user=account, source="oidc", issuer=settings.OIDC_ISSUER, subject="u-someone", login="x"
    )

    refused_on_the_login_page(sign_in(portal(), "alice.anders"), NOT_LINKED)

    assert list(account.identities.values_list("subject", flat=True)) == ["u-someone"]
    assert "is already signed in to as 'u-someone'" in caplog.text


def test_an_ordinary_account_of_her_unix_login_is_still_hers(quick_survey):  # noqa: F811
    account = local("a.anders", posix_username="alice")
    client = portal()
    sign_in(client, "alice.anders")

    assert signed_in_user(client) == account
    assert account.identities.get().subject == "u-alice"


def test_a_manager_links_his_own_account_and_then_signs_in_to_it(
    quick_survey,  # noqa: F811
    capsys,
):
    pat = local("pat", kind="manager")  # a manager whose Unix login is pat, made by hand
    refused_on_the_login_page(sign_in(portal(), "pat.park"), NOT_LINKED)

    call_command("identity_link", "pat", source="oidc", subject="u-pat", by="pat")
    assert "oidc 'u-pat' at http://127.0.0.1:9080 signs in as pat" in capsys.readouterr().out
    event = AuditEvent.objects.get(action=AuditEvent.Action.USER_IDENTITY_LINK)
    assert (event.actor, event.target_id) == (pat, str(pat.pk))
    assert event.detail == {
        "source": "oidc",
        "issuer": settings.OIDC_ISSUER,
        "subject": "u-pat",
        "login": "",
    }

    client = portal()
    sign_in(client, "pat.park")
    assert signed_in_user(client) == pat
    pat.refresh_from_db()
    assert pat.posix_username == "pat"
    assert pat.identities.get().login == "pat.park"

    # Again: nothing new on record.
    call_command("identity_link", "pat", source="oidc", subject="u-pat", by="pat")
    assert AuditEvent.objects.filter(action=AuditEvent.Action.USER_IDENTITY_LINK).count() == 1


def test_only_a_superuser_links_another_privileged_account_and_a_researcher_none(db):
    manny = local("manny", kind="manager")
    admin = local("admin", kind="superuser")
    staff = local("sam", kind="staff")
    alice = local("alice", posix_username="alice")

    for target in (admin, staff):
        with pytest.raises(NotAllowed, match="Only a superuser links"):
            identity_link(actor=manny, user=target, source="oidc", subject="u-mine")
    with pytest.raises(NotAllowed, match="Only allocation managers"):
        identity_link(actor=alice, user=alice, source="oidc", subject="u-alice")
    with pytest.raises(CommandError, match="Only a superuser links"):
        call_command("identity_link", "admin", source="oidc", subject="u-mine", by="manny")
    assert not ExternalIdentity.objects.exists()
    assert not AuditEvent.objects.filter(action=AuditEvent.Action.USER_IDENTITY_LINK).exists()

    identity_link(actor=admin, user=staff, source="oidc", subject="u-sam")
    identity_link(actor=manny, user=alice, source="ldap", subject="uid=alice,ou=people,x")
    assert ExternalIdentity.objects.get(subject="u-sam").user == staff
    assert ExternalIdentity.objects.get(source="ldap").issuer == settings.LDAP_URL
    with pytest.raises(Refused, match="linked to sam already"):
        identity_link(actor=admin, user=alice, source="oidc", subject="u-sam")
    assert AuditEvent.objects.filter(action=AuditEvent.Action.USER_IDENTITY_LINK).count() == 2
    with pytest.raises(CommandError, match="No portal account is named 'nobody'"):
        call_command("identity_link", "nobody", source="oidc", subject="u-x", by="manny")


def test_a_manager_links_a_sign_in_in_the_console_and_a_researcher_cannot(client, manny):
    admin = local("admin", kind="superuser")
    pat = local("pat", kind="staff")
    form = {"source": "oidc", "issuer": settings.OIDC_ISSUER, "subject": "u-pat", "login": ""}

    client.force_login(local("alice", posix_username="alice"))  # no console at all
    assert client.get("/admin/accounts/externalidentity/add/")["Location"].startswith(
        "/admin/login/"
    )
    client.force_login(pat)  # staff, not a manager
    assert client.get("/admin/accounts/externalidentity/add/").status_code == 403

    client.force_login(manny)
    add = client.get("/admin/accounts/externalidentity/add/")
    assert add.status_code == 200
    assert f'value="{settings.OIDC_ISSUER}"' in add.content.decode()
    refused = client.post("/admin/accounts/externalidentity/add/", {**form, "user": admin.pk})
    assert refused.status_code == 200
    assert "Only a superuser links a sign-in to another privileged account" in (
        refused.content.decode().replace("&#x27;", "'")
    )
    assert not ExternalIdentity.objects.exists()

    client.force_login(admin)
    done = client.post("/admin/accounts/externalidentity/add/", {**form, "user": pat.pk})
    assert done.status_code == 302
    assert ExternalIdentity.objects.get().user == pat
    event = AuditEvent.objects.get(action=AuditEvent.Action.USER_IDENTITY_LINK)
    assert (event.actor, event.detail["subject"]) == (admin, "u-pat")
    again = client.post("/admin/accounts/externalidentity/add/", {**form, "user": manny.pk})
    assert again.status_code == 200  # the subject is pat's: not moved
    assert ExternalIdentity.objects.get().user == pat
    link = f"/admin/accounts/externalidentity/{pat.identities.get().pk}/change/"
    assert "u-pat" in client.get(link).content.decode()  # to read, never to change
    assert client.post(link, {**form, "user": manny.pk}).status_code == 403
    assert ExternalIdentity.objects.get().user == pat
