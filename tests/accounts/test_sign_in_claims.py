"""Issue 34, item 1: a provider's sign-in counts only with what the portal asked for.

With a directory, the provider's person is the directory's entry whose ``mail`` is their
verified ``email`` claim (``PORTAL_OIDC_DIRECTORY_MATCH=email=mail``), and that entry
must name the claimed Unix login. eve (the stack provider's persona: Unix login claim
``bob``, alice's address) used to become bob by leaving the ``email`` scope out: with no
address, the directory was searched by the claimed login, which always agrees.

Both ways in, through the stack's real provider and directory: the browser's (the test
client as the browser, the provider's own pages through httpx, the request's ``scope``
cut down where the browser could edit it) and the command line's device flow (a client
of one's own asking the provider for what it likes, then ``POST tokens/sign-in/``). The
provider the stack runs vouches for every address; an unverified one, and a sign-in
without one although every scope was granted, come from a second instance of the same
provider (``dev/oidc/server.js``) that the test starts with personas of its own.
"""

import json
import logging
import secrets
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import httpx
import pytest
from django.conf import settings
from django.test import Client

from accounts.models import ExternalIdentity, PersonalAccessToken, User
from accounts.oidc import claim_verified, scopes_not_granted
from tests.accounts.test_sign_in_cli import confirm_on_the_provider
from tests.accounts.test_sign_in_oidc import (
    portal,
    provider_callback,
    quick_survey,  # noqa: F401 - a fixture
    refused_on_the_login_page,
    signed_in_user,
)
from tests.conftest import REPO

pytestmark = pytest.mark.django_db

FULL = "openid email profile posix groups"  # the portal's PORTAL_OIDC_SCOPES on the stack
NOT_VERIFIED = "Your e-mail address is not verified at single sign-on"
NO_ADDRESS = "Your sign-in did not include your e-mail address"
CUT_DOWN = "Signing in with single sign-on did not grant everything the portal asks for"
OTHER_LOGIN = "Your sign-in and the site&#x27;s directory name different Unix logins"


@pytest.fixture(autouse=True)
def _the_stacks_scopes(settings):
    assert settings.OIDC_RP_SCOPES == FULL
    assert settings.OIDC_DIRECTORY_MATCH == "email=mail"
    # These sign-ins are anonymous API calls from one address: off the per-address
    # budget, which the tests after them in the same process would find spent (429).
    settings.API_ANON_RATE = None


# --- the browser's way in -------------------------------------------------------------


def sign_in_asking(client: Client, login: str, scope: str | None, password: str | None = None):
    """``login`` signs in with the request's ``scope`` edited on its way to the provider
    (None: as the portal wrote it), and comes back to the portal's callback."""
    authorize = client.get("/oidc/start/")["Location"]
    parts = urlsplit(authorize)
    query = parse_qs(parts.query)
    assert query["scope"] == [FULL]
    if scope is not None:
        query["scope"] = [scope]
    edited = urlunsplit(parts._replace(query=urlencode(query, doseq=True)))
    back = urlsplit(provider_callback(edited, login, password))
    return client.get(f"{back.path}?{back.query}", follow=True)


@pytest.mark.parametrize("scope", ["openid posix groups", "openid posix", "openid email posix"])
def test_eve_leaving_scopes_out_in_the_browser_is_refused_not_signed_in_as_bob(
    quick_survey,  # noqa: F811
    caplog,
    scope,
):
    caplog.set_level(logging.WARNING, logger="accounts.identity")
    page = sign_in_asking(portal(), "eve", scope)

    refused_on_the_login_page(page, CUT_DOWN)
    missing = " ".join(sorted(set(FULL.split()) - set(scope.split())))
    assert f"({missing} missing)" in page.content.decode()
    assert not User.objects.exists()
    assert not ExternalIdentity.objects.exists()
    assert f"the provider did not grant the scopes {missing!r}" in caplog.text


