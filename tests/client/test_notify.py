"""sgp notify: shows the job-end mail preference, or sets it with one PATCH of me/."""

import json

import httpx

from tests.client.conftest import FakePortal

ME = {"id": 1, "username": "alice", "email": "alice@example.org", "job_mail": "failures",
      "mail_language": ""}  # fmt: skip


def test_without_a_flag_it_shows_the_preference(sgp, portal: FakePortal):
    portal.on("GET", "me/", httpx.Response(200, json=ME))
    result = sgp("notify", portal=portal)
    assert result.code == 0, result.err
    assert "failed jobs only" in result.out
    assert portal.sent("PATCH", "me/") == []


def test_a_flag_sets_it(sgp, portal: FakePortal):
    portal.on("PATCH", "me/", httpx.Response(200, json={**ME, "job_mail": "never"}))
    result = sgp("notify", "--never", "--json", portal=portal)
    assert result.code == 0, result.err
    (request,) = portal.sent("PATCH", "me/")
    assert json.loads(request.content) == {"job_mail": "never"}
    assert result.json() == {"job_mail": "never", "mail_language": ""}


def test_two_choices_at_once_are_a_usage_error(sgp, portal: FakePortal):
    try:
        code = sgp("notify", "--all", "--never", portal=portal).code
    except SystemExit as exit:
        code = exit.code
    assert code == 2
    assert portal.requests == []
