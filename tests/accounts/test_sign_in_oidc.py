"""Signing in with the stack's OpenID provider (``dev/stack``'s ``oidc``), the real one:
the portal's side through Django's test client, the provider's own pages through httpx,
the code exchanged by the portal with the provider's token endpoint (PKCE, RS256).

The portal names its callback from the request's host; the provider accepts only
127.0.0.1 or localhost (any port) there, so the test client speaks as ``PORTAL_HOST``.
Nothing listens on that port: the browser's last hop (to the callback) is the test
client's request, and the redirect URI needs only be the same string at both ends.
"""

import logging
import re
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from django.conf import settings
from django.contrib.auth import SESSION_KEY
from django.core.cache import cache
from django.test import Client

from accounts.models import ExternalIdentity, Membership, User
from accounts.services import project_create

pytestmark = pytest.mark.django_db

PORTAL_HOST = "127.0.0.1:8765"
CALLBACK = f"http://{PORTAL_HOST}/oidc/callback/"


def provider_password(login: str) -> str:
    return (settings.STACK_DIR / "secrets" / f"oidc-user-{login}").read_text().strip()


def portal() -> Client:
    """A browser's session with the portal, at an address the provider sends back to."""
    return Client(HTTP_HOST=PORTAL_HOST)


def provider_callback(authorize_url: str, login: str, password: str | None = None) -> str:
    """Through the provider's own pages as ``login`` (``password``: the stack's for them),
    its log-in form, then where it sends the browser back (the portal's callback with a
    code)."""
    with httpx.Client(timeout=10, follow_redirects=False) as browser:
        response = browser.get(authorize_url)
        for _hop in range(10):
            location = response.headers.get("location", "")
            if location.startswith(CALLBACK):
                return location
            if response.is_redirect:
                response = browser.get(response.url.join(location))
                continue
            assert response.status_code == 200, response.text[:500]
            form = re.search(r'<form method="post" action="([^"]+)"', response.text)
            assert form and "Username" in response.text and "Sign in" in response.text
            response = browser.post(
                response.url.join(form[1]),
                data={"username": login, "password": password or provider_password(login)},
            )
    pytest.fail(f"the provider never sent {login} back to the portal")


def sign_in(client: Client, login: str, **start_query: str):
    """``login`` clicks "Log in with …", signs in at the provider, and comes back: the
    portal's answer to the callback, followed to the page it leads to."""
    start = client.get("/oidc/start/", start_query)
    assert start.status_code == 302
    authorize = start["Location"]
    assert authorize.startswith(f"{settings.OIDC_ISSUER}/auth?")
    query = parse_qs(urlsplit(authorize).query)
    assert query["redirect_uri"] == [CALLBACK]
    assert query["code_challenge_method"] == ["S256"] and query["code_challenge"]
    back = urlsplit(provider_callback(authorize, login))
    return client.get(f"{back.path}?{back.query}", follow=True)


def signed_in_user(client: Client) -> User | None:
    user_id = client.session.get(SESSION_KEY)
    return User.objects.get(pk=user_id) if user_id else None


def refused_on_the_login_page(response, message: str) -> None:
    assert response.redirect_chain[-1] == ("/login/", 302), response.redirect_chain
    assert response.status_code == 200
    assert message in response.content.decode()
    assert SESSION_KEY not in response.client.session


@pytest.fixture
def quick_survey(celery_worker):
    """A worker answers the sign-in's question at once (no cluster of this test's
    transaction is committed, so it knows of none: the sign-in goes on)."""


def test_alice_signs_in_as_alice_not_as_the_name_she_typed(quick_survey):
    client = portal()
    page = sign_in(client, "alice.anders")

    assert page.redirect_chain[-1] == ("/", 302)
    assert "Log out alice" in page.content.decode()
    alice = signed_in_user(client)
    assert alice is not None
    # The Unix login is the provider's uid claim; the name typed there is only recorded.
    assert (alice.username, alice.posix_username) == ("alice", "alice")
    assert (alice.email, alice.first_name, alice.last_name) == (
        "alice@portal.test",
        "Alice",
        "Anders",
    )
    assert not alice.has_usable_password()
    assert not User.objects.filter(username="alice.anders").exists()
    assert not User.objects.filter(posix_username="alice.anders").exists()
    identity = ExternalIdentity.objects.get(user=alice)
    assert (identity.source, identity.issuer, identity.subject, identity.login) == (
        "oidc",
        settings.OIDC_ISSUER,
        "u-alice",
        "alice.anders",
    )

    # Again, in another browser: the same user, nothing new.
    again = portal()
    assert "Log out alice" in sign_in(again, "alice.anders").content.decode()
    assert signed_in_user(again) == alice
    assert User.objects.count() == 1
    assert ExternalIdentity.objects.count() == 1

    # Logging out ends the portal's session.
    assert client.post("/logout/")["Location"] == "/login/"
    assert SESSION_KEY not in client.session
    assert client.get("/")["Location"].startswith("/login/?next=")


def test_the_page_asked_for_before_signing_in_is_where_it_ends(quick_survey):
    page = sign_in(portal(), "alice.anders", next="/jobs/")
    assert page.redirect_chain[-1] == ("/jobs/", 302)
    assert page.status_code == 200


