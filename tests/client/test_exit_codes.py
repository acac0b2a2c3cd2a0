"""Exit codes scripts can rely on, for every way the portal can refuse or not answer;
and which refusals are worth a retry."""

import httpx
import pytest

from client.exits import Exit
from tests.client.conftest import error


@pytest.mark.parametrize(
    ("reply", "code"),
    [
        (error(400, "invalid", "The request is not valid."), Exit.REFUSED),
        (error(401, "authentication_failed", "This access token is not known."), 3),
        (error(403, "permission_denied", "Your role does not allow this."), Exit.REFUSED),
        (error(404, "not_found", "There is no job 5 of yours."), Exit.NOT_FOUND),
        (error(409, "quota_exceeded", "This needs 2.00 GPU-hours but only 1.00 are."), 5),
        (error(429, "throttled", "Request was throttled.", retry_after=None), 7),
        (error(500, "error", "Server error."), Exit.UNAVAILABLE),
        (error(503, "slurm_unavailable", "The cluster does not answer."), 6),
        (httpx.Response(502, text="<html>Bad Gateway</html>"), 6),
        (httpx.Response(301, headers={"Location": "https://portal.test/"}), 3),
        (httpx.Response(200, text="<html>a web page</html>"), 6),
        (httpx.Response(404, text="<html>Not Found</html>"), 4),
    ],
)
def test_each_answer_has_its_exit_code(sgp, portal, reply, code):
    portal.on("GET", "jobs/5/", reply)
    result = sgp("show", "5", portal=portal)
    assert result.code == code
    assert result.err.startswith("sgp: ")
    assert result.out == ""


def test_the_apis_message_is_printed(sgp, portal):
    portal.on("GET", "jobs/5/", error(403, "permission_denied", "Only the project's PI."))
    assert "Only the project's PI." in sgp("show", "5", portal=portal).err


def test_a_refused_token_says_to_log_in_again(sgp, portal):
    portal.on("GET", "jobs/", error(401, "authentication_failed", "This token has been revoked."))
    result = sgp("jobs", portal=portal)
    assert result.code == 3
    assert "revoked" in result.err and "sgp login" in result.err


def test_a_portal_that_does_not_answer_exits_6_after_a_few_tries(sgp, portal):
    def refused(request):
        raise httpx.ConnectError("connection refused", request=request)

    portal.on("GET", "projects/", refused)
    result = sgp("projects", portal=portal)
    assert result.code == 6
    assert "does not answer" in result.err and "portal.test" in result.err
    assert len(portal.requests) == 3


def test_a_brief_outage_is_ridden_out(sgp, portal):
    portal.on(
        "GET", "projects/", httpx.Response(503, text="starting"), httpx.Response(200, json=[])
    )
    assert sgp("projects", "--json", portal=portal).code == 0
    assert len(portal.requests) == 2


def test_a_short_rate_limit_is_waited_out_and_a_long_one_exits_7(sgp, portal):
    slow_down = error(429, "throttled", "Request was throttled.")
    slow_down.headers["Retry-After"] = "2"
    portal.on("GET", "projects/", slow_down, httpx.Response(200, json=[]))
    assert sgp("projects", "--json", portal=portal).code == 0
    assert len(portal.requests) == 2

    portal.requests.clear()
    long_wait = error(429, "throttled", "Request was throttled.")
    long_wait.headers["Retry-After"] = "120"
    portal.on("GET", "projects/", long_wait)
    result = sgp("projects", portal=portal)
    assert result.code == 7
    assert "try again in 120 s" in result.err
    assert len(portal.requests) == 1


def test_a_refusal_is_not_retried(sgp, portal):
    portal.on("GET", "jobs/", error(400, "invalid", "Unknown state 'done'."))
    assert sgp("jobs", "--state", "done", portal=portal).code == 5
    assert len(portal.requests) == 1
