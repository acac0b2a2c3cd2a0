"""sgp login: the token is checked with GET me/ and kept in a 0600 file; the environment
overrides it; without either, commands exit 3."""

import io
import json
import os
import stat
import sys

import httpx

from tests.client.conftest import TOKEN, URL, FakePortal, error

ME = {"id": 1, "username": "alice", "projects": [{"slug": "vision", "role": "member"}]}


def config_file() -> str:
    return os.environ["SGP_CONFIG"]


def stored() -> dict:
    with open(config_file()) as file:
        return json.load(file)


def test_it_checks_the_token_and_keeps_it_readable_only_by_the_user(sgp):
    portal = FakePortal()
    portal.on("GET", "me/", httpx.Response(200, json=ME))
    result = sgp("login", "--url", f"{URL}/", "--token", TOKEN, portal=portal)
    assert result.code == 0, result.err
    assert "as alice" in result.out and "vision (member)" in result.out
    (request,) = portal.requests
    assert str(request.url) == f"{URL}/api/v1/me/"
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"
    assert stored() == {"url": URL, "token": TOKEN}
    assert stat.S_IMODE(os.stat(config_file()).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(config_file())).st_mode) == 0o700


def test_later_commands_use_the_stored_login(sgp):
    portal = FakePortal()
    portal.on("GET", "me/", httpx.Response(200, json=ME))
    portal.on("GET", "projects/", httpx.Response(200, json=[]))
    assert sgp("login", "--url", URL, "--token", TOKEN, portal=portal).code == 0
    assert sgp("projects", "--json", portal=portal).code == 0
    assert portal.requests[-1].headers["Authorization"] == f"Bearer {TOKEN}"


def test_the_token_comes_from_stdin_when_not_given(sgp, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{TOKEN}\n"))
    portal = FakePortal()
    portal.on("GET", "me/", httpx.Response(200, json=ME))
    assert sgp("login", "--url", URL, portal=portal).code == 0
    assert stored()["token"] == TOKEN


def test_an_api_address_is_stored_as_the_portals(sgp):
    portal = FakePortal()
    portal.on("GET", "me/", httpx.Response(200, json=ME))
    assert sgp("login", "--url", f"{URL}/api/v1/", "--token", TOKEN, portal=portal).code == 0
    assert stored()["url"] == URL


def test_a_refused_token_exits_3_and_stores_nothing(sgp):
    portal = FakePortal()
    portal.on("GET", "me/", error(401, "authentication_failed", "This access token has expired."))
    result = sgp("login", "--url", URL, "--token", TOKEN, portal=portal)
    assert result.code == 3
    assert "expired" in result.err
    assert not os.path.exists(config_file())


def test_a_relogin_replaces_the_token_and_keeps_the_mode(sgp):
    portal = FakePortal()
    portal.on("GET", "me/", httpx.Response(200, json=ME))
    assert sgp("login", "--url", URL, "--token", "sgp_old", portal=portal).code == 0
    os.chmod(config_file(), 0o644)
    assert sgp("login", "--token", TOKEN, portal=portal).code == 0  # the stored URL
    assert stored() == {"url": URL, "token": TOKEN}
    assert stat.S_IMODE(os.stat(config_file()).st_mode) == 0o600


def test_plain_http_to_another_machine_is_warned_about(sgp):
    portal = FakePortal()
    portal.on("GET", "me/", httpx.Response(200, json=ME))
    assert "unencrypted" in sgp("login", "--url", URL, "--token", TOKEN, portal=portal).err
    local = sgp("login", "--url", "http://127.0.0.1:8000", "--token", TOKEN, portal=portal)
    assert "unencrypted" not in local.err


def test_login_needs_an_address(sgp):
    result = sgp("login", "--token", TOKEN, portal=FakePortal())
    assert result.code == 2 and "--url" in result.err
    assert sgp("login", "--url", "portal.test", "--token", TOKEN).code == 2


def test_without_a_login_commands_exit_3_saying_how(sgp):
    result = sgp("projects")
    assert result.code == 3
    assert "sgp login" in result.err


def test_the_environment_wins_over_the_file(sgp, monkeypatch):
    portal = FakePortal()
    portal.on("GET", "me/", httpx.Response(200, json=ME))
    portal.on("GET", "projects/", httpx.Response(200, json=[]))
    assert (
        sgp("login", "--url", "http://stored.test", "--token", "sgp_stored", portal=portal).code
        == 0
    )
    monkeypatch.setenv("SGP_URL", URL)
    monkeypatch.setenv("SGP_TOKEN", TOKEN)
    assert sgp("projects", portal=portal).code == 0
    request = portal.requests[-1]
    assert request.url.host == "portal.test"
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"


def test_a_config_readable_by_others_is_warned_about(sgp, portal, tmp_path, monkeypatch):
    path = tmp_path / "loose.json"
    path.write_text(json.dumps({"url": URL, "token": TOKEN}))
    os.chmod(path, 0o644)
    monkeypatch.setenv("SGP_CONFIG", str(path))
    portal.on("GET", "projects/", httpx.Response(200, json=[]))
    assert "chmod 600" in sgp("projects", portal=portal).err
