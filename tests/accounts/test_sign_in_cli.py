"""`sgp login --sso`: the command line signs in through the stack's real provider (device
flow), and the portal trades the provider's ID token for a portal token only when the
provider signed it, for the command line's client, freshly, once."""

import html
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import jwt
import pytest
from django.conf import settings

from accounts.models import PersonalAccessToken, User
from tests.conftest import REPO

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("transactional_db")]


def provider_password(login: str) -> str:
    return (settings.STACK_DIR / "secrets" / f"oidc-user-{login}").read_text().strip()


def form_of(page: httpx.Response, form_id: str | None = None) -> tuple[str, dict[str, str]]:
    """The action and the fields of the page's form (the first, or the one with form_id)."""
    text = page.text
    forms = re.findall(r"<form\b([^>]*)>(.*?)</form>", text, re.S)
    for attributes, body in forms:
        if form_id is None or f'id="{form_id}"' in attributes:
            action = html.unescape(re.search(r'action="([^"]*)"', attributes)[1])
            fields = {
                html.unescape(name): html.unescape(value)
                for name, value in re.findall(
                    r'<input[^>]*name="([^"]+)"[^>]*value="([^"]*)"', body
                )
            }
            return str(page.url.join(action)), fields
    raise AssertionError(f"no form {form_id or ''} in {page.url}:\n{text[:2000]}")


def confirm_on_the_provider(link: str, login: str, password: str | None = None) -> httpx.Response:
    """What the person does in their browser: open the link (it carries the code and
    sends itself on), confirm the device, sign in on the provider's page (``password``:
    the stack's for them)."""
    with httpx.Client(follow_redirects=True, timeout=15) as browser:
        page = browser.get(link)
        action, fields = form_of(page)  # the page that sends the code on by itself
        page = browser.post(action, data=fields)
        action, fields = form_of(page, "op.deviceConfirmForm")
        page = browser.post(action, data=fields)
        action, fields = form_of(page)
        return browser.post(
            action,
            data={**fields, "username": login, "password": password or provider_password(login)},
        )


def sgp(*args: str, config: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "client", *args],
        cwd=REPO,
        env={"SGP_CONFIG": str(config), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sgp_login_sso_signs_alice_in_through_the_provider_and_keeps_a_portal_token(
    live_server, dev_cluster, tmp_path
):
    config = tmp_path / "sgp.json"
    command = sgp("login", "--sso", "--url", live_server.url, config=config)
    link = None
    assert command.stderr is not None
    for line in command.stderr:
        if found := re.search(r"open (http\S+)", line):
            link = found[1]
            break
    assert link, "sgp printed no address to open"
    done = confirm_on_the_provider(link, "alice.anders")
    assert "Device signed in" in done.text
    out, err = command.communicate(timeout=60)

    assert command.returncode == 0, err
    assert "as alice" in out
    alice = User.objects.get(username="alice")
    assert alice.posix_username == "alice"
    token = PersonalAccessToken.objects.get(user=alice)
    assert token.name.startswith("sgp on ")
    stored = json.loads(config.read_text())
    assert stored["token"].startswith("sgp_")
    answer = httpx.get(
        f"{live_server.url}/api/v1/me/",
        headers={"Authorization": f"Bearer {stored['token']}"},
    )
    assert answer.json()["username"] == "alice"


def forged(**claims) -> str:
    """An ID token signed with the provider's own key (the tests run as root and can
    read it): what the provider would issue, with the claims given."""
    keys = json.loads((settings.STACK_DIR / "oidc" / "jwks.json").read_text())["keys"]
    key = keys[0]
    now = int(time.time())
    payload = {
        "iss": settings.OIDC_ISSUER,
        "aud": settings.OIDC_CLI_CLIENT_ID,
        "sub": "u-alice",
        "iat": now,
        "exp": now + 600,
        "uid": "alice",
        **claims,
    }
    return jwt.encode(payload, jwt.PyJWK(key).key, algorithm="RS256", headers={"kid": key["kid"]})


@pytest.mark.parametrize(
    ("claims", "says"),
    [
        ({"aud": "slurm-gpu-portal"}, "Audience doesn't match"),
        ({"iss": "http://127.0.0.1:9081"}, "Invalid issuer"),
        ({"iat": int(time.time()) - 3600}, "not fresh"),
        ({"exp": int(time.time()) - 120}, "expired"),
    ],
)
def test_an_id_token_not_for_the_command_line_or_not_fresh_is_refused(live_server, claims, says):
    answer = httpx.post(
        f"{live_server.url}/api/v1/tokens/sign-in/",
        json={"id_token": forged(**claims), "access_token": "x", "name": "laptop"},
    )
    assert answer.status_code == 401
    assert says in answer.json()["error"]["message"]
    assert not PersonalAccessToken.objects.exists()


def test_a_token_signed_by_another_key_or_used_twice_is_refused(live_server):
    url = f"{live_server.url}/api/v1/tokens/sign-in/"
    other = jwt.encode(
        {"iss": settings.OIDC_ISSUER, "aud": "sgp", "sub": "u-alice", "iat": 1, "exp": 2},
        "a-shared-secret-of-thirty-two-bytes!",
        algorithm="HS256",
    )
    refused = httpx.post(url, json={"id_token": other, "access_token": "x", "name": "n"})
    assert refused.status_code == 401
    assert "signed with 'HS256'" in refused.json()["error"]["message"]

    token = forged()
    first = httpx.post(
        url, json={"id_token": token, "access_token": "not-the-providers", "name": "n"}
    )
    assert "does not take the access token" in first.json()["error"]["message"]
    again = httpx.post(url, json={"id_token": token, "access_token": "x", "name": "n"})
    assert again.status_code == 401
    assert "used already" in again.json()["error"]["message"]
    assert not PersonalAccessToken.objects.exists()


def test_the_command_line_learns_where_the_provider_is(client, settings):
    where = client.get("/api/v1/sign-in/").json()
    assert where["client_id"] == "sgp"
    assert where["device_authorization_endpoint"].startswith(settings.OIDC_ISSUER)

    settings.OIDC_CLI_CLIENT_ID = ""
    assert client.get("/api/v1/sign-in/").status_code == 404
    answer = client.post(
        "/api/v1/tokens/sign-in/", {"id_token": "x"}, content_type="application/json"
    )
    assert answer.status_code == 404
