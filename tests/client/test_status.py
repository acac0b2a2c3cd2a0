"""sgp status: a table of GPUs and queue per partition; the stuck-GPU warning for
allocation managers (the API sends ``stuck`` to them only); --json is the API's."""

import httpx


def counts(total, in_use, idle, unavailable):
    return {"total": total, "in_use": in_use, "idle": idle, "unavailable": unavailable}


def cluster(name, *, stuck=None, error=""):
    gpus = counts(8, 1, 7, 0)
    partition = {"gpus": gpus, "gpu_types": [{"type": "h200", **gpus}],
                 "nodes_by_state": {"mixed": 1}, "pending_jobs": 3, "pending_gpus": 24,
                 "running_jobs": 1}  # fmt: skip
    body = {
        "cluster": name, "taken_at": "2026-12-04T05:30:00+00:00", "error": error,
        "error_at": "2026-12-04T05:31:00+00:00" if error else None, "gpus": gpus,
        "gpu_types": [{"type": "h200", **gpus}], "nodes_by_state": {"mixed": 1},
        "pending_jobs": 3, "pending_gpus": 24, "running_jobs": 1,
        "partitions": [{"name": "debug", **partition}, {"name": "gpu", **partition}],
    }  # fmt: skip
    if stuck is not None:
        body["stuck"] = stuck
    return body


STUCK = {
    "nodes": [{"name": "vm", "allocated_gpus": 8, "held_by_jobs": 0, "stuck_gpus": 8,
               "since": "2026-12-04T05:20:00+00:00"}],
    "gpus": 8, "pending_bound_minutes": 10, "waiting_count": 27, "waiting_jobs": [],
}  # fmt: skip


def test_status_is_a_table_per_partition(sgp, portal):
    status = {"clusters": [cluster("portal-dev"), cluster("portal-next", error="timed out")]}
    portal.on("GET", "status/", httpx.Response(200, json=status))
    result = sgp("status", portal=portal)
    assert result.code == 0, result.err
    header, *rows = result.out.splitlines()
    assert header.split()[:3] == ["CLUSTER", "PARTITION", "GPU"]
    assert rows[0].split() == ["portal-dev", "debug", "h200", "8", "1", "7", "0", "3", "24",
                               "1", "mixed"]  # fmt: skip
    assert len(rows[0]) <= len(header) + len(" 1 mixed")
    assert any("portal-next: as of" in row and "failed" in row and "timed out" in row
               for row in rows)  # fmt: skip
    assert result.err == ""


def test_status_warns_a_manager_of_stuck_gpus(sgp, portal):
    portal.on("GET", "status/", httpx.Response(200, json={"clusters": [cluster("d", stuck=STUCK)]}))
    result = sgp("status", portal=portal)
    assert result.code == 0
    assert "node vm has 8 GPUs allocated to no job" in result.err
    assert "27 jobs pending longer than 10 minutes" in result.err


def test_status_json_is_the_apis_and_no_cluster_yet_is_said(sgp, portal):
    status = {"clusters": [cluster("portal-dev")]}
    portal.on("GET", "status/", httpx.Response(200, json=status))
    assert sgp("status", "--json", portal=portal).json() == status
    portal.on("GET", "status/", httpx.Response(200, json={"clusters": []}))
    result = sgp("status", portal=portal)
    assert result.code == 0 and "No cluster has been read yet" in result.err
