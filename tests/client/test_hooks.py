"""sgp hooks: list, add (the secret printed once), test and delete, against a fake portal."""

import json

import httpx

HOOK = {
    "id": 7, "url": "https://hooks.example.org/x", "project": None, "events": ["job.ended"],
    "format": "json", "created_at": "2026-12-04T05:00:00+00:00", "disabled_at": None,
    "disabled_reason": "", "consecutive_failures": 0, "last_event": "job.ended",
    "last_state": "delivered", "last_status": 200, "last_error": "",
    "last_attempt_at": "2026-12-04T05:10:00+00:00",
}  # fmt: skip


def test_hooks_lists_them_with_the_last_delivery_and_why_one_is_disabled(sgp, portal):
    off = HOOK | {"id": 8, "project": "vision", "disabled_at": "2026-12-04T05:20:00+00:00",
                  "disabled_reason": "Disabled after 15 failed deliveries in a row"}  # fmt: skip
    portal.on("GET", "hooks/", httpx.Response(200, json=[HOOK, off]))
    result = sgp("hooks", portal=portal)
    assert result.code == 0, result.err
    header, first, second, note = result.out.splitlines()
    assert header.split()[:3] == ["ID", "FOR", "URL"]
    assert "delivered HTTP 200" in first and first.split()[1] == "me"
    assert second.split()[1] == "vision" and second.rstrip().endswith("disabled")
    assert note == "hook 8: Disabled after 15 failed deliveries in a row"


def test_hooks_add_sends_the_events_and_prints_the_secret(sgp, portal):
    portal.on("POST", "hooks/", httpx.Response(201, json=HOOK | {"secret": "whsec_abc"}))
    events = ["--event", "allocation.usage_80", "--event", "job.ended"]
    result = sgp("hooks", "add", "https://hooks.example.org/x", "--project", "vision", *events,
                 portal=portal)  # fmt: skip
    assert result.code == 0, result.err
    [sent] = portal.sent("POST", "hooks/")
    assert json.loads(sent.content) == {
        "url": "https://hooks.example.org/x", "events": ["allocation.usage_80", "job.ended"],
        "format": "json", "project": "vision",
    }  # fmt: skip
    assert result.out.splitlines()[-1] == "whsec_abc"


def test_hooks_add_refused_says_why(sgp, portal):
    refusal = {"error": {"code": "invalid", "fields": {"__all__": ["10.0.0.1 is private"]},
                         "message": "This address cannot receive webhooks"}}  # fmt: skip
    portal.on("POST", "hooks/", httpx.Response(400, json=refusal))
    result = sgp("hooks", "add", "http://10.0.0.1/", portal=portal)
    assert result.code != 0 and "10.0.0.1 is private" in result.err


def test_hooks_test_and_delete(sgp, portal):
    portal.on("POST", "hooks/7/test/", httpx.Response(202, json={"delivery": 3}))
    portal.on("DELETE", "hooks/7/", httpx.Response(204))
    assert sgp("hooks", "test", "7", portal=portal).out.strip() == "test delivery 3 queued"
    deleted = sgp("hooks", "delete", "7", portal=portal)
    assert (deleted.code, deleted.out.strip()) == (0, "hook 7 deleted")
    assert sgp("hooks", "delete", "x", portal=portal).code == 2
