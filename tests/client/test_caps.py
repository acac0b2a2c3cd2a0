"""sgp caps list/set/clear: what is sent, the table, and the refusal's numbers."""

import json

import httpx

from tests.client.conftest import error

CAPS = {
    "project": "vision",
    "cluster": "portal-dev",
    "allocation": 3,
    "default_cap_gpu_hours": 50.0,
    "members": [
        {"username": "alice", "cap_gpu_hours": 200.0, "own_cap": True,
         "used_gpu_hours": 12.5, "remaining_gpu_hours": 187.5},
        {"username": "bob", "cap_gpu_hours": 50.0, "own_cap": False,
         "used_gpu_hours": 0.0, "remaining_gpu_hours": 50.0},
        {"username": "pat", "cap_gpu_hours": None, "own_cap": False,
         "used_gpu_hours": 1.0, "remaining_gpu_hours": None},
    ],
}  # fmt: skip


def test_list_is_a_table_of_each_members_cap_use_and_what_is_left(sgp, portal):
    portal.on("GET", "projects/vision/caps/", httpx.Response(200, json=CAPS))
    result = sgp("caps", "list", "vision", portal=portal)
    assert result.code == 0, result.err
    title, header, alice, bob, pat = result.out.splitlines()
    assert title == "vision on portal-dev: default cap 50.00 GPU-hours"
    assert header.split()[0] == "MEMBER"
    assert alice.split() == ["alice", "200.00", "12.50", "187.50"]
    assert bob.split() == ["bob", "50.00", "(default)", "0.00", "50.00"]
    assert pat.split() == ["pat", "-", "1.00", "-"]
    assert sgp("caps", "list", "vision", "--json", portal=portal).json() == CAPS


def test_set_puts_the_hours_for_a_member_or_every_member(sgp, portal):
    portal.on("PUT", "projects/vision/caps/alice/", httpx.Response(200, json=CAPS))
    portal.on("PUT", "projects/vision/caps/", httpx.Response(200, json=CAPS))
    assert sgp("caps", "set", "vision", "200", "--member", "alice", portal=portal).code == 0
    assert sgp("caps", "set", "vision", "50", "--cluster", "portal-dev", portal=portal).code == 0
    [one] = portal.sent("PUT", "projects/vision/caps/alice/")
    assert json.loads(one.content) == {"gpu_hours": 200.0}
    [every] = portal.sent("PUT", "projects/vision/caps/")
    assert json.loads(every.content) == {"gpu_hours": 50.0, "cluster": "portal-dev"}


def test_clear_deletes_and_a_member_is_told_they_may_not(sgp, portal):
    portal.on(
        "DELETE",
        "projects/vision/caps/alice/",
        error(403, "permission_denied", "Only the project's PI and co-PIs set caps."),
    )
    result = sgp("caps", "clear", "vision", "--member", "alice", portal=portal)
    assert result.code != 0
    assert "Only the project's PI" in result.err
    assert len(portal.sent("DELETE", "projects/vision/caps/alice/")) == 1  # no retry of a 403


def test_set_needs_the_hours_and_only_set_takes_them(sgp, portal):
    assert sgp("caps", "set", "vision", portal=portal).code == 2
    assert sgp("caps", "clear", "vision", "5", portal=portal).code == 2
    assert sgp("caps", "set", "vision", "-1", portal=portal).code == 2
    assert portal.requests == []


def test_a_job_over_the_cap_says_what_the_cap_leaves(sgp, portal, tmp_path):
    script = tmp_path / "train.sh"
    script.write_text("python train.py\n")
    portal.on(
        "POST",
        "jobs/",
        error(
            409,
            "quota_exceeded",
            "This needs 2.00 GPU-hours but your cap leaves you only 0.50.",
            requested_gpu_hours=2.0,
            available_gpu_hours=80.0,
            member_remaining_gpu_hours=0.5,
            limited_by="member_cap",
        ),
    )
    result = sgp(
        "submit", "--project", "vision", "--partition", "debug", "--gpus", "1", "--time", "120",
        "--script", str(script), portal=portal,
    )  # fmt: skip
    assert result.code != 0
    assert "available 80.00" in result.err and "your cap leaves you 0.50 GPU-hours" in result.err