def test_alice_too_is_refused_without_her_address_there_is_no_fallback(
    quick_survey,  # noqa: F811
):
    refused_on_the_login_page(sign_in_asking(portal(), "alice.anders", "openid posix"), CUT_DOWN)
    assert not User.objects.exists()

    client = portal()  # the request as the portal wrote it: she is alice
    assert sign_in_asking(client, "alice.anders", None).redirect_chain[-1] == ("/", 302)
    assert signed_in_user(client).posix_username == "alice"


def test_eve_with_every_scope_is_refused_as_the_directory_says_her_address_is_alices(
    quick_survey,  # noqa: F811
    caplog,
):
    caplog.set_level(logging.WARNING, logger="accounts.identity")
    refused_on_the_login_page(sign_in_asking(portal(), "eve", None), OTHER_LOGIN)
    assert not User.objects.exists()
    assert "the provider says Unix login 'bob'" in caplog.text


# --- the command line's way in (device flow) ------------------------------------------


def device_flow(login: str, scope: str, password: str | None = None) -> dict:
    """A client of one's own (the command line's public client id) asks the provider
    for ``scope``; ``login`` confirms in a browser; the provider's token answer."""
    metadata = httpx.get(f"{settings.OIDC_ISSUER}/.well-known/openid-configuration").json()
    client = settings.OIDC_CLI_CLIENT_ID
    started = httpx.post(
        metadata["device_authorization_endpoint"], data={"client_id": client, "scope": scope}
    ).json()
    done = confirm_on_the_provider(started["verification_uri_complete"], login, password)
    assert "Device signed in" in done.text
    answer = httpx.post(
        metadata["token_endpoint"],
        data={
            "grant_type": "urn:ietf:params:oauth:grant-type:device_code",
            "device_code": started["device_code"],
            "client_id": client,
        },
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


def trade(client: Client, tokens: dict):
    return client.post(
        "/api/v1/tokens/sign-in/",
        {"id_token": tokens["id_token"], "access_token": tokens["access_token"], "name": "x"},
        content_type="application/json",
    )


@pytest.mark.parametrize("scope", ["openid posix groups", "openid posix"])
def test_eve_leaving_the_address_out_of_the_device_flow_gets_no_token_of_bobs(
    client,
    quick_survey,  # noqa: F811
    caplog,
    scope,
):
    caplog.set_level(logging.WARNING, logger="accounts.identity")
    tokens = device_flow("eve", scope)
    assert tokens["scope"] == scope  # the provider granted what she asked, no more

    answer = trade(client, tokens)

    assert answer.status_code == 403
    message = answer.json()["error"]["message"]
    assert message.startswith(NO_ADDRESS)
    assert "which the portal needs to find you in the site's directory" in message
    assert not PersonalAccessToken.objects.exists()
    assert not User.objects.exists()
    assert "no 'email' claim, which PORTAL_OIDC_DIRECTORY_MATCH matches" in caplog.text


def test_eve_with_every_scope_in_the_device_flow_is_refused_and_alice_is_let_in(
    client,
    quick_survey,  # noqa: F811
):
    refused = trade(client, device_flow("eve", FULL))
    assert refused.status_code == 403
    assert "name different Unix logins" in refused.json()["error"]["message"]
    assert not User.objects.exists()

    honest = trade(client, device_flow("alice.anders", "openid posix"))
    assert honest.status_code == 403
    assert honest.json()["error"]["message"].startswith(NO_ADDRESS)

    created = trade(client, device_flow("alice.anders", FULL))
    assert created.status_code == 201, created.content
    token = PersonalAccessToken.objects.get()
    assert (token.user.username, token.user.posix_username) == ("alice", "alice")


# --- a provider that has not verified an address, or sends none -----------------------

# Each would be alice or bob by the directory if what it claims were taken as it came.
PERSONAS = [
    {
        "login": "vera",
        "sub": "u-vera",
        "uid": "alice",
        "email": "alice@portal.test",
        "email_verified": False,
        "given_name": "Vera",
        "family_name": "Vale",
        "groups": [],
    },
    {
        "login": "norah",
        "sub": "u-norah",
        "uid": "bob",
        "given_name": "Norah",
        "family_name": "North",
        "groups": [],
    },
]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def own_provider(tmp_path: Path, settings) -> Iterator[dict[str, str]]:
    """The stack's provider program, started for this test with PERSONAS and the
    portal's client secret; the portal signs in with it. Yields their passwords."""
    passwords = {persona["login"]: secrets.token_urlsafe(12) for persona in PERSONAS}
    (tmp_path / "secrets.json").write_text(
        json.dumps(
            {
                "client_secret": settings.OIDC_RP_CLIENT_SECRET,
                "cookie_key": secrets.token_urlsafe(24),
                "passwords": passwords,
            }
        )
    )
    (tmp_path / "accounts.json").write_text(json.dumps(PERSONAS))
    issuer = f"http://127.0.0.1:{_free_port()}"
    server = REPO / "dev" / "oidc" / "server.js"
    log = (tmp_path / "oidc.log").open("w")
    process = subprocess.Popen(
        ["node", str(server), str(tmp_path)],
        env={
            "PATH": "/usr/bin:/bin",
            "OIDC_ISSUER": issuer,
            "OIDC_ACCOUNTS": str(tmp_path / "accounts.json"),
        },
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        for _try in range(100):
            try:
                if httpx.get(f"{issuer}/.well-known/openid-configuration").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None, (tmp_path / "oidc.log").read_text()
            time.sleep(0.1)
        else:
            pytest.fail(f"the provider at {issuer} did not start")
        settings.OIDC_ISSUER = issuer
        yield passwords
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


def test_an_address_the_provider_has_not_verified_finds_no_one_in_the_browser(
    own_provider,
    quick_survey,  # noqa: F811
    caplog,
):
    caplog.set_level(logging.WARNING, logger="accounts.identity")
    page = sign_in_asking(portal(), "vera", None, own_provider["vera"])

    refused_on_the_login_page(page, NOT_VERIFIED)
    assert not User.objects.exists()
    assert "the 'email' claim 'alice@portal.test' is not verified (email_verified)" in caplog.text


def test_an_address_the_provider_has_not_verified_finds_no_one_in_the_device_flow(
    own_provider,
    client,
    quick_survey,  # noqa: F811
):
    answer = trade(client, device_flow("vera", FULL, own_provider["vera"]))

    assert answer.status_code == 403
    assert answer.json()["error"]["message"].startswith(NOT_VERIFIED.replace("&#x27;", "'"))
    assert not PersonalAccessToken.objects.exists()
    assert not User.objects.exists()


def test_a_sign_in_without_an_address_is_refused_though_every_scope_was_granted(
    own_provider,
    client,
    quick_survey,  # noqa: F811
):
    refused_on_the_login_page(
        sign_in_asking(portal(), "norah", None, own_provider["norah"]), NO_ADDRESS
    )

    tokens = device_flow("norah", FULL, own_provider["norah"])
    assert tokens["scope"] == FULL
    answer = trade(client, tokens)
    assert answer.status_code == 403
    assert answer.json()["error"]["message"].startswith(NO_ADDRESS)
    assert not User.objects.exists()


# --- how the provider's words are read (pure logic) ----------------------------------


@pytest.mark.parametrize(
    ("said", "verified"),
    [({}, True), ({"email_verified": True}, True), ({"email_verified": " TRUE "}, True)]
    + [({"email_verified": v}, False) for v in (False, "false", 1, None, "yes", [])],
)
def test_an_address_is_unverified_whenever_the_provider_says_anything_but_true(said, verified):
    assert claim_verified({"email": "a@b", **said}, "email") is verified


def test_a_token_answer_without_scope_grants_what_was_asked_and_a_garbled_one_nothing():
    assert scopes_not_granted(None) == frozenset()
    assert scopes_not_granted(FULL) == frozenset()
    assert scopes_not_granted(f"{FULL} offline_access") == frozenset()
    assert scopes_not_granted("openid posix") == {"email", "profile", "groups"}
    assert scopes_not_granted(["openid"]) == set(FULL.split())