def test_root_from_the_provider_is_refused(quick_survey, caplog):
    caplog.set_level(logging.WARNING, logger="accounts.identity")
    page = sign_in(portal(), "mallory")

    refused_on_the_login_page(page, "Your account&#x27;s Unix login cannot run jobs.")
    assert not User.objects.exists()
    assert not ExternalIdentity.objects.exists()
    assert "sign-in refused: oidc 'mallory'" in caplog.text
    assert "Unix login 'root'" in caplog.text


@pytest.mark.slurm
@pytest.mark.django_db(transaction=True)
def test_a_login_that_exists_on_no_cluster_is_refused(dev_cluster, settings, caplog):
    """The worker looks ``nosuchuser`` up where the dev cluster's jobs are submitted. A
    site with a provider and no directory: with the directory, ghost (in none) would be
    refused before the workers are asked."""
    settings.LDAP_URL = ""
    caplog.set_level(logging.WARNING, logger="accounts.identity")
    page = sign_in(portal(), "ghost")

    refused_on_the_login_page(
        page, "Your Unix login nosuchuser cannot run jobs on any of the portal&#x27;s clusters"
    )
    assert not User.objects.exists()
    assert f"{dev_cluster.name}: The Unix login 'nosuchuser' does not exist" in caplog.text


def test_a_claim_the_directory_contradicts_is_refused(quick_survey, caplog):
    """eve's claim says bob; the directory's entry with her address is alice's."""
    caplog.set_level(logging.WARNING, logger="accounts.identity")
    page = sign_in(portal(), "eve")

    refused_on_the_login_page(page, "Your sign-in and the site&#x27;s directory name different")
    assert not User.objects.exists()
    assert "the provider says Unix login 'bob'" in caplog.text
    assert "uid=alice,ou=people,dc=portal,dc=test says 'alice'" in caplog.text


def test_the_provider_s_groups_make_pat_pi_of_vision(quick_survey):
    vision = project_create(slug="vision", name="Vision Lab", slurm_account="vision")
    client = portal()
    sign_in(client, "pat.park")

    pat = signed_in_user(client)
    assert pat is not None and pat.posix_username == "pat"
    membership = Membership.objects.get(user=pat)
    assert (membership.project, membership.role, membership.source) == (
        vision,
        Membership.Role.PI,
        Membership.Source.DIRECTORY,
    )


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("code=x&state=y", "This sign-in link has expired or was used"),
        ("state=y", "This sign-in link has expired or was used"),
        ("", "This sign-in link has expired or was used"),
        ("error=access_denied&state=y", "Signing in was cancelled or refused at single sign-on"),
        ("error=%00&error_description=x", "Signing in was cancelled or refused"),
    ],
)
def test_a_callback_this_browser_did_not_start_leads_to_the_login_page(db, query, message):
    response = portal().get(f"/oidc/callback/?{query}", follow=True)
    refused_on_the_login_page(response, message)


def test_an_unknown_state_or_a_refusal_at_the_provider_ends_the_sign_in(db):
    client = portal()
    start = client.get("/oidc/start/")
    state = parse_qs(urlsplit(start["Location"]).query)["state"][0]

    refused_on_the_login_page(
        client.get("/oidc/callback/?code=x&state=other", follow=True), "has expired or was used"
    )
    refused_on_the_login_page(
        client.get(f"/oidc/callback/?error=access_denied&state={state}", follow=True),
        "Signing in was cancelled or refused",
    )
    assert state not in client.session["oidc_states"]  # used up: never again
    refused_on_the_login_page(
        client.get(f"/oidc/callback/?code=x&state={state}", follow=True), "has expired"
    )


def test_a_callback_from_another_issuer_is_refused(db):
    client = portal()
    state = parse_qs(urlsplit(client.get("/oidc/start/")["Location"]).query)["state"][0]
    response = client.get(
        f"/oidc/callback/?code=x&state={state}&iss=https://evil.example", follow=True
    )
    refused_on_the_login_page(response, "The sign-in could not be verified")
    assert state not in client.session["oidc_states"]


def test_a_code_the_provider_does_not_know_is_refused(db):
    client = portal()
    state = parse_qs(urlsplit(client.get("/oidc/start/")["Location"]).query)["state"][0]
    response = client.get(f"/oidc/callback/?code=made-up&state={state}", follow=True)
    refused_on_the_login_page(response, "The sign-in could not be verified; try again.")


def test_a_signed_in_user_is_not_logged_out_by_a_stray_callback(db, alice):
    client = portal()
    client.force_login(alice)
    client.get("/oidc/callback/?error=access_denied")
    assert client.session.get(SESSION_KEY) == str(alice.pk)


def test_with_the_provider_unreachable_the_button_says_so_and_passwords_work(
    db, alice, settings, caplog
):
    settings.OIDC_ISSUER = "http://127.0.0.1:9"  # discard: nothing listens there
    cache.delete(f"accounts:oidc:metadata:{settings.OIDC_ISSUER}")
    client = portal()
    assert "Log in with single sign-on" in client.get("/login/").content.decode()

    page = client.get("/oidc/start/", follow=True)
    refused_on_the_login_page(page, "Signing in with single sign-on is not possible right now")
    assert "sign-in with http://127.0.0.1:9 failed" in caplog.text

    logged_in = client.post(
        "/login/", {"username": "alice", "password": "alice-pass-1234"}, follow=True
    )
    assert logged_in.redirect_chain[-1] == ("/", 302)
    assert signed_in_user(client) == alice
