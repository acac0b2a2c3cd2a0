"""sgp projects: an allocation granted for a later period is listed after the one in force,
with its hours granted and none available, saying when it starts."""

import httpx

ALLOCATION = {
    "cluster": "portal-dev",
    "state": "active",
    "used_gpu_hours": 0.0,
    "held_gpu_hours": 0.0,
}


def test_a_later_grant_shows_when_it_starts_and_adds_nothing_available(sgp, portal):
    project = {
        "slug": "vision",
        "name": "Vision",
        "role": "pi",
        "balance": {
            "granted_gpu_hours": 100.0,
            "used_gpu_hours": 0.0,
            "held_gpu_hours": 0.0,
            "available_gpu_hours": 100.0,
        },
        "allocations": [
            {**ALLOCATION, "id": 2, "starts_on": "2027-01-01", "ends_on": "2027-07-01",
             "in_force": False, "granted_gpu_hours": 250.0, "available_gpu_hours": 250.0},
            {**ALLOCATION, "id": 1, "starts_on": "2026-12-01", "ends_on": "2027-01-01",
             "in_force": True, "granted_gpu_hours": 100.0, "available_gpu_hours": 100.0},
        ],
    }  # fmt: skip
    portal.on("GET", "projects/", httpx.Response(200, json=[project]))
    lines = sgp("projects", portal=portal).out.splitlines()
    assert len(lines) == 3, lines
    assert lines[1].split()[-1] == "100.00"  # in force first
    assert lines[2].split()[-2:] == ["from", "2027-01-01"]
    assert "250.00" in lines[2] and "350" not in "".join(lines)
